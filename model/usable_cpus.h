#pragma once
// How many CPUs this process may actually use. std::thread::hardware_concurrency() counts the machine's
// online CPUs: under taskset, a cpuset (docker --cpuset-cpus) or a CFS quota (docker --cpus, Kubernetes
// limits.cpu) a thread pool sized by it oversubscribes, and libgomp's spinning threads then take
// turns on the same cores (12-15% of served throughput lost on one pinned core).
#include <filesystem>
#include <optional>
#include <string>

namespace srformer {

// The CPUs in this thread's affinity mask, bounded by the cgroup CPU quota (rounded up); at least 1.
int usable_cpus();

// The server's intra-op thread count where --threads is not given: usable_cpus() shared evenly by `sharers`
// (its models), at least 1. OMP_NUM_THREADS is not read: a base image or launcher that sets it (torchrun sets
// 1) would quietly throttle a server whose one setting is --threads.
int default_intra_op_threads(int sharers = 1);

// The offline tools' (`srformer train`, `eval`, `summarize`) where --threads is not given: OMP_NUM_THREADS
// when it is a positive integer (a user's or a test harness's explicit choice, as LibTorch reads it), else
// default_intra_op_threads(). LibTorch's own default counted the cores that no CPU quota lowers.
int offline_intra_op_threads();

// OMP_NUM_THREADS's first entry as LibTorch and libgomp take it ("4", "4,2"); nullopt when unset or not a
// positive integer.
std::optional<int> omp_num_threads(const char* value);

// The quota part, from the files under `cgroup_root` (normally /sys/fs/cgroup) for the cgroup lines of
// `proc_self_cgroup` (the text of /proc/self/cgroup): cgroup v2's cpu.max ("max 100000" or
// "QUOTA PERIOD") in the process's group and every group above it, else v1's cpu.cfs_quota_us /
// cpu.cfs_period_us. nullopt when no quota applies.
std::optional<double> cgroup_cpu_quota(const std::filesystem::path& cgroup_root, const std::string& proc_self_cgroup);

}  // namespace srformer
