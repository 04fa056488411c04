#include "model/io/weight_binder.h"

#include <torch/torch.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "model/io/load_error.h"

namespace srformer {
namespace {

// Past this many lines per category the message says "... and N more": a wrong architecture would
// otherwise list every tensor.
constexpr size_t kMaxListed = 20;

std::string shape_string(c10::IntArrayRef shape) {
  std::ostringstream out;
  out << shape;
  return out.str();
}

void list(std::ostringstream& out, const char* title, const std::vector<std::string>& items) {
  if (items.empty()) return;
  out << "\n  " << title << " (" << items.size() << "):";
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) out << "\n    " << items[i];
  if (items.size() > kMaxListed) out << "\n    ... and " << items.size() - kMaxListed << " more";
}

// Elements in `shape`, saturating instead of overflowing (a config may ask for absurd sizes).
double element_count(c10::IntArrayRef shape) {
  double n = 1;
  for (const int64_t d : shape) n *= static_cast<double>(std::max<int64_t>(d, 0));
  return n;
}

}  // namespace

WeightBinder::WeightBinder(const CheckpointReader& ckpt, torch::ScalarType dtype, torch::Device device)
    : ckpt_(ckpt), dtype_(dtype), device_(device) {
  const auto names = ckpt_.names();
  for (const auto& name : names) checkpoint_elements_ += element_count(ckpt_.shape(name));
  max_problems_ = std::max<size_t>(1000, 2 * names.size());
}

torch::Tensor WeightBinder::take(const std::string& name, const std::vector<int64_t>& shape,
                                 const std::vector<std::string>& aliases) {
  return bind(name, shape, aliases, dtype_, true);
}

torch::Tensor WeightBinder::take_fp32(const std::string& name, const std::vector<int64_t>& shape,
                                      const std::vector<std::string>& aliases) {
  return bind(name, shape, aliases, torch::kFloat32, true);
}

std::optional<torch::Tensor> WeightBinder::take_optional(const std::string& name, const std::vector<int64_t>& shape) {
  return bind_optional(name, shape, dtype_);
}

std::optional<torch::Tensor> WeightBinder::take_optional_fp32(const std::string& name,
                                                              const std::vector<int64_t>& shape) {
  return bind_optional(name, shape, torch::kFloat32);
}

std::string WeightBinder::file_name(const std::string& name) const {
  if (strip_prefix_.empty() || name.compare(0, strip_prefix_.size(), strip_prefix_) != 0) return name;
  return name.substr(strip_prefix_.size());
}

std::optional<torch::Tensor> WeightBinder::bind_optional(const std::string& name, const std::vector<int64_t>& shape,
                                                         torch::ScalarType dtype) {
  if (!ckpt_.contains(file_name(name))) return std::nullopt;
  const size_t problems = mismatched_.size();
  torch::Tensor tensor = bind(name, shape, {}, dtype, false);
  if (mismatched_.size() != problems) return std::nullopt;
  return tensor;
}

