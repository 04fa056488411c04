#pragma once
// Runs the requests' callbacks (token events with their text, final results) on a thread of its own,
// in the order they were posted. Detokenizing, building stream messages and handing them to gRPC
// (which may write to the socket inline) then overlap the next decoder step instead of lengthening
// this one: the decode thread only queues closures, once per step.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "server/engine/request.h"

namespace srformer::server {

class Delivery {
 public:
  using Job = std::function<void()>;

  Delivery();
  ~Delivery();  // stop()
  Delivery(const Delivery&) = delete;
  Delivery& operator=(const Delivery&) = delete;

  // Appends jobs to run after everything posted before them. After stop() they run on the caller's
  // thread, so that no callback is ever lost. A job that throws is logged and the others still run.
  void post(std::vector<Job> jobs);
  void post(Job job);

  // Blocks until every job posted so far has run, or until `deadline`; returns whether they all ran.
  bool wait_idle(Clock::time_point deadline);

  // Runs what is queued and joins the thread. Idempotent.
  void stop();

 private:
  void run();
  static void run_job(const Job& job) noexcept;

  std::mutex mu_;
  std::condition_variable wake_;  // the delivery thread: jobs or stop
  std::condition_variable idle_;  // wait_idle
  std::deque<Job> jobs_;
  bool busy_ = false;  // a job taken off the queue is running
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace srformer::server
