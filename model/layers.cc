#include "model/layers.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "model/dropout.h"
#include "model/kernels/avx2.h"
#include "model/kernels/bf16_linear.h"
#include "model/kernels/few_rows_linear.h"
#include "model/kernels/fp32_packed_linear.h"
#include "model/kernels/rms_norm.h"
#include "model/param_binder.h"

namespace srformer {

bool is_cpu_inference_float(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 &&
         !(torch::GradMode::is_enabled() && t.requires_grad());
}

torch::Tensor clamp_fp16_overflow(const torch::Tensor& h) {
  if (h.scalar_type() != torch::kFloat16) return h;
  constexpr double kMax = 65504.0;  // the largest finite fp16
  const auto bound = torch::where(torch::isinf(h).any(), torch::full({}, kMax - 1000.0, h.options()),
                                  torch::full({}, kMax, h.options()));
  if (h.is_cpu()) {  // LibTorch 1.13 has no fp16 clamp on the CPU (only tests get here: fp16 is for CUDA)
    return torch::where(h > bound, bound, torch::where(h < -bound, -bound, h));
  }
  return torch::clamp(h, -bound, bound);
}

bool owns_storage(const torch::Tensor& t) { return t.use_count() == 1 && t.storage().use_count() == 1; }

namespace {

// Weights and biases are read in place: contiguous, or absent (no bias).
bool is_plain_float(const torch::Tensor& t) { return !t.defined() || (is_cpu_inference_float(t) && t.is_contiguous()); }

// Up to 8 rows the weight-streaming kernel is 3-10x faster than OpenBLAS's sgemm here, at 32 rows
// 1.4-1.8x with AVX-512 (`srformer bench --only linear` prints both side by side). It takes every row
// count (groups of 32 rows, each summed as one row alone would be), so that a row's projections do not
// depend on how many other rows share the call: a decode batch of any size, a document encoded alone or
// with others of its length. sgemm sums a row in another order than the kernel, so switching to it above
// some row count would change a request's last bits once its batch grew past that count. Autograd and
// non-fp32 tensors take LibTorch's path.
bool use_few_rows(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, int64_t rows) {
  return rows >= 1 && is_cpu_inference_float(x) && is_plain_float(weight) && is_plain_float(bias) &&
         kernels::use_cpu_kernels();
}

// x [..., in] (CPU float32) as `rows` contiguous rows -> kernel(x rows, y rows) -> y [..., out].
template <typename Kernel>
torch::Tensor rows_product(const torch::Tensor& x, int64_t rows, int64_t out, Kernel&& kernel) {
  const auto xc = x.reshape({rows, x.size(-1)}).contiguous();
  auto y = torch::empty({rows, out}, xc.options());
  kernel(xc.data_ptr<float>(), y.data_ptr<float>());
  auto shape = x.sizes().vec();
  shape.back() = out;
  return y.view(shape);
}

torch::Tensor few_rows(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, int64_t rows) {
  const int64_t out = weight.size(0);
  const float* wp = weight.data_ptr<float>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  return rows_product(x, rows, out, [&](const float* xp, float* yp) {
    kernels::few_rows_linear(xp, rows, x.size(-1), wp, out, bp, yp, at::get_num_threads());
  });
}

}  // namespace

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = x.size(-1);
  if (weight.size(1) != in) return torch::linear(x, weight, bias);  // LibTorch's error message
  const int64_t rows = in > 0 ? x.numel() / in : 0;
  if (use_few_rows(x, weight, bias, rows)) return few_rows(x, weight, bias, rows);
  if (rows != 1 || !x.device().is_cpu()) return torch::linear(x, weight, bias);
  auto y = torch::mv(weight, x.reshape({in}));
  if (bias.defined()) y = y + bias;
  auto shape = x.sizes().vec();
  shape.back() = weight.size(0);
  return y.view(shape);
}

torch::Tensor Linear::operator()(const torch::Tensor& x) const {
  const bool weight_tracked = torch::GradMode::is_enabled() && weight.requires_grad();
  if (packed_fp32 && !packed && !weight_tracked && is_cpu_inference_float(x) && x.size(-1) == packed_fp32->in() &&
      kernels::use_cpu_kernels() && kernels::fp32_packed_available()) {
    const int64_t rows = x.numel() / packed_fp32->in();
    if (rows >= 1) {
      return rows_product(x, rows, packed_fp32->out(), [&](const float* xp, float* yp) {
        packed_fp32->multiply(xp, rows, yp, at::get_num_threads());
      });
    }
  }
  if (!packed || weight_tracked || !is_cpu_inference_float(x) || x.size(-1) != packed->in()) {
    return linear(x, weight, bias);
  }
  const int64_t rows = x.numel() / packed->in();
  return rows_product(x, rows, packed->out(),
                      [&](const float* xp, float* yp) { packed->multiply(xp, rows, yp, at::get_num_threads()); });
}

void Linear::pack_bf16() {
  const auto w = weight.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  const auto b = bias.defined() ? bias.detach().to(torch::kCPU, torch::kFloat32).contiguous() : torch::Tensor();
  packed = std::make_shared<const kernels::Bf16PackedMatrix>(w.data_ptr<float>(), w.size(0), w.size(1),
                                                             b.defined() ? b.data_ptr<float>() : nullptr);
}

int64_t Linear::packed_bytes() const {
  return static_cast<int64_t>((packed ? packed->bytes() : 0) + (packed_fp32 ? packed_fp32->bytes() : 0));
}

