#pragma once
// Text -> model inputs as training and evaluation need them: documents with the model's summarization
// prefix, truncated keeping the tokenizer's closing EOS, and right-padded batches with a mask.
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/tokenizer/tokenizer.h"

namespace srformer::data {

// Cuts `ids` to max_tokens (> 0) keeping its last token (the tokenizer's closing EOS) last; true when cut.
bool truncate_keeping_last(TokenIds& ids, int64_t max_tokens);

// tokenizer.encode(text), cut to max_tokens (> 0) with its last token (the EOS it appended) kept last.
// Sets *truncated when it was cut.
TokenIds encode_truncated(const Tokenizer& tokenizer, std::string_view text, int64_t max_tokens,
                          bool* truncated = nullptr);

// A document as the model reads it: config.summarization_prefix (T5's "summarize: ") + text.
TokenIds encode_document(const Tokenizer& tokenizer, const ModelConfig& config, std::string_view document,
                         int64_t max_tokens, bool* truncated = nullptr);

// The position in `ids` of the first token past the model's embedding (`rows`, config.vocab_size), if any:
// a tokenizer with more tokens than the model has rows makes ids the model cannot read. Shared by
// check_in_embedding and the server, which refuses such a request with a gRPC status of its own.
std::optional<size_t> first_past_embedding(const TokenIds& ids, int64_t rows);

// Throws std::invalid_argument when `ids` (the encoded `what`: "document", "summary") hold a token past the
// model's embedding rows (config.vocab_size), as a tokenizer with more tokens than the model makes (files of
// another checkpoint; facebook/bart-large-cnn's <mask>, written out in a text). The model refused the whole
// batch with "token id N outside the vocabulary", naming neither the text nor the token, after hours of a
// run's earlier batches.
void check_in_embedding(const TokenIds& ids, const Tokenizer& tokenizer, const ModelConfig& config,
                        std::string_view what);

struct PaddedBatch {
  torch::Tensor ids;   // [B, width] int64, `pad` after each row's end
  torch::Tensor mask;  // [B, width] int64, 1 = real token
};

// Rows right-padded to the longest (at least 1 wide).
PaddedBatch pad_rows(const std::vector<const TokenIds*>& rows, int64_t pad);

}  // namespace srformer::data
