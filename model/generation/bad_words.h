#pragma once
// Words a request bans (GenerationOptions.bad_words, `srformer summarize --bad-word`), made Hugging Face's
// bad_words_ids with the model's tokenizer where the request is built, never in the decoding loop.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/generation/options.h"
#include "model/tokenizer/tokenizer.h"

namespace srformer {

inline constexpr size_t kMaxBadWords = 256;      // words one request may ban
inline constexpr size_t kMaxBadWordBytes = 256;  // bytes of one word or phrase
inline constexpr size_t kMaxBadWordTokens = 32;  // tokens of each of its forms

// Adds each word's token sequences to options.bad_words_ids: the word after a space and straight after
// other text (Tokenizer::encode_word), each distinct sequence once. A sequence holding an id at or past
// `vocab` (the model's logits: a token it never writes) is left out. Throws std::invalid_argument naming
// the list (`list`) or the word (`entry(i)`) and what to change for: more than kMaxBadWords words; an
// empty or blank word, one holding a NUL byte or not UTF-8 (find_document_fault); one over
// kMaxBadWordBytes; one the tokenizer gives no tokens; a form over kMaxBadWordTokens tokens; a form
// holding an end-of-sequence id (is_eos: the model could not end).
void add_bad_words(GenerationOptions& options, const std::vector<std::string>& words, const Tokenizer& tokenizer,
                   int64_t vocab, const std::string& list, const std::function<std::string(size_t)>& entry);

}  // namespace srformer
