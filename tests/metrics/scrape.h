#pragma once
// Test helpers: read series out of Prometheus text exposition, run shell commands, fake NVML.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include "server/metrics/gpu_monitor.h"

namespace srformer::server::testing {

using LabelSet = std::map<std::string, std::string>;

// Spends `how_long` of CPU time on this thread (the process_cpu_seconds_total tests).
inline double burn_cpu(std::chrono::milliseconds how_long) {
  // Counted in the process's CPU time, not wall time: on a busy machine (tests run in parallel beside
  // builds) 200 ms of wall time can give far less CPU. A minute of wall time at most.
  const auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  };
  volatile double x = 0;
  const auto end = cpu_now() + how_long;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (cpu_now() < end && std::chrono::steady_clock::now() < give_up) {
    for (int i = 0; i < 10000; ++i) x = x + std::sqrt(static_cast<double>(i));
  }
  return x;
}

// Parses one sample line "name{k="v",...} value" (no escapes in our label values); false for comments.
inline bool parse_sample(const std::string& line, std::string& name, LabelSet& labels, double& value) {
  if (line.empty() || line[0] == '#') return false;
  labels.clear();
  size_t pos = line.find_first_of("{ ");
  if (pos == std::string::npos) return false;
  name = line.substr(0, pos);
  if (line[pos] == '{') {
    const size_t end = line.find('}', pos);
    std::string body = line.substr(pos + 1, end - pos - 1);
    while (!body.empty()) {
      const size_t eq = body.find('=');
      const size_t q2 = body.find('"', eq + 2);
      labels[body.substr(0, eq)] = body.substr(eq + 2, q2 - eq - 2);
      body = q2 + 1 < body.size() ? body.substr(q2 + 2) : "";
    }
    pos = end + 1;
  }
  value = std::stod(line.substr(pos + 1));
  return true;
}

// Value of the series `name` whose labels include `labels`; nullopt if no such series.
inline std::optional<double> sample(const std::string& text, const std::string& name, const LabelSet& want = {}) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::string n;
    LabelSet l;
    double v = 0;
    if (!parse_sample(line, n, l, v) || n != name) continue;
    bool match = true;
    for (const auto& [k, val] : want) match = match && l.count(k) && l.at(k) == val;
    if (match) return v;
  }
  return std::nullopt;
}

// The largest finite `le` of histogram `name`'s series whose labels include `want` (0 when none): values past
// it land only in +Inf, where histogram_quantile cannot place them.
inline double largest_finite_bucket(const std::string& text, const std::string& name, const LabelSet& want = {}) {
  double largest = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::string n;
    LabelSet l;
    double v = 0;
    if (!parse_sample(line, n, l, v) || n != name + "_bucket" || l["le"] == "+Inf") continue;
    bool match = true;
    for (const auto& [k, val] : want) match = match && l.count(k) && l.at(k) == val;
    if (match) largest = std::max(largest, std::stod(l.at("le")));
  }
  return largest;
}

// Names of the metric families in the text (from "# TYPE" lines).
inline std::set<std::string> family_names(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) names.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  return names;
}

// Minimal HTTP/1.0 request (GET unless `method` says otherwise) against 127.0.0.1:port; returns the whole
// response (status line, headers, body).
inline std::string http_get(int port, const std::string& path, const std::string& method = "GET") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request = method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) response.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return response;
}

// The body of an HTTP response (after the blank line that ends the headers).
inline std::string http_body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

// Runs `command` through /bin/sh, returning its exit status and stdout+stderr.
inline int run_command(const std::string& command, std::string& output) {
  output.clear();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) output.append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline bool have_program(const std::string& name) {
  std::string out;
  return run_command("command -v " + name, out) == 0;
}

// An NVML with fixed, settable readings for `devices` GPUs; power unsupported on device 1 when there are two.
class FakeNvml : public NvmlApi {
 public:
  struct Shared {
    std::string init_error;
    unsigned devices = 1;
    // Atomic: tests change readings while a sampler thread reads them.
    std::atomic<double> utilization{0.5}, used{1e9}, total{8e9}, watts{150}, celsius{60}, hertz{1.4e9};
    std::atomic<int> lost{-1};  // a device whose readings all fail (fallen off the bus), -1 = none
  };
  explicit FakeNvml(std::shared_ptr<Shared> s) : s_(std::move(s)) {}
  std::string init() override { return s_->init_error; }
  unsigned device_count() override { return s_->devices; }
  std::optional<double> utilization_ratio(unsigned i) override {
    if (lost(i)) return std::nullopt;
    return s_->utilization + 0.1 * i;
  }
  std::optional<Memory> memory(unsigned i) override {
    if (lost(i)) return std::nullopt;
    return Memory{s_->used + i, s_->total};
  }
  std::optional<double> power_watts(unsigned i) override {
    if (i == 1 || lost(i)) return std::nullopt;
    return s_->watts;
  }
  std::optional<double> temperature_celsius(unsigned i) override {
    if (lost(i)) return std::nullopt;
    return s_->celsius;
  }
  std::optional<double> sm_clock_hertz(unsigned i) override {
    if (lost(i)) return std::nullopt;
    return s_->hertz;
  }
  std::optional<std::string> uuid(unsigned i) override { return "GPU-fa4e-" + std::to_string(i); }

 private:
  bool lost(unsigned i) const { return s_->lost == static_cast<int>(i); }
  std::shared_ptr<Shared> s_;
};

}  // namespace srformer::server::testing

#include "server/metrics/metrics.h"

namespace srformer::server::testing {

// Gives every family Metrics can register at least one series: a model with activity, a fake GPU, a torch source.
inline void populate_every_family(Metrics& metrics) {
  auto gpu = std::make_shared<FakeNvml::Shared>();
  metrics.start_gpu_monitor(std::make_unique<FakeNvml>(gpu));
  metrics.set_torch_cuda_memory_source([] { return std::vector<TorchCudaMemory>{{0, 1e6, 2e6}}; });
  ModelMetrics& m = metrics.model("bart-large-cnn");
  m.on_request_start();
  m.on_request_end("Summarize", "OK", 0.4);
  m.on_rejected(RejectReason::kQueueFull);
  m.on_batch_item("INTERNAL");
  m.set_queue_depth(2);
  m.observe_queue_wait(0.01);
  m.observe_encode(0.05);
  m.observe_time_to_first_token(0.08);
  m.observe_inter_token(0.01);
  m.observe_request_tokens(900, 60);
  m.on_rows_joined(1);
  m.on_step(1, 0.01, 1);
  m.on_rows_left(LeaveReason::kEos);
  m.set_state_bytes(1 << 20, 1 << 21);
  m.set_raf_fired_ratio(0, 0.3);
  m.on_raf_updates(6);
  m.on_segment_switches(1);
  m.on_cross_attention_kv(64, 1024);
}

}  // namespace srformer::server::testing
