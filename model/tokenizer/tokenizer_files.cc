#include "model/tokenizer/tokenizer_files.h"

#include <fstream>
#include <iterator>

#include "model/io/json_depth.h"
#include "model/io/lfs_pointer.h"
#include "model/tokenizer/tokenizer_error.h"

namespace srformer {

namespace fs = std::filesystem;

nlohmann::json read_tokenizer_file(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw TokenizerLoadError("cannot open " + file.string());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check_json_depth<TokenizerLoadError>(text, file.string() + " ");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    if (auto pointer = lfs_pointer_message(file)) throw TokenizerLoadError(*pointer);
    throw TokenizerLoadError(file.string() + " is not valid JSON (" + e.what() +
                             "); restore the file from the model's repository");
  }
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

}  // namespace srformer
