#pragma once
// Fast-tokenizer-only T5 checkpoints ship tokenizer.json without spiece.model. Its "Unigram" model is
// Hugging Face's conversion of a SentencePiece model (pieces and scores, the normalizer's precompiled
// character map, Metaspace pre-tokenization); this turns it back into a SentencePiece model so that
// both kinds of directory tokenize through the same library and give the same ids.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace srformer {

struct UnigramModelFromJson {
  std::string model_proto;  // a serialized sentencepiece.ModelProto
  // T5's sentinels <extra_id_N> at the end of the vocabulary (<extra_id_0> last): left out of the
  // SentencePiece model, as in spiece.model, for the tokenizer to append.
  int64_t extra_ids = 0;
  // Metaspace's prepend_scheme "first": only the text at the start of the input gets the leading
  // U+2581, not the text after a special token (SentencePieceTokenizer::encode).
  bool prefix_first_only = false;
};

// The special tokens' names (tokenizer_config.json's eos_token, ...); SentencePiece finds them by name.
struct SpecialTokenNames {
  std::string eos = "</s>", pad = "<pad>", bos = "<s>";
};

bool is_unigram_tokenizer_json(const nlohmann::json& tokenizer_json);

// Whether the tokenizer.json's Metaspace pre-tokenizer says prepend_scheme "first" (any model type;
// false without a Metaspace).
bool metaspace_prefixes_first_only(const nlohmann::json& tokenizer_json);

// Whether the tokenizer.json's Metaspace pre-tokenizer says prepend_scheme "never" or add_prefix_space false
// (whatever prepend_scheme says beside it): no U+2581 before the text's first word. False without a Metaspace.
bool metaspace_never_prefixes(const nlohmann::json& tokenizer_json);

// Whether the tokenizer.json's Metaspace decoder says prepend_scheme "never" or add_prefix_space false:
// Hugging Face's decoder then keeps the first token's U+2581 as a space ("▁word" gives " word") instead
// of dropping it. False without a Metaspace decoder.
bool metaspace_decoder_keeps_first_space(const nlohmann::json& tokenizer_json);

// Whether Hugging Face keeps whitespace at the end of a text (and of a text before a special token) as a
// "▁" token: a Metaspace pre-tokenizer that no WhitespaceSplit comes before, behind a normalizer that does
// not strip the end (transformers' converter wrote Precompiled and Replace " {2,}" alone before it added
// Strip). SentencePiece drops that whitespace. False without a Metaspace.
bool metaspace_keeps_trailing_space(const nlohmann::json& tokenizer_json);

// What Hugging Face's pipeline does with whitespace (Rust's char::is_whitespace) that the character map keeps
// as it is (T5's keeps U+0085): kSplit, a WhitespaceSplit before the Metaspace splits words on it (a space);
// kStripEnd, a Strip normalizer removes it at the end; kNone, it stays text. SentencePiece does neither.
enum class UnicodeWhitespace { kNone, kStripEnd, kSplit };
UnicodeWhitespace unicode_whitespace_handling(const nlohmann::json& tokenizer_json);

// Throws TokenizerLoadError naming the field (`where` names the file) when the tokenizer is not one a
// SentencePiece model can express: another model type, a normalizer other than the precompiled map,
// whitespace collapsing and stripping, a pre-tokenizer other than Metaspace, an added token in the vocabulary
// that is not its piece there. Added tokens past the vocabulary are left out (the tokenizer's to add).
UnigramModelFromJson sentencepiece_model_from_tokenizer_json(const nlohmann::json& tokenizer_json,
                                                             const std::string& where, const SpecialTokenNames& names);

}  // namespace srformer
