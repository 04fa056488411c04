#pragma once
// OpenMP wait policy for CPU inference.
//
// libgomp's default keeps a thread spinning ~300,000 times after each parallel region; with
// OMP_WAIT_POLICY=PASSIVE it sleeps at once and every region pays a futex wake-up (tens of µs).
// A decode step runs ~100 short regions (our kernels, LibTorch's element-wise ops, OpenBLAS's
// OpenMP build). On cores of its own a short spin (GOMP_SPINCOUNT=10000) stepped faster (session 12:
// T5-small served, one stream +23–44% tokens/s against PASSIVE); on cores shared with other busy
// processes (a Kubernetes node without exclusive CPUs, a busy host) every spin keeps a core from the
// thread it waits for: session 56, side by side on 2 busy cores, PASSIVE served the demo model at
// 1.6–12x the tokens/s at 0.1–0.7x the CPU per token, T5-small 1.9–4.3x, its decode steps 20–32 ms
// against 79–96 ms.
// The small gain does not pay for the large loss, so PASSIVE is the default (docs/OPERATIONS.md).
// libgomp reads its environment once, when it is loaded (before main), so the only way to change it
// for our own process is to set it and exec ourselves again.
#include <optional>
#include <string>
#include <utility>

namespace srformer {

// The variable reexec_with_openmp_policy() sets, given the environment (`get` as std::getenv):
// OMP_WAIT_POLICY=PASSIVE, or nothing when OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (a user's choice
// always wins) or SRFORMER_KEEP_OMP_POLICY is (opted out, or already re-executed).
std::optional<std::pair<std::string, std::string>> openmp_setting_to_apply(const char* (*get)(const char*));

// Sets openmp_setting_to_apply()'s variable and re-executes /proc/self/exe with the same
// arguments. Returns normally (leaving the policy as it is) when there is nothing to set or the
// exec fails. In the re-executed image it names the process after argv[0] again (the exec named it "exe").
void reexec_with_openmp_policy(char** argv);

// The most intra-op threads a --threads flag may ask for: 4x the CPUs this process may use (at least 8).
// More only wait on each other: 5000 on 2 cores took minutes for one short summary.
int max_useful_threads();

// The wait policy this process runs with, for logs: "passive", "active", "spin N, then sleep" or
// "default (spinning)".
std::string openmp_wait_policy();

}  // namespace srformer
