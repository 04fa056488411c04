#include "model/train/adamw.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/whole_number.h"
#include "model/io/safetensors.h"

namespace srformer::train {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions options) : options_(options) {
  for (auto& [name, p] : params) {
    if (!p.is_floating_point() || !p.requires_grad()) {
      throw std::invalid_argument("AdamW: parameter '" + name + "' is not a floating-point tensor that requires grad");
    }
    Slot s;
    s.name = name;
    s.param = p;
    s.exp_avg = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
    s.exp_avg_sq = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
    // Hugging Face's Trainer rule: no decay for biases (also BART's final_logits_bias [1, V] and T5's
    // relative_attention_bias tables, matrices by shape) nor norm weights and RAF scalars (1-D).
    s.decay = p.dim() >= 2 && name.find("bias") == std::string::npos;
    slots_.push_back(std::move(s));
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double bc1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(options_.beta2, static_cast<double>(steps_));
  for (auto& s : slots_) {
    const auto& g = s.param.grad();
    if (!g.defined()) continue;
    if (s.decay && options_.weight_decay != 0.0) s.param.mul_(1.0 - lr * options_.weight_decay);
    s.exp_avg.mul_(options_.beta1).add_(g, 1.0 - options_.beta1);
    s.exp_avg_sq.mul_(options_.beta2).addcmul_(g, g, 1.0 - options_.beta2);
    const auto denom = (s.exp_avg_sq / bc2).sqrt_().add_(options_.eps);
    s.param.addcdiv_(s.exp_avg, denom, -lr / bc1);
  }
}

void AdamW::zero_grad() {
  for (auto& s : slots_) {
    if (s.param.grad().defined()) s.param.mutable_grad() = torch::Tensor();
  }
}

void AdamW::save(const std::filesystem::path& file) const {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& s : slots_) {
    tensors.emplace_back("exp_avg." + s.name, s.exp_avg);
    tensors.emplace_back("exp_avg_sq." + s.name, s.exp_avg_sq);
  }
  save_safetensors(file, tensors, {{"step", std::to_string(steps_)}});
}

void AdamW::load(const std::filesystem::path& file) {
  const auto f = SafetensorsFile::open(file);
  const auto& meta = f.metadata();
  if (!meta.contains("step")) throw std::runtime_error(file.string() + ": no \"step\" in the metadata");
  const auto expected = 2 * slots_.size();
  if (f.tensors().size() != expected) {
    throw std::runtime_error(file.string() + " holds " + std::to_string(f.tensors().size()) +
                             " tensors; this model's " + "optimizer has " + std::to_string(expected) +
                             " (a checkpoint of another model?)");
  }
  torch::NoGradGuard no_grad;
  for (auto& s : slots_) {
    using Entry = std::pair<const char*, torch::Tensor*>;
    for (const auto& [prefix, dst] : {Entry{"exp_avg.", &s.exp_avg}, Entry{"exp_avg_sq.", &s.exp_avg_sq}}) {
      const auto name = std::string(prefix) + s.name;
      if (!f.find(name)) throw std::runtime_error(file.string() + ": missing optimizer state '" + name + "'");
      const auto t = f.tensor(name);
      if (t.sizes() != dst->sizes()) {
        throw std::runtime_error(file.string() + ": optimizer state '" + name + "' has the wrong shape");
      }
      // Damaged state would turn every weight it updates into NaN.
      if (!torch::isfinite(t).all().item<bool>() || (dst == &s.exp_avg_sq && (t < 0).any().item<bool>())) {
        throw std::runtime_error(file.string() + ": optimizer state '" + name + "' holds " +
                                 (dst == &s.exp_avg_sq ? "negative, NaN or infinite" : "NaN or infinite") +
                                 " values; the checkpoint is damaged (remove it to resume from an earlier one)");
      }
      dst->copy_(t);
    }
  }
  const std::string step = meta.at("step").get<std::string>();
  const auto parsed = whole_int64(step);
  if (!parsed || *parsed < 0) {
    throw std::runtime_error(file.string() + ": the metadata's \"step\" is '" + step +
                             "', not a count of updates; the checkpoint is damaged");
  }
  steps_ = *parsed;
}

double clip_grad_norm(const std::vector<std::pair<std::string, torch::Tensor>>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const auto& [name, p] : params) {
    if (p.grad().defined()) norms.push_back(p.grad().to(torch::kFloat32).norm().view({1}));
  }
  if (norms.empty()) return 0.0;
  const double total = torch::cat(norms).norm().item<double>();
  const double scale = max_norm / (total + 1e-6);
  if (scale < 1.0) {
    for (const auto& [name, p] : params) {
      if (p.grad().defined()) p.mutable_grad().mul_(scale);
    }
  }
  return total;
}

double linear_schedule(double peak, int64_t step, int64_t warmup, int64_t total) {
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (total <= warmup) return peak;
  return peak * std::max(0.0, static_cast<double>(total - step) / static_cast<double>(total - warmup));
}

}  // namespace srformer::train
