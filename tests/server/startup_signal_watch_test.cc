// A stop signal while the server starts (server/startup_signal_watch.h) ends it with exit 0 and a line in
// the log, whatever its other threads are logging meanwhile.
#include "server/startup_signal_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace srformer::server {
namespace {

// The watch shut spdlog down before it ended the process: a thread logging in that moment (the main thread
// loading a model, a gRPC thread) then wrote through a logger already destroyed, or through none, and the
// start that should end with exit 0 crashed. Here the process ends only once the main thread has logged
// after the watch's own line, as a thread that was half-way through a line would.
TEST(StartupSignalWatch, OtherThreadsStillLogWhileTheSignalEndsTheStart) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a child with no thread but this test's
  EXPECT_EXIT(
      {
        sigset_t signals;
        sigemptyset(&signals);
        sigaddset(&signals, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // as the server's .preinit_array does, for every thread
        spdlog::set_default_logger(spdlog::stderr_logger_mt("startup"));
        std::atomic<bool> exiting{false};
        StartupSignalWatch watch(signals, false, [&] {
          exiting.store(true);
          for (;;) pause();  // the exit, held until the main thread below has logged
        });
        kill(getpid(), SIGTERM);
        while (!exiting.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        spdlog::info("loaded the model");
        spdlog::default_logger()->flush();
        std::_Exit(3);
      },
      ::testing::ExitedWithCode(3), "received SIGTERM while starting; exiting before serving.*loaded the model");
}

}  // namespace
}  // namespace srformer::server
