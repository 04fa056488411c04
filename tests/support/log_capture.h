#pragma once
// The server's log lines, for tests that assert on them: what the default spdlog logger writes while a
// LogCapture lives. Declare it before the server under test, so that it outlives the server's threads
// (the logger's sink list is not safe to change while they log).
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

namespace srformer::testing {

class LogCapture {
 public:
  LogCapture() { spdlog::default_logger()->sinks().push_back(sink_); }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::find(sinks.begin(), sinks.end(), sink_));
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Everything logged so far (safe while the server logs).
  std::string text() const { return sink_->text(); }

 private:
  class Sink final : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::string text() {
      std::lock_guard lock(mutex_);
      return text_;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      spdlog::memory_buf_t line;
      formatter_->format(msg, line);
      text_.append(line.data(), line.size());
    }
    void flush_() override {}

   private:
    std::string text_;
  };
  const std::shared_ptr<Sink> sink_ = std::make_shared<Sink>();
};

}  // namespace srformer::testing
