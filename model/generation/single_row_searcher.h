#pragma once
// Greedy search and multinomial sampling: one row per request, one token decided per step.
#include <cstdint>
#include <random>
#include <vector>

#include "model/generation/logits_processors.h"
#include "model/generation/searcher.h"

namespace srformer {

// HF 4.11 greedy_search(): processors on the raw logits, then argmax (the first on ties). Stops on
// EOS or after max_new_tokens. Score: sum of log_softmax(processed logits) of the chosen tokens. Ids at or
// past options.vocab_limit are never chosen but stay in the normaliser, as in HF's scores and beam search.
class GreedySearcher : public Searcher {
 public:
  explicit GreedySearcher(const GenerationOptions& options);

  int64_t num_rows() const override { return 1; }
  SearchStep advance(const torch::Tensor& logits) override;
  bool done() const override { return finish_reason_ != FinishReason::kNone; }
  std::vector<Hypothesis> results() const override;
  int64_t steps() const override { return static_cast<int64_t>(history().size()) - 1; }

 protected:
  // Picks the next token below `limit` (the tokenizer's vocabulary) from processed scores [1, vocab]
  // that still hold the ids past it (may modify them); sets its log-probability (NaN: no choice).
  virtual int64_t choose(const torch::Tensor& scores, int64_t limit, double& logprob);
  // Whether choose() takes the processed scores' maximum (then pick_in_place may stand in for it).
  virtual bool picks_argmax() const { return true; }
  const GenerationOptions options_;

 private:
  SequenceBias sequence_bias_;  // options_.sequence_bias, prepared once for every step
  // Steps whose processors only exclude tokens (vocabulary limit, minimum length, banned n-grams) pick
  // from the caller's logits with the exclusions applied as they are read: no copy of the row (the ids
  // past the tokenizer's are read for the normaliser alone). The token (-1: take the general path).
  int64_t pick_in_place(const torch::Tensor& logits, double& logprob) const;

  // Decoder start + generated tokens (HF input_ids), held as the one-row batch process_logits reads: a step
  // passes it as it is (it copied the whole history into a new batch each step).
  std::vector<TokenHistory> rows_;
  const TokenHistory& history() const { return rows_.front(); }

  torch::Tensor scores_;         // this step's processed scores (reused buffer)
  std::vector<float> logprobs_;  // of each generated token
  double score_ = 0.0;
  FinishReason finish_reason_ = FinishReason::kNone;
};

// HF 4.11 sample() for num_beams == 1: processors, then warpers (temperature, top-k, top-p), then one
// draw from the resulting distribution. Each searcher owns a generator seeded from options.seed, so
// a request's tokens depend only on its seed and its logits, not on the other requests in the batch.
// Score: sum of the log-probabilities of the drawn tokens under the distribution they were drawn from.
class SamplingSearcher : public GreedySearcher {
 public:
  explicit SamplingSearcher(const GenerationOptions& options);

 protected:
  int64_t choose(const torch::Tensor& scores, int64_t limit, double& logprob) override;
  bool picks_argmax() const override { return false; }

 private:
  std::mt19937_64 rng_;
  std::vector<int64_t> with_mass_;  // choose()'s tokens with a positive probability (a buffer reused per step)
  // choose()'s blocks of scores holding a finite one, their first tokens, and the probabilities of with_mass_
  // where it took them from those blocks (buffers reused per step).
  std::vector<float> blocks_, mass_;
  std::vector<int64_t> block_starts_;
};

}  // namespace srformer
