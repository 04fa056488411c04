#pragma once
// A counting semaphore in bytes: work that holds memory in proportion to its input takes a share of a
// fixed budget for as long as it runs, so that many such jobs at once stay within the budget.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace srformer {

class ByteGate {
 public:
  explicit ByteGate(int64_t capacity) : capacity_(std::max<int64_t>(1, capacity)) {}
  ByteGate(const ByteGate&) = delete;
  ByteGate& operator=(const ByteGate&) = delete;

  // Held bytes, given back when it goes.
  class Pass {
   public:
    Pass(ByteGate& gate, int64_t bytes) : gate_(&gate), bytes_(bytes) {}
    Pass(Pass&& other) noexcept : gate_(other.gate_), bytes_(other.bytes_) { other.gate_ = nullptr; }
    Pass& operator=(Pass&&) = delete;
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    ~Pass() {
      if (gate_ != nullptr) gate_->release(bytes_);
    }

   private:
    ByteGate* gate_;
    int64_t bytes_;
  };

  // Waits until `bytes` fit beside what others hold. More than the whole capacity waits for an empty
  // gate and then holds all of it: one job alone may exceed the budget, none waits forever.
  [[nodiscard]] Pass enter(int64_t bytes) {
    const int64_t take = std::clamp<int64_t>(bytes, 0, capacity_);
    std::unique_lock lock(mu_);
    freed_.wait(lock, [&] { return used_ + take <= capacity_; });
    used_ += take;
    return Pass(*this, take);
  }

  int64_t capacity() const { return capacity_; }
  int64_t in_use() const {
    std::lock_guard lock(mu_);
    return used_;
  }

 private:
  void release(int64_t bytes) {
    {
      std::lock_guard lock(mu_);
      used_ -= bytes;
    }
    freed_.notify_all();
  }

  const int64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  int64_t used_ = 0;
};

}  // namespace srformer