torch::Tensor WeightBinder::bind(const std::string& asked, const std::vector<int64_t>& shape,
                                 const std::vector<std::string>& asked_aliases, torch::ScalarType dtype,
                                 bool required) {
  const std::string name = file_name(asked);
  std::vector<std::string> aliases;
  for (const auto& alias : asked_aliases) aliases.push_back(file_name(alias));
  const std::string* found = ckpt_.contains(name) ? &name : nullptr;
  for (size_t i = 0; found == nullptr && i < aliases.size(); ++i) {
    if (ckpt_.contains(aliases[i])) found = &aliases[i];
  }
  // A stand-in so that construction goes on until finish() lists every problem, unless the config asks
  // for far more than the checkpoint holds: then the list so far is the answer, before placeholders
  // exhaust memory or a loop over a million "layers" runs for hours.
  const auto placeholder = [&] {
    placeholder_elements_ += element_count(shape);
    if (placeholder_elements_ > 2 * checkpoint_elements_) {
      fail_early("stopped at " + name + ", " + shape_string(shape) +
                 ": what config.json's model needs and the checkpoint lacks is already over twice the " +
                 std::to_string(static_cast<uint64_t>(checkpoint_elements_)) + " elements the checkpoint holds");
    }
    if (missing_.size() + mismatched_.size() > max_problems_) {
      fail_early("stopped after " + std::to_string(max_problems_) +
                 " problems: the model config.json describes has far more tensors than the checkpoint's " +
                 std::to_string(ckpt_.names().size()) + " (more layers than it holds?)");
    }
    return torch::zeros(shape, torch::TensorOptions().dtype(dtype).device(device_));
  };
  if (found == nullptr) {
    std::string line = name;
    for (size_t i = 0; i < aliases.size(); ++i) line += (i ? ", " : " (also tried ") + aliases[i];
    if (!aliases.empty()) line += ")";
    line += ": expected " + shape_string(shape);
    if (const auto shard = ckpt_.shard_lacking(name)) line += " (the index puts it in " + *shard + ", which lacks it)";
    if (required) missing_.push_back(line);
    return placeholder();
  }
  mark_used(*found);
  const std::vector<int64_t> stored = ckpt_.shape(*found);
  if (stored != shape) {
    const std::string via = *found == name ? "" : " (via " + *found + ")";
    mismatched_.push_back(name + via + ": expected " + shape_string(shape) + ", file has " + shape_string(stored));
    return placeholder();
  }
  torch::Tensor tensor = ckpt_.get(*found);
  // Every parameter a model binds is a weight: an integer tensor under its name would only fail later,
  // inside a product ("expected scalar type Int but found Float").
  if (!tensor.is_floating_point()) {
    const std::string via = *found == name ? "" : " (via " + *found + ")";
    mismatched_.push_back(name + via + ": the file holds " + std::string(c10::toString(tensor.scalar_type())) +
                          " numbers; a weight is F32, F16 or BF16");
    return placeholder();
  }
  return tensor.to(device_, dtype).contiguous();
}

void WeightBinder::mark_used(const std::string& name) {
  if (used_set_.insert(name).second) used_.push_back(name);
}

void WeightBinder::ignore(const std::string& name_regex) {
  try {
    ignored_.emplace_back(name_regex, std::regex(name_regex));
  } catch (const std::regex_error& e) {
    throw std::invalid_argument("WeightBinder::ignore: bad regex '" + name_regex + "': " + e.what());
  }
}

void WeightBinder::fail_early(const std::string& why) const { throw LoadError(report({}, why)); }

void WeightBinder::finish() const {
  std::vector<std::string> unexpected;
  for (const std::string& name : ckpt_.names()) {
    if (used_set_.count(name) > 0) continue;
    bool ignored = false;
    for (const auto& [source, regex] : ignored_) {
      ignored = ignored || std::regex_match(name, regex) ||
                (!strip_prefix_.empty() && std::regex_match(strip_prefix_ + name, regex));
    }
    if (!ignored) unexpected.push_back(name);
  }
  if (missing_.empty() && mismatched_.empty() && unexpected.empty()) return;
  throw LoadError(report(unexpected, ""));
}

std::string WeightBinder::report(const std::vector<std::string>& unexpected, const std::string& stopped) const {
  std::ostringstream out;
  out << "cannot load weights from " << (ckpt_.dir() / ckpt_.describe()).string() << ": " << missing_.size()
      << " missing, " << mismatched_.size() << " with the wrong shape or type";
  if (stopped.empty()) {
    out << ", " << unexpected.size() << " unexpected";
  } else {
    out << " (" << stopped << ")";
  }
  list(out, "missing", missing_);
  list(out, "wrong shape or type", mismatched_);
  list(out, "unexpected (in the file, used by nothing)", unexpected);
  out << "\nhint: check that config.json describes these weights (architecture, d_model, heads, layers, "
         "vocab_size) and that the checkpoint is a BART/T5 model in Hugging Face naming; wrong shapes usually "
         "mean a config mismatch, many missing plus many unexpected names a different model family or prefix.";
  return out.str();
}

}  // namespace srformer
