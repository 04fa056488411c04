#pragma once
// Tokenizer interface shared by SentencePiece (T5) and byte-level BPE (BART) implementations.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace srformer {

using TokenIds = std::vector<int64_t>;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text -> ids with the model's conventions (T5: EOS appended; BART: <s> ... </s>).
  virtual TokenIds encode(std::string_view text) const = 0;
  // Ids -> text. Special tokens (pad, eos, bos, unk-less control tokens) are dropped when skip_special.
  virtual std::string decode(const TokenIds& ids, bool skip_special = true) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int64_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int64_t id) const = 0;
  virtual bool is_special(int64_t id) const = 0;

  virtual std::optional<int64_t> bos_id() const = 0;
  virtual std::optional<int64_t> eos_id() const = 0;
  virtual std::optional<int64_t> pad_id() const = 0;
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
};

}  // namespace srformer
