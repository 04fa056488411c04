#pragma once
// Tokenizer interface shared by SentencePiece (T5) and byte-level BPE (BART) implementations.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/space_cleanup.h"

namespace srformer {

using TokenIds = std::vector<int64_t>;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text -> ids with the model's conventions (T5: EOS appended; BART: <s> ... </s>).
  virtual TokenIds encode(std::string_view text) const = 0;
  // `word` as running text writes it, without the special tokens encode() adds: as a word of its own, after
  // a space, where after_space (BART's "Ġword", T5's "▁word"), else straight after other text, inside a word
  // or after punctuation (BART's "word", T5's pieces without the leading U+2581). Hugging Face's
  // bad_words_ids of a word are these sequences. Empty where the text gives no tokens.
  virtual TokenIds encode_word(std::string_view word, bool after_space) const = 0;
  // Ids -> text. Special tokens (pad, eos, bos, unk, control tokens) are dropped when skip_special. Then
  // Hugging Face's clean_up_tokenization_spaces (space_cleanup.h) where the tokenizer's files ask for it.
  std::string decode(const TokenIds& ids, bool skip_special = true) const {
    std::string text = decode_raw(ids, skip_special);
    return clean_up_spaces_ ? clean_up_spaces(text) : text;
  }
  // decode() without the clean-up (IncrementalDetokenizer cleans its deltas up as a stream).
  virtual std::string decode_raw(const TokenIds& ids, bool skip_special = true) const = 0;
  // tokenizer_config.json's clean_up_tokenization_spaces (load_tokenizer sets it).
  bool cleans_up_spaces() const { return clean_up_spaces_; }
  void set_clean_up_spaces(bool on) { clean_up_spaces_ = on; }

  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int64_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int64_t id) const = 0;
  virtual bool is_special(int64_t id) const = 0;

  virtual std::optional<int64_t> bos_id() const = 0;
  virtual std::optional<int64_t> eos_id() const = 0;
  virtual std::optional<int64_t> pad_id() const = 0;

 private:
  bool clean_up_spaces_ = false;
};

// Loads the tokenizer that lives in a Hugging Face model directory:
// spiece.model (SentencePiece) or vocab.json + merges.txt (byte-level BPE).
// Throws std::runtime_error naming the files it looked for when none is found.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);

// Turns a growing sequence of token ids into text deltas that are always valid UTF-8 and
// concatenate to decode(all ids). Holds back bytes of an incomplete multi-byte character or a
// piece whose text depends on what follows.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = true);
  // Adds one token; returns the newly final text (possibly empty).
  std::string push(int64_t id);
  // Flushes whatever is held back (end of sequence).
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  TokenIds ids_;
  size_t emitted_bytes_ = 0;
  SpaceCleanupStream cleanup_;  // used where the tokenizer cleans up spaces
};

}  // namespace srformer
