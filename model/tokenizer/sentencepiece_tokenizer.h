#pragma once
// T5's tokenizer: a SentencePiece model plus `extra_ids` sentinel tokens appended after the
// SentencePiece vocabulary in reverse order (<extra_id_0> is the last id), with Hugging Face's
// T5Tokenizer conventions: EOS appended on encode, special tokens written in text matched literally.
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>

#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/sentencepiece_library.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unigram_tokenizer_json.h"

namespace srformer {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  static constexpr int64_t kDefaultExtraIds = 100;
  static constexpr int64_t kMaxExtraIds = 100000;  // what tokenizer_config.json's extra_ids may ask for

  // Loads <dir>/spiece.model; the number of extra ids comes from tokenizer_config.json
  // ("extra_ids") or the <extra_id_N> tokens the directory's JSON files list, else 100. Without
  // spiece.model, the SentencePiece model a Unigram tokenizer.json was converted from (its extra ids
  // are the sentinels at the end of its vocabulary; unigram_tokenizer_json.h). parsed_tokenizer_json:
  // the directory's tokenizer.json when the caller has read it already.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::filesystem::path& model_dir,
                                                      const nlohmann::json* parsed_tokenizer_json = nullptr);

  // unprefixed: the same model without SentencePiece's dummy prefix, for Hugging Face's "first"
  // prepend scheme (tokenizer.json's Metaspace, or tokenizer_config.json's "legacy": false): text
  // after a special token then gets no U+2581 of its own. Without it, every text does ("always").
  // added: tokens a checkpoint added after the sentinels (added_tokens.json, tokenizer_config.json's
  // added_tokens_decoder), with consecutive ids from SentencePiece's size + extra_ids on.
  // first_space_kept: tokenizer.json's Metaspace decoder says prepend_scheme "never", so the first
  // token's U+2581 is a space too, as Hugging Face's decoder gives it.
  // trailing_space_kept: whitespace at the end of a text (or of a text before a special or added token)
  // gives the piece "▁", as Hugging Face gives it for a tokenizer.json that does not strip it
  // (metaspace_keeps_trailing_space); SentencePiece drops it.
  // never_prefixed: tokenizer.json's Metaspace says prepend_scheme "never": `unprefixed` encodes the text at
  // the start too, unless it starts with whitespace (that is "▁" in Hugging Face's as well).
  // unicode_whitespace: what tokenizer.json does with whitespace the model's character map keeps as it is
  // (unicode_whitespace_handling).
  // inside_word: the model without its dummy prefix for encode_word's text straight after other text, where
  // `unprefixed` is not given (the loaders give it); without either, encode_word gives the "▁" form for both.
  // listed_in_vocabulary: the files' entries for control pieces and sentinels (by id and content): their lstrip,
  // rstrip and single_word apply where those are matched in text.
  SentencePieceTokenizer(SentencePieceProcessor sp, int64_t extra_ids,
                         std::optional<SentencePieceProcessor> unprefixed = std::nullopt,
                         std::vector<AddedToken> added = {}, bool first_space_kept = false,
                         bool trailing_space_kept = false, bool never_prefixed = false,
                         UnicodeWhitespace unicode_whitespace = UnicodeWhitespace::kNone,
                         std::optional<SentencePieceProcessor> inside_word = std::nullopt,
                         const std::vector<AddedToken>& listed_in_vocabulary = {});

  TokenIds encode(std::string_view text) const override;
  // Straight after other text: the text at the start through the model without its dummy prefix.
  TokenIds encode_word(std::string_view word, bool after_space) const override;
  std::string decode_raw(const TokenIds& ids, bool skip_special = true) const override;

  int64_t vocab_size() const override { return sp_size_ + extra_ids_ + static_cast<int64_t>(added_.size()); }
  std::optional<int64_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int64_t id) const override;
  bool is_special(int64_t id) const override;

  std::optional<int64_t> bos_id() const override { return bos_; }
  std::optional<int64_t> eos_id() const override { return eos_; }
  std::optional<int64_t> pad_id() const override { return pad_; }

  int64_t extra_ids() const { return extra_ids_; }

 private:
  int64_t extras_end() const { return sp_size_ + extra_ids_; }
  bool is_extra(int64_t id) const { return id >= sp_size_ && id < extras_end(); }
  // The added token of `id`, or nullptr.
  const AddedToken* added(int64_t id) const {
    return id >= extras_end() && id < vocab_size() ? &added_[static_cast<size_t>(id - extras_end())] : nullptr;
  }
  void check_id(int64_t id) const;
  // Decodes a run of SentencePiece ids; keeps the leading space SentencePiece drops at the start of
  // a text when the run follows other output.
  std::string decode_run(const std::vector<int32_t>& run, bool at_start) const;
  // encode() with or without EOS; start: the model for a plain text at the start (else processor_for's).
  TokenIds encode(std::string_view text, bool add_eos, const SentencePieceProcessor* start) const;
  // The model that encodes `segment`, a plain part of `text` (SentencePieceTokenizer::encode).
  const SentencePieceProcessor& processor_for(std::string_view segment, std::string_view text) const;
  // Whether `segment` starts with whitespace once the model has normalized it (needs unprefixed_).
  bool starts_with_space(std::string_view segment) const;
  // Whether `segment` ends with whitespace once the model has normalized it.
  bool ends_with_space(std::string_view segment) const;

  SentencePieceProcessor sp_;
  std::optional<SentencePieceProcessor> unprefixed_;
  std::optional<SentencePieceProcessor> inside_word_;  // encode_word's model for text straight after other text
  // A one-character piece behind which the unprefixed model keeps a leading space as U+2581 (instead
  // of stripping it): what starts_with_space asks with. Empty when no candidate qualifies.
  std::string anchor_;
  int32_t anchor_id_ = -1;
  // A piece that gives text of its own (lead_, no space in it): decode_run puts it before a run that follows
  // other output, so that SentencePiece drops no leading space of the run. -1 when the vocabulary has none.
  std::string lead_;
  int32_t lead_id_ = -1;
  int64_t sp_size_;
  int64_t extra_ids_;
  std::optional<int64_t> bos_, eos_, pad_;
  std::vector<AddedToken> added_;  // by id - extras_end()
  bool first_space_kept_ = false;
  bool trailing_space_kept_ = false;
  bool never_prefixed_ = false;
  int32_t space_id_ = -1;  // the piece "▁" (the unknown piece's id where the vocabulary lacks it)
  UnicodeWhitespace unicode_whitespace_ = UnicodeWhitespace::kNone;
  // Whitespace (Rust's char::is_whitespace) that the model keeps as text, where unicode_whitespace_ asks.
  std::vector<char32_t> kept_whitespace_;
  // `segment` as Hugging Face's pipeline has it before the model: kept_whitespace_ made a space (kSplit), or
  // whitespace at its end removed (kStripEnd).
  std::string hf_whitespace(std::string_view segment) const;
  AddedTokenSplitter splitter_;
};

}  // namespace srformer