void Linear::pack_fp32() {
  if (!kernels::avx2_fma_available() || !weight.device().is_cpu() || weight.scalar_type() != torch::kFloat32) return;
  const auto w = weight.detach().contiguous();
  const auto b = bias.defined() ? bias.detach().to(torch::kFloat32).contiguous() : torch::Tensor();
  packed_fp32 = std::make_shared<const kernels::Fp32PackedMatrix>(w.data_ptr<float>(), w.size(0), w.size(1),
                                                                  b.defined() ? b.data_ptr<float>() : nullptr);
}

Linear Linear::bind(ParamBinder& w, const std::string& prefix, int64_t out, int64_t in, bool with_bias) {
  Linear l;
  l.weight = w.take(prefix + ".weight", {out, in});
  if (with_bias) l.bias = w.take(prefix + ".bias", {out});
  if (w.pack_bf16()) l.pack_bf16();
  return l;
}

torch::Tensor LayerNorm::operator()(const torch::Tensor& x) const {
  if (!rms) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  if (is_cpu_inference_float(x) && x.dim() > 0 && x.size(-1) > 0 && weight.defined() && is_plain_float(weight) &&
      kernels::use_cpu_kernels()) {
    const auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t dim = xc.size(-1);
    kernels::rms_norm(xc.data_ptr<float>(), xc.numel() / dim, dim, weight.data_ptr<float>(), static_cast<float>(eps),
                      y.data_ptr<float>(), at::get_num_threads());
    return y;
  }
  // T5LayerNorm: variance in fp32, no mean subtraction, no bias; back to the weight's dtype.
  const auto var = x.to(torch::kFloat32).pow(2).mean(-1, /*keepdim=*/true);
  auto y = x * torch::rsqrt(var + eps);
  if (weight.scalar_type() == torch::kHalf || weight.scalar_type() == torch::kBFloat16) y = y.to(weight.scalar_type());
  return weight * y;
}

LayerNorm LayerNorm::bind(ParamBinder& w, const std::string& prefix, int64_t dim, double eps, bool rms) {
  LayerNorm n;
  n.weight = w.take(prefix + ".weight", {dim});
  if (!rms) n.bias = w.take(prefix + ".bias", {dim});
  n.eps = eps;
  n.rms = rms;
  return n;
}

Activation activation_from_string(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu" || name == "gelu_python") return Activation::kGelu;
  // gelu_fast writes the same tanh formula as gelu_new, with the constant rounded to 10 digits.
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::kGeluTanh;
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "quick_gelu") return Activation::kQuickGelu;
  throw std::invalid_argument("unsupported activation '" + name + "'");
}

torch::Tensor activate(const torch::Tensor& x, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return torch::relu(x);
    case Activation::kGelu:
      return torch::gelu(x);
    case Activation::kGeluTanh: {
      // gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      constexpr double kSqrt2OverPi = 0.7978845608028654;
      return 0.5 * x * (1.0 + torch::tanh(kSqrt2OverPi * (x + 0.044715 * torch::pow(x, 3.0))));
    }
    case Activation::kSilu:
      return torch::silu(x);
    case Activation::kQuickGelu:
      return x * torch::sigmoid(1.702 * x);
  }
  return x;
}

torch::Tensor FeedForward::operator()(const torch::Tensor& x) const {
  auto h = in(x);
  // In place when nothing records the graph: over an encoder's rows the activation is tens of MB, and a
  // second tensor of that size costs a pass of page faults as well as the write.
  h = act == Activation::kRelu && !h.requires_grad() ? h.relu_() : activate(h, act);
  if (gate.weight.defined()) h = h * gate(x);
  return out(dropout(h, DropoutSite::kActivation));
}

torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) {
  const auto b = x.size(0);
  const auto t = x.size(1);
  return x.view({b, t, heads, -1}).transpose(1, 2);
}

torch::Tensor project_heads(const Linear& proj, const torch::Tensor& x, int64_t heads, int64_t positions,
                            const std::function<void()>& between) {
  if (positions <= 0) throw std::invalid_argument("project_heads: positions must be positive");
  const int64_t T = x.size(1);
  if (positions >= T) return split_heads(proj(x), heads).contiguous();
  return concat_blocks(T, positions, 2, between,
                       [&](int64_t first, int64_t n) { return split_heads(proj(x.narrow(1, first, n)), heads); });
}

torch::Tensor concat_blocks(int64_t total, int64_t block, int64_t dim, const std::function<void()>& between,
                            const std::function<torch::Tensor(int64_t first, int64_t n)>& piece) {
  if (block <= 0) throw std::invalid_argument("concat_blocks: block must be positive");
  torch::Tensor out;
  for (int64_t first = 0; first < total; first += block) {
    if (first > 0 && between) between();
    const int64_t n = std::min(block, total - first);
    const auto part = piece(first, n);
    if (!out.defined()) {
      auto sizes = part.sizes().vec();
      sizes.at(static_cast<size_t>(dim)) = total;
      out = torch::empty(sizes, part.options());
    }
    out.narrow(dim, first, n).copy_(part);
  }
  return out;
}

torch::Tensor merge_heads(const torch::Tensor& x) {
  const auto b = x.size(0);
  const auto t = x.size(2);
  return x.transpose(1, 2).reshape({b, t, -1});
}

}  // namespace srformer
