#include "server/startup_signal_watch.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <ctime>
#include <string>
#include <utility>

#include "server/logging.h"

namespace srformer::server {

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "SIGINT";
  }
}

StartupSignalWatch::StartupSignalWatch(const sigset_t& signals, bool log_json, std::function<void()> exit)
    : signals_(signals), log_json_(log_json), exit_(std::move(exit)), thread_([this] { watch(); }) {}

StartupSignalWatch::~StartupSignalWatch() {
  done_.store(true);
  thread_.join();
}

void StartupSignalWatch::watch() {
  const timespec tick{0, 100 * 1000 * 1000};
  while (!done_.load()) {
    const int sig = sigtimedwait(&signals_, nullptr, &tick);
    if (sig > 0) {
      const std::string said =
          std::string("received ") + stop_signal_name(sig) + " while starting; exiting before serving";
      const auto logger = spdlog::default_logger();
      if (logger->name().empty()) {
        // spdlog's own default logger, which writes to stdout: the flags, the config file among them, are
        // still being read, and the server's log is not set up yet. With --log-json a JSON line, as a
        // configuration error's: a shipper parsing JSON lines does not read plain text.
        if (log_json_) {
          write_json_log_line("info", "srformer-server: " + said);
        } else {
          const std::string line = "srformer-server: " + said + "\n";
          (void)!::write(STDERR_FILENO, line.data(), line.size());
        }
        exit_();
      }
      logger->info(said);
      // Flushed, not shut down: spdlog::shutdown() destroyed the logger while the main thread (loading or
      // warming up the models) or a gRPC thread could be writing a line through it, a crash (SIGSEGV)
      // where the start should end with exit 0.
      spdlog::default_logger()->flush();
      exit_();
    }
  }
}

}  // namespace srformer::server
