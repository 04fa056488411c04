#include "model/io/checkpoint.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <system_error>
#include <tuple>

#include "model/io/json_file.h"
#include "model/io/load_error.h"
#include "model/io/pytorch_bin.h"

namespace srformer {
namespace {

namespace fs = std::filesystem;

// Hugging Face's file names, in the order we prefer them (safetensors first: no pickle, zero-copy).
constexpr const char* kSingleSafetensors = "model.safetensors";
constexpr const char* kShardedSafetensors = "model.safetensors.index.json";
constexpr const char* kSingleBin = "pytorch_model.bin";
constexpr const char* kShardedBin = "pytorch_model.bin.index.json";

// Shard name -> tensor names it holds, from an index file's "weight_map".
std::map<std::string, std::vector<std::string>> read_weight_map(const fs::path& index) {
  const auto fail = [&](const std::string& what) { return LoadError(index.string() + ": " + what); };
  const auto json = read_json_file<LoadError>(index, "the JSON index of the shards");
  const auto map = json.is_object() ? json.find("weight_map") : json.end();
  if (map == json.end() || !map->is_object()) throw fail("expected an object with a \"weight_map\" object");
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [name, shard] : map->items()) {
    if (!shard.is_string()) throw fail("weight_map entry '" + name + "' must name a shard file");
    const fs::path file = shard.get<std::string>();
    // Shards sit beside the index; refuse anything that would read elsewhere.
    if (file.empty() || file.is_absolute() || file.has_parent_path()) {
      throw fail("weight_map entry '" + name + "' names shard '" + file.string() +
                 "'; shards must be plain file names in the same directory");
    }
    shards[file.string()].push_back(name);
  }
  return shards;
}

// TensorFlow's and Flax's save_pretrained write model.safetensors too, marked by the header's
// "__metadata__": {"format": "tf" | "flax"}, with their own names ("encoder/block_._0/.../kernel:0",
// "...q.kernel") and transposed kernels; transformers 4 converts them through that framework. They were
// read as PyTorch's and refused as every tensor missing. Any other mark but "pt" and "mlx" (PyTorch's names
// and layouts), or a "__metadata__" without one, transformers refuses as well ("Incompatible safetensors
// file"): PaddleNLP and MindSpore write "np", with linear weights stored [in, out], which a square projection
// would have taken transposed without a word. A file without "__metadata__" is PyTorch's, as there.
void check_pytorch_layout(const SafetensorsFile& file) {
  if (!file.has_metadata()) return;
  const auto& metadata = file.metadata();
  const auto format = metadata.find("format");
  const std::string name = format != metadata.end() && format->is_string() ? format->get<std::string>() : "";
  if (name == "pt" || name == "mlx") return;
  const auto dir = file.path().parent_path().string();
  const char* framework = name == "tf" ? "TensorFlow" : name == "flax" ? "Flax" : nullptr;
  if (framework != nullptr) {
    throw LoadError(file.path().string() + " holds " + framework + "'s weights (its header says \"format\": \"" + name +
                    "\"): their names and layouts are not PyTorch's; convert them once with transformers 4 (5 " +
                    "reads neither) and " + framework + " installed, into another directory, and copy the tokenizer " +
                    "files there:\n  python -c \"from transformers import AutoModelForSeq2SeqLM as M; " +
                    "M.from_pretrained('" + dir + "').save_pretrained('" + dir + "-pytorch')\"");
  }
  const std::string said = format == metadata.end() ? std::string("no \"format\"") : "\"format\": " + format->dump();
  throw LoadError(
      file.path().string() + ": its header's \"__metadata__\" says " + said +
      "; transformers reads only \"pt\" (PyTorch's) and \"mlx\" and refuses it too" +
      (name == "np" ? " (\"np\" is what PaddleNLP and MindSpore write: their linear weights are stored transposed)"
                    : "") +
      ". Convert the weights to PyTorch's names and layouts with the framework that wrote them; if they are "
      "PyTorch's already, mark the file so:\n  python -c \"from safetensors.torch import load_file, save_file; "
      "p = '" +
      file.path().string() + "'; save_file(load_file(p), p, metadata={'format': 'pt'})\"");
}

}  // namespace

void remove_other_weight_files(const fs::path& dir) {
  std::vector<fs::path> stale;
  for (const char* index : {kShardedSafetensors, kShardedBin}) {
    if (!fs::is_regular_file(dir / index)) continue;
    stale.push_back(dir / index);
    try {
      for (const auto& [shard, names] : read_weight_map(dir / index)) {
        if (shard != kSingleSafetensors) stale.push_back(dir / shard);
      }
    } catch (const LoadError& e) {
      spdlog::warn("{} (its shards are left in place)", e.what());
    }
  }
  stale.push_back(dir / kSingleBin);
  std::sort(stale.begin(), stale.end());
  stale.erase(std::unique(stale.begin(), stale.end()), stale.end());
  for (const auto& file : stale) {
    std::error_code ec;
    if (fs::remove(file, ec)) {
      spdlog::info("{}: removed the earlier checkpoint's {}", dir.string(), file.filename().string());
    }
  }
}

