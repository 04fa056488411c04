#pragma once
// Small building blocks shared by BART and T5: projections, norms, activations, feed-forward.
#include <torch/types.h>

#include <functional>
#include <limits>
#include <memory>
#include <string>

namespace srformer {

class ParamBinder;
namespace kernels {
class Bf16PackedMatrix;
class Fp32PackedMatrix;
}  // namespace kernels

// y = x Wᵀ + b. On the CPU in fp32 without autograd, any number of rows goes through
// kernels::few_rows_linear, which reads W once per 32 rows and sums each row as it would alone (batching
// changes no bits); OpenBLAS 0.3.21's sgemm packs all of W on every call, which doubles or worse the
// memory traffic of a decode step that is memory-bound anyway.
// Without the AVX2 kernels one row takes a matrix-vector product, more rows LibTorch's linear.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

// A CPU float32 tensor that autograd does not track: what our CPU kernels (model/kernels/) may take.
bool is_cpu_inference_float(const torch::Tensor& t);

// No other tensor, view or state shares t's storage: the state holding t may write it in place.
bool owns_storage(const torch::Tensor& t);

// Hugging Face's guard for activations in fp16 (T5Block, BartEncoderLayer): where any element of h is
// infinite, every element is clamped to ±(65504 − 1000), so that the next norm sees finite numbers; else
// h is unchanged. Other dtypes pass through. No host sync (the choice is a tensor op).
torch::Tensor clamp_fp16_overflow(const torch::Tensor& h);

struct Linear {
  torch::Tensor weight;  // [out, in]
  torch::Tensor bias;    // [out] or undefined
  // `--dtype bf16` on the CPU: the weight in bfloat16 tiles (kernels/bf16_linear.h: AMX or AVX512-BF16), used for
  // every product that autograd does not track. `weight` stays for saving and for LibTorch's path.
  std::shared_ptr<const kernels::Bf16PackedMatrix> packed;
  // fp32 inference on AVX2/AVX-512 (LoadOptions::pack_projections): the weight in panels of output features
  // (kernels/fp32_packed_linear.h), used for every product that autograd does not
  // track while the CPU kernels are on. A copy: `weight` stays, and must not change while this is set
  // (a loaded model hands its pages back to the kernel, which reads them in again if they are used).
  std::shared_ptr<const kernels::Fp32PackedMatrix> packed_fp32;
  torch::Tensor operator()(const torch::Tensor& x) const;
  // Bytes of `packed` and `packed_fp32` (0 where neither is set).
  int64_t packed_bytes() const;
  // Fills `packed` from a CPU float32 weight (and bias).
  void pack_bf16();
  // Fills `packed_fp32` where the weight is a CPU float32 tensor and the CPU has AVX2 + FMA
  // (kernels::avx2_fma_available(); panels as wide as kernels::use_avx512() allows).
  void pack_fp32();
  // The parameters from `w`; packed when the binder says so (ParamBinder::pack_bf16()).
  static Linear bind(ParamBinder& w, const std::string& prefix, int64_t out, int64_t in, bool bias);
};

struct LayerNorm {
  torch::Tensor weight, bias;  // bias undefined for T5's RMS norm
  double eps = 1e-5;
  bool rms = false;  // T5: scale only, no mean, variance in fp32
  torch::Tensor operator()(const torch::Tensor& x) const;
  static LayerNorm bind(ParamBinder& w, const std::string& prefix, int64_t dim, double eps, bool rms);
};

// Hugging Face's ACT2FN functions by what they compute: kGelu the exact (erf) GELU, kGeluTanh its tanh
// approximation, kSilu x sigmoid(x), kQuickGelu x sigmoid(1.702 x).
enum class Activation { kRelu, kGelu, kGeluTanh, kSilu, kQuickGelu };
// An ACT2FN name (config.h's kActivations); throws std::invalid_argument on any other.
Activation activation_from_string(const std::string& name);
torch::Tensor activate(const torch::Tensor& x, Activation act);

// BART: fc2(act(fc1 x)); T5: wo(act(wi x)) or gated wo(act(wi_0 x) * wi_1 x).
struct FeedForward {
  Linear in, gate, out;  // gate defined only when gated
  Activation act = Activation::kRelu;
  torch::Tensor operator()(const torch::Tensor& x) const;
};

// [B, T, H*d] <-> [B, H, T, d]
torch::Tensor split_heads(const torch::Tensor& x, int64_t heads);
torch::Tensor merge_heads(const torch::Tensor& x);

// A tensor `total` long along `dim`, made of piece(first, n) for the blocks [first, first + n) of at
// most `block` (> 0) that cover [0, total) in order, between() (if set) called before each block after
// the first. The long passes a caller pauses (encode, start) run in such pieces; each piece gives its
// block's part of the whole, of one shape but along `dim`.
torch::Tensor concat_blocks(int64_t total, int64_t block, int64_t dim, const std::function<void()>& between,
                            const std::function<torch::Tensor(int64_t first, int64_t n)>& piece);

// split_heads(proj(x), heads) as a contiguous [B, H, T, d]. With `positions` < T, projected by blocks of
// at most that many positions, between() called before each block after the first: a long input's
// projection becomes pieces a caller can pause between (T5-small's keys at 16k tokens: ~0.1 s whole).
// Each position's result is the whole projection's, up to the product's rounding.
torch::Tensor project_heads(const Linear& proj, const torch::Tensor& x, int64_t heads,
                            int64_t positions = std::numeric_limits<int64_t>::max(),
                            const std::function<void()>& between = {});

}  // namespace srformer
