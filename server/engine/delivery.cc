#include "server/engine/delivery.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <iterator>
#include <utility>

namespace srformer::server {

Delivery::Delivery() : thread_([this] { run(); }) {}

Delivery::~Delivery() { stop(); }

void Delivery::post(std::vector<Job> jobs) {
  if (jobs.empty()) return;
  {
    std::lock_guard lock(mu_);
    if (!stop_) {
      jobs_.insert(jobs_.end(), std::make_move_iterator(jobs.begin()), std::make_move_iterator(jobs.end()));
      jobs.clear();
    }
  }
  if (jobs.empty()) {
    wake_.notify_one();
    return;
  }
  for (const Job& job : jobs) run_job(job);  // stopped: deliver here rather than drop
}

void Delivery::post(Job job) {
  std::vector<Job> one;
  one.push_back(std::move(job));
  post(std::move(one));
}

bool Delivery::wait_idle(Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return idle_.wait_until(lock, deadline, [&] { return jobs_.empty() && !busy_; });
}

void Delivery::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Delivery::run() {
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) break;  // stopping, and everything queued has run
    // Take the whole queue: one lock per batch of jobs, not per job.
    std::deque<Job> batch;
    batch.swap(jobs_);
    busy_ = true;
    lock.unlock();
    for (const Job& job : batch) run_job(job);
    batch.clear();  // the closures' captures (requests, results) go here, outside the lock
    lock.lock();
    busy_ = false;
    if (jobs_.empty()) idle_.notify_all();
  }
  idle_.notify_all();
}

void Delivery::run_job(const Job& job) noexcept {
  try {
    job();
  } catch (const std::exception& e) {
    spdlog::error("delivering a request's callback failed: {}", e.what());
  } catch (...) {
    spdlog::error("delivering a request's callback failed with an unknown exception");
  }
}

}  // namespace srformer::server
