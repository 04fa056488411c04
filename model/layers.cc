#include "model/layers.h"

#include <torch/torch.h>

#include <stdexcept>

#include "model/param_binder.h"

namespace srformer {

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = x.size(-1);
  if (x.numel() != in || !x.device().is_cpu()) return torch::linear(x, weight, bias);
  auto y = torch::mv(weight, x.reshape({in}));
  if (bias.defined()) y = y + bias;
  auto shape = x.sizes().vec();
  shape.back() = weight.size(0);
  return y.view(shape);
}

torch::Tensor Linear::operator()(const torch::Tensor& x) const { return linear(x, weight, bias); }

Linear Linear::bind(ParamBinder& w, const std::string& prefix, int64_t out, int64_t in, bool with_bias) {
  Linear l;
  l.weight = w.take(prefix + ".weight", {out, in});
  if (with_bias) l.bias = w.take(prefix + ".bias", {out});
  return l;
}

torch::Tensor LayerNorm::operator()(const torch::Tensor& x) const {
  if (!rms) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
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
  if (name == "gelu") return Activation::kGelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::kGeluTanh;
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
  }
  return x;
}

torch::Tensor FeedForward::operator()(const torch::Tensor& x) const {
  auto h = activate(in(x), act);
  if (gate.weight.defined()) h = h * gate(x);
  return out(h);
}

torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) {
  const auto b = x.size(0);
  const auto t = x.size(1);
  return x.view({b, t, heads, -1}).transpose(1, 2);
}

torch::Tensor merge_heads(const torch::Tensor& x) {
  const auto b = x.size(0);
  const auto t = x.size(2);
  return x.transpose(1, 2).reshape({b, t, -1});
}

}  // namespace srformer
