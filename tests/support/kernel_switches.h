#pragma once
// Puts the CPU kernels' switches (model/kernels/avx2.h) back as they were when a test that flips them
// ends, however it ends (an assertion that returns early included): SRFORMER_CPU_KERNELS=0 or
// SRFORMER_CPU_AVX512=0 then holds for the whole suite, and no test turns the kernels on for the next.
#include "model/kernels/avx2.h"

namespace srformer::testing {

class KernelSwitchesRestored {
 public:
  KernelSwitchesRestored() = default;
  KernelSwitchesRestored(const KernelSwitchesRestored&) = delete;
  KernelSwitchesRestored& operator=(const KernelSwitchesRestored&) = delete;
  ~KernelSwitchesRestored() {
    kernels::set_cpu_kernels(cpu_kernels_);
    kernels::set_avx512(avx512_);
  }

 private:
  const bool cpu_kernels_ = kernels::cpu_kernels_switch().load();
  const bool avx512_ = kernels::avx512_switch().load();
};

}  // namespace srformer::testing

// For tests of the kernels' own path (which layers take them, packed weights, bit-identical rows):
// skipped, saying why, where they do not run.
#define SKIP_WITHOUT_CPU_KERNELS()           \
  if (!srformer::kernels::use_cpu_kernels()) \
  GTEST_SKIP() << "the CPU kernels are off here (SRFORMER_CPU_KERNELS=0, or no AVX2+FMA): this test checks their path"
