#pragma once
// All weights of a Hugging Face model directory, whatever file layout holds them.
#include <torch/types.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/io/safetensors.h"

namespace srformer {

// Removes the weight files in `dir` other than model.safetensors: sharded or pickled checkpoints and the
// shards their indexes name (an index it cannot read goes, its shards stay, with a warning). For a
// directory a model.safetensors was just written into (save_model): the reader takes model.safetensors
// first, and the rest would only take disk and mislead a person (Hugging Face's save_pretrained removes
// them too).
void remove_other_weight_files(const std::filesystem::path& dir);

class CheckpointReader {
 public:
  // Looks, in this order, for model.safetensors, model.safetensors.index.json (shards named by its
  // "weight_map"), pytorch_model.bin and pytorch_model.bin.index.json. Throws LoadError listing those names
  // when none exists, or naming the file and fault when one cannot be read.
  static CheckpointReader open_dir(const std::filesystem::path& dir);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  // The shard an index puts `name` in where that shard does not hold it (not contains(name) then: a
  // tied weight the index lists under every name but a shard stores once), for error messages.
  std::optional<std::string> shard_lacking(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;  // throws LoadError if absent
  // CPU tensor in its stored dtype; safetensors tensors are zero-copy views. Throws LoadError if absent.
  torch::Tensor get(const std::string& name) const;
  std::string describe() const;  // e.g. "model.safetensors (123 tensors)"
  const std::filesystem::path& dir() const { return dir_; }

 private:
  struct Entry {
    int shard = -1;        // index into shards_, or -1 when `tensor` holds the data (pytorch .bin)
    torch::Tensor tensor;  // only for .bin checkpoints
  };

  CheckpointReader() = default;
  void add_file(const std::filesystem::path& file, const std::vector<std::string>* only);
  // Records `name`; one an index lists (`listed`) is not replaced by a copy in another shard.
  void add_entry(const std::string& name, Entry entry, bool listed);
  const Entry& entry(const std::string& name) const;

  std::filesystem::path dir_;
  std::string source_;     // the file (or index) we read
  size_t file_count_ = 0;  // files read (shards, or 1)
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> absent_from_shard_;  // name -> the shard the index wrongly puts it in
  std::set<std::string> listed_;                          // names read from the shard the index puts them in
};

}  // namespace srformer
