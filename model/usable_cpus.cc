#include "model/usable_cpus.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace srformer {

namespace {

// QUOTA / PERIOD; nullopt for "max" (v2) or -1 (v1), both meaning no quota, and for anything unreadable.
std::optional<double> quota_ratio(std::istream& quota_in, std::istream& period_in) {
  std::string quota;
  double period = 0;
  if (!(quota_in >> quota) || !(period_in >> period) || period <= 0) return std::nullopt;
  try {
    // The kernel writes integers; "inf" or "nan" from anything else would make the bound meaningless.
    const double value = std::stod(quota);
    return value > 0 && std::isfinite(value / period) ? std::optional<double>(value / period) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// v1 keeps the two numbers in two files.
std::optional<double> read_ratio(const std::filesystem::path& quota_file, const std::filesystem::path& period_file) {
  std::ifstream quota(quota_file);
  std::ifstream period(period_file);
  return quota_ratio(quota, period);
}

// v2's cpu.max holds both on one line.
std::optional<double> read_cpu_max(const std::filesystem::path& file) {
  std::ifstream in(file);
  return quota_ratio(in, in);
}

}  // namespace

std::optional<double> cgroup_cpu_quota(const std::filesystem::path& cgroup_root, const std::string& proc_self_cgroup) {
  std::optional<double> v2;
  std::optional<double> v1;
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // "ID:CONTROLLERS:PATH"; v2's line is "0::PATH".
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::filesystem::path group = std::filesystem::path(line.substr(second + 1)).relative_path();
    if (controllers.empty()) {
      // A quota anywhere above the group bounds it too; the tightest wins.
      for (auto dir = group;; dir = dir.parent_path()) {
        if (const auto q = read_cpu_max(cgroup_root / dir / "cpu.max")) v2 = std::min(v2.value_or(*q), *q);
        if (dir.empty()) break;
      }
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
      for (const char* mount : {"cpu", "cpu,cpuacct", "cpuacct,cpu"}) {
        const auto dir = cgroup_root / mount / group;
        if (const auto q = read_ratio(dir / "cpu.cfs_quota_us", dir / "cpu.cfs_period_us")) {
          v1 = *q;
          break;
        }
        // Inside a container the group's own directory is usually the mount's root.
        const auto root = cgroup_root / mount;
        if (const auto q = read_ratio(root / "cpu.cfs_quota_us", root / "cpu.cfs_period_us")) {
          v1 = *q;
          break;
        }
      }
    }
  }
  return v2 ? v2 : v1;
}

int usable_cpus() {
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  std::ifstream in("/proc/self/cgroup");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (const auto quota = cgroup_cpu_quota("/sys/fs/cgroup", text)) {
    // Compared as doubles: a quota of more CPUs than an int counts must not reach the cast.
    if (*quota < cpus) cpus = std::max(1, static_cast<int>(std::ceil(*quota - 1e-9)));
  }
  return cpus;
}

int default_intra_op_threads(int sharers) { return std::max(1, usable_cpus() / std::max(1, sharers)); }

std::optional<int> omp_num_threads(const char* value) {
  if (value == nullptr) return std::nullopt;
  const std::string text(value);
  const std::string first = text.substr(0, text.find(','));
  if (first.empty() || first.size() > 6 || first.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const int n = std::stoi(first);
  return n > 0 ? std::optional<int>(n) : std::nullopt;
}

int offline_intra_op_threads() {
  return omp_num_threads(std::getenv("OMP_NUM_THREADS")).value_or(default_intra_op_threads());
}

}  // namespace srformer
