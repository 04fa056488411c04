#pragma once
// Summarizes many documents offline: sorted by token length into batches, each generated with
// model/generation generate() (the same encode/start/step code and searchers as the server's engine),
// and put back in input order. Used by `srformer eval` and by `srformer train`'s validation ROUGE.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/generation/options.h"
#include "model/seq2seq.h"
#include "model/tokenizer/tokenizer.h"

namespace srformer::eval {

struct BatchSummaries {
  std::vector<std::string> predictions;  // in input order
  int64_t input_tokens = 0, generated_tokens = 0, truncated = 0;
  double seconds = 0.0;
};

// Documents longer than max_input_tokens are truncated (counted in `truncated`). SRformer's expected
// length L is `expected_length`, else the model's default (default_expected_length). progress(done, total)
// is called after every batch. A document holding a token past the model's embedding is refused
// (std::invalid_argument) before any is generated, named by names[i] when given ("document N" else).
BatchSummaries summarize_all(Seq2SeqModel& model, const Tokenizer& tokenizer, const std::vector<std::string>& documents,
                             const GenerationOptions& options, int64_t batch_size, int64_t max_input_tokens,
                             const std::function<void(size_t, size_t)>& progress = {},
                             std::optional<int64_t> expected_length = std::nullopt,
                             const std::vector<std::string>& names = {});

}  // namespace srformer::eval
