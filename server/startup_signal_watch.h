#pragma once
// The server's stop signals before it listens (server/main.cc): taken synchronously, they end the start at
// once, with a line in the log.
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <thread>

namespace srformer::server {

// "SIGTERM", "SIGHUP", else "SIGINT" (the server's three stop signals).
const char* stop_signal_name(int sig);

// Until the server is about to listen, a stop signal ends the process at once: loading a large model and
// warming it up can take minutes, which an orchestrator stopping a pod that serves nothing yet should not
// wait for (the signal used to stay pending until the server listened, then drained).
class StartupSignalWatch {
 public:
  // Waits for one of `signals` (blocked in every thread) until destroyed; on one, logs it and calls `exit`,
  // which does not return (std::_Exit(0) in the server). Before the log is set up the line is plain text on
  // stderr, or with `log_json` (--log-json on the command line) a JSON line as the log's.
  explicit StartupSignalWatch(
      const sigset_t& signals, bool log_json = false, std::function<void()> exit = [] { std::_Exit(0); });
  StartupSignalWatch(const StartupSignalWatch&) = delete;
  StartupSignalWatch& operator=(const StartupSignalWatch&) = delete;
  ~StartupSignalWatch();

 private:
  void watch();

  const sigset_t signals_;
  const bool log_json_;
  const std::function<void()> exit_;
  std::atomic<bool> done_{false};
  std::thread thread_;  // last: it reads the members above
};

}  // namespace srformer::server
