#include "server/logging.h"

#include <spdlog/details/console_globals.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace srformer::server {

std::string escape_log_message(std::string_view message, bool json) {
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      char code[8];
      std::snprintf(code, sizeof code, json ? "\\u%04x" : "\\x%02x", u);
      out += code;
    } else if (json && (c == '"' || c == '\\')) {
      out += '\\';
      out += c;
    } else {
      out += c;  // UTF-8 sequences pass through whole
    }
  }
  return out;
}

namespace {

// %*: the message, escaped (escape_log_message). Messages quote client text (request ids, model names,
// error details), which must not break a JSON line or forge a line of its own.
class EscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  explicit EscapedMessage(bool json) : json_(json) {}
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string escaped = escape_log_message(std::string_view(msg.payload.data(), msg.payload.size()), json_);
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<EscapedMessage>(json_); }

 private:
  bool json_;
};

std::unique_ptr<spdlog::formatter> log_formatter(bool json) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('*', json);
  formatter->set_pattern(json ? R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","thread":%t,"msg":"%*"})"
                              : "%Y-%m-%d %H:%M:%S.%e %^%-5l%$ [%t] %*");
  return formatter;
}

std::atomic<std::uint64_t> lines_dropped{0};

// spdlog's stderr console sink (colours on a terminal), counting the lines whose write failed. The sink
// ignores fwrite's failure and spdlog offers no hook for it (its error handler sees exceptions only, the
// async logger's overrun counter its own queue): lines lost to a log pipe whose reader had gone (the server
// ignores SIGPIPE and serves on) were lost without a trace.
class CountingStderrSink final : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    clearerr(stderr);   // an earlier failure, of another writer of stderr, is not this line's
    console_.log(msg);  // writes the line and flushes stderr
    if (ferror(stderr) != 0) {
      lines_dropped.fetch_add(1, std::memory_order_relaxed);
      clearerr(stderr);
    }
  }
  void flush() override {
    const std::lock_guard<std::mutex> lock(mutex_);
    console_.flush();
  }
  void set_pattern(const std::string& pattern) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    console_.set_pattern(pattern);
  }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    console_.set_formatter(std::move(formatter));
  }

 private:
  // The console sinks' own lock (stderr_color_sink_mt's), which write_json_log_line's sink takes too.
  std::mutex& mutex_ = spdlog::details::console_mutex::mutex();
  spdlog::sinks::stderr_color_sink_st console_;
};

}  // namespace

std::uint64_t log_lines_dropped() { return lines_dropped.load(std::memory_order_relaxed); }

bool is_log_level(const std::string& level) {
  return spdlog::level::from_str(level) != spdlog::level::off || level == "off";  // from_str: off when unknown
}

void init_logging(const std::string& level, bool json) {
  auto logger = std::make_shared<spdlog::logger>("srformer", std::make_shared<CountingStderrSink>());
  spdlog::initialize_logger(logger);  // registered, as stderr_color_mt("srformer") did
  const auto lvl = spdlog::level::from_str(level);
  if (!is_log_level(level)) {
    throw std::invalid_argument("unknown log level '" + level + "' (use trace|debug|info|warn|error|critical|off)");
  }
  logger->set_level(lvl);
  logger->set_formatter(log_formatter(json));
  spdlog::set_default_logger(logger);
}

void write_json_log_line(const std::string& level, std::string_view message) {
  // Not registered: init_logging's stderr_color_mt("srformer") would throw on a logger of that name.
  spdlog::logger logger("srformer", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger.set_level(spdlog::level::trace);
  logger.set_formatter(log_formatter(true));
  logger.log(spdlog::level::from_str(level), message);
  logger.flush();
}

}  // namespace srformer::server
