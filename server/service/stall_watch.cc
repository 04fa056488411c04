#include "server/service/stall_watch.h"

#include <grpc/grpc.h>

#include <algorithm>

namespace srformer::server {

void StallWatch::Call::writing() {
  std::lock_guard lock(mu_);
  since_ = Clock::now();
}

void StallWatch::Call::idle() {
  std::lock_guard lock(mu_);
  since_.reset();
}

void StallWatch::Call::done() {
  std::lock_guard lock(mu_);
  call_ = nullptr;
  since_.reset();
}

bool StallWatch::Call::stalled() const {
  std::lock_guard lock(mu_);
  return stalled_;
}

StallWatch::StallWatch(std::chrono::milliseconds timeout) : timeout_(timeout) {
  if (timeout_.count() > 0) thread_ = std::thread([this] { run(); });
}

StallWatch::~StallWatch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<StallWatch::Call> StallWatch::watch(grpc::CallbackServerContext* context) {
  if (timeout_.count() <= 0) return nullptr;
  auto call = std::make_shared<Call>(Call::Key{}, context->c_call());
  std::lock_guard lock(mu_);
  calls_.push_back(call);
  return call;
}

grpc::Status StallWatch::status() const {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      "the server ended the stream: its client had taken none of its messages for " +
                          std::to_string(timeout_.count()) +
                          " ms (--stream-stall-timeout-ms), and they were held in the server's memory; read a "
                          "stream's messages as they come, or cancel it");
}

void StallWatch::run() {
  // A stalled call ends between the timeout and a quarter of it later (at most a second later).
  const auto tick = std::clamp<std::chrono::milliseconds>(timeout_ / 4, std::chrono::milliseconds(10),
                                                          std::chrono::milliseconds(1000));
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, tick, [&] { return stop_; })) {
    lock.unlock();
    check(Clock::now());
    lock.lock();
  }
}

void StallWatch::check(Clock::time_point now) {
  std::vector<std::shared_ptr<Call>> live;
  {
    std::lock_guard lock(mu_);
    live.reserve(calls_.size());
    // Calls whose reactors are gone leave the list here.
    calls_.erase(std::remove_if(calls_.begin(), calls_.end(),
                                [&](const std::weak_ptr<Call>& weak) {
                                  auto call = weak.lock();
                                  if (!call) return true;
                                  live.push_back(std::move(call));
                                  return false;
                                }),
                 calls_.end());
  }
  const std::string message = status().error_message();
  for (const auto& call : live) {
    grpc_call* stalled = nullptr;
    {
      std::lock_guard lock(call->mu_);
      if (call->call_ == nullptr || call->stalled_ || !call->since_ || now - *call->since_ < timeout_) continue;
      call->stalled_ = true;
      stalled = call->call_;
      // Held past the lock: the reactor's OnDone may run meanwhile, and gRPC then frees the call.
      grpc_call_ref(stalled);
    }
    // Not under the lock: the cancel may run the reactor's callbacks, which take it.
    grpc_call_cancel_with_status(stalled, static_cast<grpc_status_code>(status().error_code()), message.c_str(),
                                 nullptr);
    grpc_call_unref(stalled);
  }
}

}  // namespace srformer::server
