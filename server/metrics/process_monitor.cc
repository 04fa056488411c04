#include "server/metrics/process_monitor.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace srformer::server {
namespace {

std::string read_file(const char* path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(std::string("cannot read ") + path + " (is /proc mounted?)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The number after "\n<key><separator>" in a /proc file ("VmRSS:" in status, "btime " in /proc/stat).
double proc_field(const std::string& text, const std::string& key, char separator) {
  const std::string needle = "\n" + key + separator;
  const auto pos = text.find(needle);
  if (pos == std::string::npos) throw std::runtime_error("no " + key + " field in /proc");
  std::istringstream in(text.substr(pos + needle.size()));
  double v = 0;
  if (!(in >> v)) throw std::runtime_error("unreadable " + key + " field in /proc");
  return v;
}

}  // namespace

ProcessStats read_process_stats() {
  // /proc/self/stat: "pid (comm) state ..."; comm may hold spaces, so split after the last ')'.
  const std::string stat = read_file("/proc/self/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) throw std::runtime_error("unexpected /proc/self/stat format");
  std::istringstream in(stat.substr(close + 1));
  std::vector<std::string> fields;  // fields[0] is field 3 (state) of proc(5)
  for (std::string f; in >> f;) fields.push_back(f);
  if (fields.size() < 20) throw std::runtime_error("unexpected /proc/self/stat format (too few fields)");
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const auto field = [&](int n) { return std::stod(fields.at(static_cast<size_t>(n - 3))); };

  ProcessStats s;
  s.cpu_seconds = (field(14) + field(15)) / ticks;  // utime + stime
  const std::string status = "\n" + read_file("/proc/self/status");
  s.resident_bytes = proc_field(status, "VmRSS", ':') * 1024.0;  // reported in kB
  s.threads = proc_field(status, "Threads", ':');
  const double boot_time = proc_field("\n" + read_file("/proc/stat"), "btime", ' ');
  s.start_time_seconds = boot_time + field(22) / ticks;  // starttime is in ticks since boot
  return s;
}

ProcessMonitor::ProcessMonitor(prometheus::Registry& registry, std::chrono::milliseconds interval)
    : cpu_seconds_(prometheus::BuildCounter()
                       .Name("process_cpu_seconds_total")
                       .Help("Total user and system CPU time spent in seconds.")
                       .Register(registry)
                       .Add({})),
      resident_bytes_(prometheus::BuildGauge()
                          .Name("process_resident_memory_bytes")
                          .Help("Resident memory size in bytes.")
                          .Register(registry)
                          .Add({})),
      threads_(
          prometheus::BuildGauge().Name("process_threads").Help("Number of OS threads.").Register(registry).Add({})),
      start_time_(prometheus::BuildGauge()
                      .Name("process_start_time_seconds")
                      .Help("Start time of the process since unix epoch in seconds.")
                      .Register(registry)
                      .Add({})) {
  sample();
  if (interval.count() > 0) sampler_ = std::make_unique<PeriodicSampler>(interval, [this] { sample(); });
}

ProcessMonitor::~ProcessMonitor() { sampler_.reset(); }

void ProcessMonitor::sample() {
  const std::lock_guard<std::mutex> lock(mutex_);
  try {
    const ProcessStats s = read_process_stats();
    // Counters only go up: advance by the delta since the last reading.
    if (s.cpu_seconds > last_cpu_seconds_) cpu_seconds_.Increment(s.cpu_seconds - last_cpu_seconds_);
    last_cpu_seconds_ = std::max(last_cpu_seconds_, s.cpu_seconds);
    resident_bytes_.Set(s.resident_bytes);
    threads_.Set(s.threads);
    start_time_.Set(s.start_time_seconds);
  } catch (const std::exception& e) {
    if (!warned_) spdlog::warn("metrics: process metrics unavailable: {}", e.what());
    warned_ = true;
  }
}

}  // namespace srformer::server
