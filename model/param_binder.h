#pragma once
// Binds parameters from a checkpoint and remembers them under their Hugging Face names, so that a
// loaded model can list (count, save) exactly what it holds.
#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "model/io/weight_binder.h"
#include "model/raf_init.h"

namespace srformer {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

class ParamBinder {
 public:
  // pack_bf16: projections also get their bfloat16 form (Linear::bind; `--dtype bf16` on the CPU).
  ParamBinder(WeightBinder& binder, RafInit raf_init, bool pack_bf16 = false)
      : binder_(binder), raf_init_(raf_init), pack_bf16_(pack_bf16) {}

  torch::Tensor take(const std::string& name, const std::vector<int64_t>& shape,
                     const std::vector<std::string>& aliases = {}) {
    return record(name, binder_.take(name, shape, aliases));
  }
  torch::Tensor take_fp32(const std::string& name, const std::vector<int64_t>& shape) {
    return record(name, binder_.take_fp32(name, shape));
  }
  // RAF parameter: from the checkpoint, or `init()` as raf_init says.
  template <typename Init>
  torch::Tensor take_raf(const std::string& name, const std::vector<int64_t>& shape, Init&& init) {
    switch (raf_init_) {
      case RafInit::kFromCheckpoint:
        return record(name, binder_.take_fp32(name, shape));
      case RafInit::kCreateMissing:
        // Read as float32: through the model's fp16/bf16 it would come back rounded.
        if (auto t = binder_.take_optional_fp32(name, shape)) return record(name, *t);
        break;
      case RafInit::kCreateAll:
        (void)binder_.take_optional_fp32(name, shape);  // taken, so that it does not count as unexpected
        break;
    }
    return record(name, init().to(binder_.device()));  // init() makes it on the CPU
  }
  torch::Tensor record(const std::string& name, torch::Tensor t) {
    params_.emplace_back(name, t);
    return t;
  }
  WeightBinder& raw() { return binder_; }
  bool pack_bf16() const { return pack_bf16_; }
  NamedTensors take_params() { return std::move(params_); }

 private:
  WeightBinder& binder_;
  RafInit raf_init_;
  bool pack_bf16_;
  NamedTensors params_;
};

}  // namespace srformer
