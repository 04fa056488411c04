#pragma once
// The JSON files of a Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, added_tokens.json, vocab.json), read the same way by every loader.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace srformer {

// Throws TokenizerLoadError when the file cannot be opened or is not valid JSON.
nlohmann::json read_tokenizer_file(const std::filesystem::path& file);
std::optional<nlohmann::json> read_tokenizer_file_if_present(const std::filesystem::path& file);

// The directory's tokenizer.json: `parsed` where the caller has read it already, else read into
// `storage`; nullptr when the directory has none.
const nlohmann::json* tokenizer_json_of(const std::filesystem::path& model_dir, const nlohmann::json* parsed,
                                        std::optional<nlohmann::json>& storage);

// A token as the files name it: "</s>" or {"content": "</s>", ...}; nullopt for anything else.
std::optional<std::string> token_content(const nlohmann::json& j);

// A token id written as a JSON key (added_tokens_decoder's "32100"): digits only, below 10^9; nullopt
// for anything else.
std::optional<int64_t> token_id_key(const std::string& key);

// The further special tokens `config` (tokenizer_config.json, special_tokens_map.json) lists:
// additional_special_tokens, and extra_special_tokens, transformers 5's name for it (a list; in 4.4x-4.5x
// an object of named extra tokens, {"image_token": "<image>"}). Each entry is a token as the files write it.
std::vector<const nlohmann::json*> listed_special_tokens(const nlohmann::json& config);

// added_tokens.json's {content: id} pairs, in the file's order; entries whose id is not an integer are
// skipped. Empty when the directory has no such file; throws TokenizerLoadError when it is no object.
std::vector<std::pair<std::string, int64_t>> read_added_tokens_json(const std::filesystem::path& model_dir);

// The tokens of `config`'s added_tokens_decoder ({"32100": token, ...}) with their ids, empty when it has
// none; throws TokenizerLoadError naming `file` for a key that is no token id.
std::vector<std::pair<int64_t, const nlohmann::json*>> added_tokens_decoder(const nlohmann::json& config,
                                                                            const std::filesystem::path& file);

}  // namespace srformer
