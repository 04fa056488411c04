#pragma once
// Hands named parameters from a checkpoint to a model under construction. Problems (missing tensors, wrong
// shapes, tensors nobody asked for) are collected, so one failed load reports all of them at once.
#include <torch/types.h>

#include <optional>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/io/checkpoint.h"

namespace srformer {

class WeightBinder {
 public:
  // `ckpt` must outlive the binder. Floating-point tensors are converted to `dtype`; every tensor goes to
  // `device`.
  WeightBinder(const CheckpointReader& ckpt, torch::ScalarType dtype, torch::Device device);

  // Required tensor `name`, or else the first of `aliases` present (tied weights stored once, e.g.
  // "lm_head.weight" -> "shared.weight"). When none is present or the shape differs, records the problem
  // and returns zeros of `shape`, so construction can go on until finish().
  torch::Tensor take(const std::string& name, const std::vector<int64_t>& shape,
                     const std::vector<std::string>& aliases = {});
  // As take(), but floating-point data stays float32 whatever the binder dtype (RAF parameters, norms).
  torch::Tensor take_fp32(const std::string& name, const std::vector<int64_t>& shape,
                          const std::vector<std::string>& aliases = {});
  // nullopt when absent (not a problem); a wrong shape is recorded and also gives nullopt.
  std::optional<torch::Tensor> take_optional(const std::string& name, const std::vector<int64_t>& shape);
  // As take_optional(), keeping float32 (take_fp32's RAF parameters, where a checkpoint may lack them).
  std::optional<torch::Tensor> take_optional_fp32(const std::string& name, const std::vector<int64_t>& shape);
  // Checkpoint names (whole-name ECMAScript regex) allowed to stay unused, e.g. tied copies or buffers.
  // Throws std::invalid_argument for a bad regex.
  void ignore(const std::string& name_regex);
  // Names asked for with `prefix` are read without it (Hugging Face's base_model_prefix: a checkpoint saved
  // from the base model, such as BartModel's, lacks the "model." its ForConditionalGeneration class adds).
  // Errors name the tensors as the file does; ignore() regexes also match a file's names with `prefix`.
  void read_without_prefix(std::string prefix) { strip_prefix_ = std::move(prefix); }

  // Throws LoadError listing every missing tensor, every shape mismatch and every unused, not ignored
  // checkpoint tensor. Call once after construction.
  void finish() const;
  const std::vector<std::string>& used() const { return used_; }  // checkpoint names taken, first use first
  torch::Device device() const { return device_; }

 private:
  std::optional<torch::Tensor> bind_optional(const std::string& name, const std::vector<int64_t>& shape,
                                             torch::ScalarType dtype);
  torch::Tensor bind(const std::string& name, const std::vector<int64_t>& shape,
                     const std::vector<std::string>& aliases, torch::ScalarType dtype, bool required);
  void mark_used(const std::string& name);
  // `name` as the checkpoint stores it (read_without_prefix).
  std::string file_name(const std::string& name) const;
  // Throws LoadError with the problems found so far and why construction stopped before finish().
  [[noreturn]] void fail_early(const std::string& why) const;
  // The error listing the problems; `stopped` non-empty: construction stopped early (unexpected untold).
  std::string report(const std::vector<std::string>& unexpected, const std::string& stopped) const;

  const CheckpointReader& ckpt_;
  torch::ScalarType dtype_;
  torch::Device device_;
  std::vector<std::string> used_;
  std::set<std::string> used_set_;
  std::vector<std::pair<std::string, std::regex>> ignored_;
  std::string strip_prefix_;
  std::vector<std::string> missing_, mismatched_;
  double checkpoint_elements_ = 0;   // every checkpoint tensor's elements
  double placeholder_elements_ = 0;  // every stand-in's so far (the elements the config asks for in vain)
  size_t max_problems_ = 0;
};

}  // namespace srformer
