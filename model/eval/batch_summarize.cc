#include "model/eval/batch_summarize.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <string>

#include "model/data/encode.h"
#include "model/generation/generate.h"

namespace srformer::eval {

BatchSummaries summarize_all(Seq2SeqModel& model, const Tokenizer& tokenizer, const std::vector<std::string>& documents,
                             const GenerationOptions& options, int64_t batch_size, int64_t max_input_tokens,
                             const std::function<void(size_t, size_t)>& progress,
                             std::optional<int64_t> expected_length, const std::vector<std::string>& names) {
  if (batch_size < 1) throw std::invalid_argument("batch size must be >= 1");
  const auto& c = model.config();
  BatchSummaries out;
  std::vector<TokenIds> ids;
  ids.reserve(documents.size());
  for (const auto& d : documents) {
    bool cut = false;
    ids.push_back(data::encode_document(tokenizer, c, d, max_input_tokens, &cut));
    try {
      data::check_in_embedding(ids.back(), tokenizer, c, "document");
    } catch (const std::invalid_argument& e) {
      const size_t i = ids.size() - 1;
      throw std::invalid_argument((i < names.size() ? names[i] : "document " + std::to_string(i + 1)) + ": " +
                                  e.what());
    }
    out.truncated += cut ? 1 : 0;
    out.input_tokens += static_cast<int64_t>(ids.back().size());
  }
  std::vector<size_t> order(documents.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return ids[x].size() < ids[y].size(); });

  out.predictions.resize(documents.size());
  const auto start = std::chrono::steady_clock::now();
  const auto batch = static_cast<size_t>(batch_size);
  for (size_t first = 0; first < order.size(); first += batch) {
    const size_t n = std::min(batch, order.size() - first);
    std::vector<const TokenIds*> rows;
    for (size_t r = 0; r < n; ++r) rows.push_back(&ids[order[first + r]]);
    const auto padded = data::pad_rows(rows, c.pad_token_id);
    std::optional<torch::Tensor> lengths;
    if (expected_length) lengths = torch::full({static_cast<int64_t>(n)}, *expected_length, torch::kLong);
    const auto results = generate(model, padded.ids, padded.mask, options, lengths);
    for (size_t r = 0; r < n; ++r) {
      const auto& best = results.at(r).hypotheses.at(0);
      out.generated_tokens += static_cast<int64_t>(best.tokens.size());
      out.predictions[order[first + r]] = tokenizer.decode(best.tokens);
    }
    if (progress) progress(first + n, order.size());
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace srformer::eval
