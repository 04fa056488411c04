#include "model/tokenizer/tokenizer_files.h"

#include "model/io/json_file.h"
#include "model/tokenizer/tokenizer_error.h"

namespace srformer {

namespace fs = std::filesystem;

nlohmann::json read_tokenizer_file(const fs::path& file) {
  return read_json_file<TokenizerLoadError>(file, "a JSON file", "restore the file from the model's repository");
}

std::optional<nlohmann::json> read_tokenizer_file_if_present(const fs::path& file) {
  if (!fs::exists(file)) return std::nullopt;
  return read_tokenizer_file(file);
}

std::optional<int64_t> token_id_key(const std::string& key) {
  if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(key);
}

const nlohmann::json* tokenizer_json_of(const fs::path& model_dir, const nlohmann::json* parsed,
                                        std::optional<nlohmann::json>& storage) {
  if (parsed != nullptr) return parsed;
  storage = read_tokenizer_file_if_present(model_dir / "tokenizer.json");
  return storage ? &*storage : nullptr;
}

std::optional<std::string> token_content(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return std::nullopt;
}

std::vector<const nlohmann::json*> listed_special_tokens(const nlohmann::json& config) {
  std::vector<const nlohmann::json*> out;
  if (!config.is_object()) return out;
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    const auto it = config.find(key);
    if (it == config.end() || !(it->is_array() || it->is_object())) continue;
    for (const auto& token : *it) out.push_back(&token);  // an object's values
  }
  return out;
}

std::vector<std::pair<std::string, int64_t>> read_added_tokens_json(const fs::path& model_dir) {
  const auto file = model_dir / "added_tokens.json";
  const auto j = read_tokenizer_file_if_present(file);
  if (!j) return {};
  if (!j->is_object()) throw TokenizerLoadError(file.string() + " must be an object of {token: id}");
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [content, id] : j->items()) {
    if (id.is_number_integer()) out.emplace_back(content, id.get<int64_t>());
  }
  return out;
}

std::vector<std::pair<int64_t, const nlohmann::json*>> added_tokens_decoder(const nlohmann::json& config,
                                                                            const fs::path& file) {
  if (!config.is_object() || !config.contains("added_tokens_decoder") || !config["added_tokens_decoder"].is_object()) {
    return {};
  }
  std::vector<std::pair<int64_t, const nlohmann::json*>> out;
  for (const auto& [key, token] : config["added_tokens_decoder"].items()) {
    // Keys are ids written as text: anything else is named, not left to std::stoll's "stoll".
    const auto id = token_id_key(key);
    if (!id) {
      throw TokenizerLoadError(file.string() + ": added_tokens_decoder key '" + key +
                               "' is not a token id (a whole number below 10^9)");
    }
    out.emplace_back(*id, &token);
  }
  return out;
}

}  // namespace srformer
