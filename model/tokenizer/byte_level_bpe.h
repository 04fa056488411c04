#pragma once
// Byte-level BPE (GPT-2 / RoBERTa / BART): bytes mapped to printable code points, GPT-2's
// pre-tokenization regex, merges applied by rank. Encode wraps the ids in <s> ... </s> (BART).
#include <array>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/tokenizer.h"

namespace srformer {

// GPT-2's reversible byte -> code point map (printable Latin-1 bytes stand for themselves, the
// rest move to U+0100 onwards), and each byte's symbol as UTF-8 text: the alphabet of vocab.json.
std::array<char32_t, 256> byte_to_code_point();
std::array<std::string, 256> byte_level_symbols();

struct ByteLevelBpeConfig {
  std::unordered_map<std::string, int64_t> vocab;           // byte-level token string -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  // Tokens matched literally in text (specials and other added tokens); their ids may extend the vocab.
  std::vector<AddedToken> added_tokens;
  std::string bos_token = "<s>", eos_token = "</s>", pad_token = "<pad>", unk_token = "<unk>";
  bool add_prefix_space = false;
  bool add_bos_eos = true;
};

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  // Loads vocab.json + merges.txt from model_dir, plus (when present) added_tokens.json,
  // special_tokens_map.json, tokenizer_config.json and tokenizer.json for added/special tokens.
  // parsed_tokenizer_json: the directory's tokenizer.json when the caller has read it already.
  static std::unique_ptr<ByteLevelBpeTokenizer> load(const std::filesystem::path& model_dir,
                                                     const nlohmann::json* parsed_tokenizer_json = nullptr);

  explicit ByteLevelBpeTokenizer(ByteLevelBpeConfig config);
  ~ByteLevelBpeTokenizer() override;

  TokenIds encode(std::string_view text) const override;
  TokenIds encode_word(std::string_view word, bool after_space) const override;
  std::string decode_raw(const TokenIds& ids, bool skip_special = true) const override;

  int64_t vocab_size() const override;
  std::optional<int64_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int64_t id) const override;
  bool is_special(int64_t id) const override;

  std::optional<int64_t> bos_id() const override;
  std::optional<int64_t> eos_id() const override;
  std::optional<int64_t> pad_id() const override;

  // Words whose merges encode() keeps for the next time it meets them (at most 65536, each short).
  size_t cached_words() const;

 private:
  void check_id(int64_t id) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace srformer
