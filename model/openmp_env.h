#pragma once
// OpenMP wait policy for CPU inference.
//
// LibTorch's OpenMP threads spin after every parallel region (libgomp's default), while
// Debian's OpenBLAS runs matmuls on its own pthread pool: on a few cores the spinners steal
// the CPU from BLAS. Measured with `srformer bench` (BART-base shape, k=1024, batch 1, 2
// cores): 166 ms per decode step with the default policy, 51 ms with OMP_WAIT_POLICY=PASSIVE.
// libgomp reads its environment once, when it is loaded (before main), so the only way to
// change it for our own process is to set it and exec ourselves again.
namespace srformer {

// If neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set (a user's choice always wins), sets
// OMP_WAIT_POLICY=PASSIVE and re-executes /proc/self/exe with the same arguments. Returns
// normally (leaving the policy as it is) when it cannot, or when SRFORMER_KEEP_OMP_POLICY=1.
void reexec_with_passive_openmp(char** argv);

// The wait policy this process runs with, for logs: "passive", "active" or "default (spinning)".
const char* openmp_wait_policy();

}  // namespace srformer
