// ByteLevelBpeTokenizer::load: reads a Hugging Face BART/RoBERTa/GPT-2 tokenizer directory.
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/tokenizer_error.h"

namespace srformer {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw TokenizerLoadError("cannot open " + file.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw TokenizerLoadError(file.string() + " is not valid JSON (" + e.what() +
                             "); restore the file from the model's repository");
  }
}

std::optional<json> read_json_if_present(const fs::path& file) {
  if (!fs::exists(file)) return std::nullopt;
  return read_json(file);
}

std::unordered_map<std::string, int64_t> read_vocab(const fs::path& file) {
  const json j = read_json(file);
  if (!j.is_object()) throw TokenizerLoadError(file.string() + " must be a JSON object mapping tokens to ids");
  std::unordered_map<std::string, int64_t> vocab;
  vocab.reserve(j.size());
  for (const auto& [token, id] : j.items()) {
    if (!id.is_number_integer()) {
      throw TokenizerLoadError(file.string() + ": the id of token '" + token + "' is not an integer");
    }
    vocab.emplace(token, id.get<int64_t>());
  }
  return vocab;
}

std::vector<std::pair<std::string, std::string>> read_merges(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw TokenizerLoadError("cannot open " + file.string());
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos) {
      throw TokenizerLoadError(file.string() + " line " + std::to_string(line_no) +
                               ": expected two tokens separated by one space, got '" + line + "'");
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return merges;
}

// A special/added token as the Hugging Face files describe it: a string or {"content", "lstrip", ...}.
struct TokenSpec {
  std::string content;
  std::optional<int64_t> id = std::nullopt;
  bool special = true;
  bool lstrip = false, rstrip = false;
};

std::optional<TokenSpec> parse_token(const json& j, bool special) {
  if (j.is_string()) return TokenSpec{j.get<std::string>(), std::nullopt, special};
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    TokenSpec t{j["content"].get<std::string>(), std::nullopt, j.value("special", special)};
    t.lstrip = j.value("lstrip", false);
    t.rstrip = j.value("rstrip", false);
    if (j.contains("id") && j["id"].is_number_integer()) t.id = j["id"].get<int64_t>();
    return t;
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<ByteLevelBpeTokenizer> ByteLevelBpeTokenizer::load(const fs::path& model_dir) {
  const auto vocab_file = model_dir / "vocab.json", merges_file = model_dir / "merges.txt";
  for (const auto& f : {vocab_file, merges_file}) {
    if (!fs::exists(f)) {
      throw TokenizerLoadError("byte-level BPE tokenizer needs vocab.json and merges.txt: " + f.string() +
                               " does not exist");
    }
  }
  ByteLevelBpeConfig config;
  config.vocab = read_vocab(vocab_file);
  config.merges = read_merges(merges_file);

  // Role -> token; BART/RoBERTa defaults, <mask> swallowing the space before it as they do.
  std::map<std::string, TokenSpec> roles = {
      {"bos_token", {"<s>"}},   {"eos_token", {"</s>"}}, {"unk_token", {"<unk>"}},   {"sep_token", {"</s>"}},
      {"pad_token", {"<pad>"}}, {"cls_token", {"<s>"}},  {"mask_token", {"<mask>"}},
  };
  roles["mask_token"].lstrip = true;
  std::map<std::string, TokenSpec> added;  // content -> spec (later files override earlier ones)
  const auto add = [&](const TokenSpec& t) {
    auto& slot = added[t.content];
    const auto id = t.id ? t.id : slot.id;
    slot = t;
    slot.id = id;
  };

  if (const auto tj = read_json_if_present(model_dir / "tokenizer.json")) {
    if (tj->contains("added_tokens") && (*tj)["added_tokens"].is_array()) {
      for (const auto& a : (*tj)["added_tokens"]) {
        if (auto t = parse_token(a, false)) add(*t);
      }
    }
    const json& pre = tj->contains("pre_tokenizer") ? (*tj)["pre_tokenizer"] : json();
    if (pre.is_object() && pre.value("type", "") == "ByteLevel")
      config.add_prefix_space = pre.value("add_prefix_space", false);
  }
  if (const auto aj = read_json_if_present(model_dir / "added_tokens.json")) {
    if (!aj->is_object()) throw TokenizerLoadError((model_dir / "added_tokens.json").string() + " must be an object");
    for (const auto& [content, id] : aj->items()) {
      if (id.is_number_integer()) add({content, id.get<int64_t>(), false});
    }
  }
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const auto j = read_json_if_present(model_dir / name);
    if (!j || !j->is_object()) continue;
    for (auto& [role, spec] : roles) {
      if (j->contains(role)) {
        if (auto t = parse_token((*j)[role], true)) {
          // BART/RoBERTa give a plain-string <mask> lstrip (as their slow tokenizers do).
          if (role == "mask_token" && (*j)[role].is_string()) t->lstrip = true;
          spec = *t;
        }
      }
    }
    if (j->contains("additional_special_tokens") && (*j)["additional_special_tokens"].is_array()) {
      for (const auto& a : (*j)["additional_special_tokens"]) {
        if (auto t = parse_token(a, true)) add(*t);
      }
    }
    if (j->contains("added_tokens_decoder") && (*j)["added_tokens_decoder"].is_object()) {
      for (const auto& [id, a] : (*j)["added_tokens_decoder"].items()) {
        if (auto t = parse_token(a, false)) {
          t->id = std::stoll(id);
          add(*t);
        }
      }
    }
    if (j->contains("add_prefix_space") && (*j)["add_prefix_space"].is_boolean()) {
      config.add_prefix_space = (*j)["add_prefix_space"].get<bool>();
    }
  }
  for (const auto& [role, spec] : roles) {
    TokenSpec t = spec;
    t.special = true;
    if (const auto it = added.find(t.content); it != added.end()) {
      t.id = it->second.id;
      t.lstrip = t.lstrip || it->second.lstrip;
      t.rstrip = t.rstrip || it->second.rstrip;
    }
    add(t);
  }
  config.bos_token = roles["bos_token"].content;
  config.eos_token = roles["eos_token"].content;
  config.pad_token = roles["pad_token"].content;
  config.unk_token = roles["unk_token"].content;

  for (const auto& [content, spec] : added) {
    std::optional<int64_t> id = spec.id;
    if (!id) {
      const auto it = config.vocab.find(content);
      if (it == config.vocab.end()) continue;  // a role token this vocabulary does not have
      id = it->second;
    }
    config.added_tokens.push_back({content, *id, spec.special, spec.lstrip, spec.rstrip});
  }
  try {
    return std::make_unique<ByteLevelBpeTokenizer>(std::move(config));
  } catch (const std::invalid_argument& e) {
    throw TokenizerLoadError("cannot load the byte-level BPE tokenizer in " + model_dir.string() + ": " + e.what());
  }
}

}  // namespace srformer