CheckpointReader CheckpointReader::open_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw LoadError(dir.string() + ": not a directory; pass the model directory holding " + kSingleSafetensors);
  }
  CheckpointReader reader;
  reader.dir_ = dir;
  for (const std::string name : {kSingleSafetensors, kShardedSafetensors, kSingleBin, kShardedBin}) {
    const fs::path file = dir / name;
    if (!fs::exists(file, ec)) continue;
    reader.source_ = name;
    if (name == kSingleSafetensors || name == kSingleBin) {
      reader.add_file(file, nullptr);
      return reader;
    }
    for (const auto& [shard, names] : read_weight_map(file)) {
      if (!fs::exists(dir / shard, ec)) {
        throw LoadError(file.string() + ": shard " + shard + " (" + std::to_string(names.size()) +
                        " tensors) is missing from " + dir.string());
      }
      reader.add_file(dir / shard, &names);
    }
    return reader;
  }
  // A repository trained with TensorFlow or Flax may hold only those weights (Flax community T5s): they
  // need transformers itself to convert (other names, transposed kernels).
  for (const auto& [file, framework, flag] :
       {std::tuple{"tf_model.h5", "TensorFlow", "from_tf"}, std::tuple{"flax_model.msgpack", "Flax", "from_flax"}}) {
    if (!fs::exists(dir / file, ec)) continue;
    throw LoadError(
        dir.string() + ": no PyTorch weights, only " + framework + "'s " + file +
        "; convert them once with transformers 4 (5 reads neither) and its " + framework +
        " installed:\n  python -c \"from transformers import AutoModelForSeq2SeqLM as M; M.from_pretrained('" +
        dir.string() + "', " + flag + "=True).save_pretrained('" + dir.string() + "')\"");
  }
  throw LoadError(dir.string() + ": no weights found; looked for " + kSingleSafetensors + ", " + kShardedSafetensors +
                  ", " + kSingleBin + " and " + kShardedBin);
}

void CheckpointReader::add_entry(const std::string& name, Entry entry, bool listed) {
  if (listed) {
    listed_.insert(name);
  } else if (listed_.count(name) > 0) {
    return;  // the index puts it in another shard, which holds it
  }
  entries_[name] = std::move(entry);
}

void CheckpointReader::add_file(const fs::path& file, const std::vector<std::string>* only) {
  // An index may list a tensor its shard lacks: the Hub's conversion of sharded .bin checkpoints to
  // safetensors (google/flan-t5-xl, -xxl) stored tied embeddings once but kept every name in weight_map.
  // Hugging Face loads what the shards hold; so do we, and the name is absent unless a model asks for it.
  // A shard may also hold a tensor its index does not list (an index edited or merged by hand): transformers 5
  // (and 4 before 4.50) loads every tensor of every shard the index names, so that one is read too, from the
  // last shard by name that holds it, as there; what the index lists comes from where it says.
  const auto check_has = [&](const std::string& name, bool has) {
    if (!has) absent_from_shard_[name] = file.filename().string();
    return has;
  };
  ++file_count_;
  if (file.extension() == ".safetensors") {
    shards_.push_back(SafetensorsFile::open(file));
    const SafetensorsFile& shard = shards_.back();
    check_pytorch_layout(shard);
    const int index = static_cast<int>(shards_.size()) - 1;
    if (only != nullptr) {
      for (const std::string& name : *only) {
        if (check_has(name, shard.find(name) != nullptr)) add_entry(name, {index, {}}, true);
      }
    }
    for (const TensorInfo& info : shard.tensors()) add_entry(info.name, {index, {}}, only == nullptr);
  } else if (file.extension() == ".bin") {
    auto tensors = load_pytorch_bin(file);
    if (only != nullptr) {
      for (const std::string& name : *only) {
        const auto it = tensors.find(name);
        if (check_has(name, it != tensors.end())) add_entry(name, {-1, it->second}, true);
      }
    }
    for (auto& [name, tensor] : tensors) add_entry(name, {-1, std::move(tensor)}, only == nullptr);
  } else {
    throw LoadError((dir_ / source_).string() + ": shard " + file.filename().string() +
                    " is neither .safetensors nor .bin");
  }
}

const CheckpointReader::Entry& CheckpointReader::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw LoadError(dir_.string() + ": " + describe() + " has no tensor named '" + name + "'");
  return it->second;
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

bool CheckpointReader::contains(const std::string& name) const { return entries_.count(name) > 0; }

std::optional<std::string> CheckpointReader::shard_lacking(const std::string& name) const {
  const auto it = absent_from_shard_.find(name);
  if (it == absent_from_shard_.end()) return std::nullopt;
  return it->second;
}

std::vector<int64_t> CheckpointReader::shape(const std::string& name) const {
  const Entry& e = entry(name);
  return e.shard >= 0 ? shards_[e.shard].find(name)->shape : e.tensor.sizes().vec();
}

torch::Tensor CheckpointReader::get(const std::string& name) const {
  const Entry& e = entry(name);
  return e.shard >= 0 ? shards_[e.shard].tensor(name) : e.tensor;
}

std::string CheckpointReader::describe() const {
  std::string out = source_ + " (";
  if (source_ == kShardedSafetensors || source_ == kShardedBin) out += std::to_string(file_count_) + " shards, ";
  return out + std::to_string(entries_.size()) + " tensors)";
}

}  // namespace srformer
