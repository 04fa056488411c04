#include "model/data/encode.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/tokenizer/utf8.h"

namespace srformer::data {

bool truncate_keeping_last(TokenIds& ids, int64_t max_tokens) {
  if (max_tokens < 1) throw std::invalid_argument("max_tokens must be >= 1");
  if (static_cast<int64_t>(ids.size()) <= max_tokens) return false;
  const auto last = ids.back();
  ids.resize(static_cast<size_t>(max_tokens));
  ids.back() = last;
  return true;
}

TokenIds encode_truncated(const Tokenizer& tokenizer, std::string_view text, int64_t max_tokens, bool* truncated) {
  if (max_tokens < 1) throw std::invalid_argument("max_tokens must be >= 1");
  auto t = tokenizer.encode(text);
  const bool cut = truncate_keeping_last(t, max_tokens);
  if (truncated) *truncated = cut;
  return t;
}

TokenIds encode_document(const Tokenizer& tokenizer, const ModelConfig& config, std::string_view document,
                         int64_t max_tokens, bool* truncated) {
  if (!config.summarization_prefix) return encode_truncated(tokenizer, document, max_tokens, truncated);
  return encode_truncated(tokenizer, *config.summarization_prefix + std::string(document), max_tokens, truncated);
}

std::optional<size_t> first_past_embedding(const TokenIds& ids, int64_t rows) {
  const auto past = std::find_if(ids.begin(), ids.end(), [&](int64_t id) { return id >= rows; });
  if (past == ids.end()) return std::nullopt;
  return static_cast<size_t>(past - ids.begin());
}

void check_in_embedding(const TokenIds& ids, const Tokenizer& tokenizer, const ModelConfig& config,
                        std::string_view what) {
  const auto at = first_past_embedding(ids, config.vocab_size);
  if (!at) return;
  const int64_t past = ids[*at];
  throw std::invalid_argument("the " + std::string(what) + " holds the token '" +
                              utf8::to_valid(tokenizer.id_to_token(past)) + "' (id " + std::to_string(past) +
                              "), past the " + std::to_string(config.vocab_size) +
                              " rows of the model's embedding (config.json's vocab_size; its tokenizer has " +
                              std::to_string(tokenizer.vocab_size()) +
                              " tokens): remove it from the text, or use the checkpoint's own tokenizer files");
}

PaddedBatch pad_rows(const std::vector<const TokenIds*>& rows, int64_t pad) {
  size_t width = 1;
  for (const auto* r : rows) width = std::max(width, r->size());
  const auto n = static_cast<int64_t>(rows.size());
  PaddedBatch b{torch::full({n, static_cast<int64_t>(width)}, pad, torch::kLong),
                torch::zeros({n, static_cast<int64_t>(width)}, torch::kLong)};
  auto ids = b.ids.accessor<int64_t, 2>();
  auto mask = b.mask.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) {
    const auto& r = *rows[static_cast<size_t>(i)];
    for (size_t j = 0; j < r.size(); ++j) {
      ids[i][static_cast<int64_t>(j)] = r[j];
      mask[i][static_cast<int64_t>(j)] = 1;
    }
  }
  return b;
}

}  // namespace srformer::data
