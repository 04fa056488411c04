#pragma once
// OpenMP wait policy for CPU inference.
//
// libgomp's default keeps a thread spinning ~300,000 times after each parallel region; with
// OMP_WAIT_POLICY=PASSIVE it sleeps at once and every region pays a futex wake-up (tens of µs).
// A decode step runs ~100 short regions (our kernels, LibTorch's element-wise ops, OpenBLAS's
// OpenMP build), so neither extreme suits it: a short spin (GOMP_SPINCOUNT=10000, ~0.1–0.2 ms)
// bridges the gap between back-to-back regions and then yields the core to gRPC and the delivery
// thread. Measured on this project's 2-core machine (docs/BENCHMARKS.md, session 12): T5-small
// decode steps 12.6 → 8.7 ms (1 row) and 39.1 → 29.5 ms (32 rows) against PASSIVE; served, one
// stream +23–44% and 32 streams +12–17% tokens/s. (PASSIVE was the choice while Debian's
// pthread OpenBLAS ran its own pool beside LibTorch's spinners: 166 → 51 ms a step then.)
// libgomp reads its environment once, when it is loaded (before main), so the only way to change it
// for our own process is to set it and exec ourselves again.
#include <optional>
#include <string>
#include <utility>

namespace srformer {

// The variable reexec_with_openmp_policy() sets, given the environment (`get` as std::getenv):
// GOMP_SPINCOUNT=10000, or nothing when OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (a user's choice
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
