#pragma once
// A call without a deadline waits for its server as long as it takes: against a server that accepted the call
// and never answered (stopped, wedged, a peer gone without a reset), the client waited for ever without a
// word. A default deadline would cut the long summaries a CPU server may rightly take minutes over; instead,
// once nothing has come for kSilenceNoticeAfter, stderr says so, and how to bound the wait, and the call goes on.
// Only to a terminal, where someone is watching the call wait: a script's stderr (a log, cron's mail, a
// pipeline that takes any stderr as failure) got the line for every long summary, with advice (Ctrl-C) that
// no one there could take; a script bounds its calls with --deadline-ms.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

namespace srformer::client {

inline constexpr std::chrono::seconds kSilenceNoticeAfter{10};

class SilenceNotice {
 public:
  using Clock = std::chrono::steady_clock;

  // `message` says what has been waited for, when the time comes; "" waits on (e.g. while gRPC is still
  // connecting: a connection that does not come up fails the call by itself). Not armed, or stderr not a
  // terminal: does nothing.
  SilenceNotice(bool armed, std::function<std::string()> message) : message_(std::move(message)) {
    heard();
    if (armed && ::isatty(STDERR_FILENO) == 1) thread_ = std::thread([this] { watch(); });
  }
  ~SilenceNotice() {
    {
      const std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  SilenceNotice(const SilenceNotice&) = delete;
  SilenceNotice& operator=(const SilenceNotice&) = delete;

  // Something came from the server: the wait starts again. Lock-free, for every token of a load.
  void heard() { last_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed); }

 private:
  void watch() {
    std::unique_lock lock(mu_);
    while (!done_) {
      const Clock::time_point due =
          Clock::time_point(Clock::duration(last_.load(std::memory_order_relaxed))) + kSilenceNoticeAfter;
      if (Clock::now() < due) {
        cv_.wait_until(lock, due);
        continue;
      }
      if (const std::string said = message_(); !said.empty()) {
        std::cerr << "srformer-client: " << said << "\n";
        return;  // once: the user knows now
      }
      heard();
    }
  }

  std::function<std::string()> message_;
  std::atomic<Clock::rep> last_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: started once the rest is
};

}  // namespace srformer::client
