#pragma once
// Ends SummarizeStream calls whose clients take none of their messages (--stream-stall-timeout-ms). A
// client that stops reading fills its HTTP/2 window, and the server's write then waits; as a web server's
// send timeout (nginx's send_timeout), the clock runs only while a write waits for the client and starts
// again at each message it takes, so a client that reads, however slowly the summary comes, never meets
// it. A stalled call is cancelled with a status of its own: gRPC sends it in trailers, which flow control
// does not hold back, so a client that reads again gets the messages its window had taken, then that
// status (the messages the server held are dropped).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace srformer::server {

class StallWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // One call's writes, shared by its reactor and the watch. Thread-safe.
  class Call {
   public:
    // A write to the client began, or the one before was taken and the next began: the clock restarts.
    void writing();
    // No write waits for the client.
    void idle();
    // From the reactor's OnDone, before gRPC frees the call: the watch never touches it again.
    void done();
    // Whether the watch ended the call.
    bool stalled() const;

    // Made only by StallWatch::watch (the key is private to it).
    class Key {
      friend class StallWatch;
      Key() = default;
    };
    Call(Key, grpc_call* call) : call_(call) {}

   private:
    friend class StallWatch;
    mutable std::mutex mu_;
    grpc_call* call_;                         // null once done()
    std::optional<Clock::time_point> since_;  // when the write now waiting began
    bool stalled_ = false;
  };

  // `timeout` 0: no watch (no thread; watch() returns null).
  explicit StallWatch(std::chrono::milliseconds timeout);
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  // Watches `context`'s call from now until Call::done(); null when there is no timeout.
  std::shared_ptr<Call> watch(grpc::CallbackServerContext* context);
  // The status a stalled stream's client gets, and the call counts.
  grpc::Status status() const;

 private:
  void run();
  void check(Clock::time_point now);

  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::weak_ptr<Call>> calls_;
  std::thread thread_;  // last: started once the rest is made
};

}  // namespace srformer::server
