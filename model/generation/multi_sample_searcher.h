#pragma once
// Several independent samples for one request (do_sample with num_return_sequences > 1), as Hugging
// Face's sample() draws them from a request repeated once per sequence.
#include <cstdint>
#include <vector>

#include "model/generation/single_row_searcher.h"

namespace srformer {

// One row per sample, each a SamplingSearcher with a seed of its own: sample 0 uses options.seed, so
// it is the sequence a one-sample request with that seed gets; the others use seeds mixed from it and
// their index. A sample that ends keeps its row until every sample has ended (the row is fed the pad
// token, as HF does, and its logits are ignored), so the request's rows stay constant. Sample 0's
// tokens are emitted as they are drawn (a stream shows it, and it leads the results); results() are in
// draw order, as HF returns them, not ordered by score.
class MultiSampleSearcher : public Searcher {
 public:
  explicit MultiSampleSearcher(const GenerationOptions& options);

  int64_t num_rows() const override { return static_cast<int64_t>(samples_.size()); }
  SearchStep advance(const torch::Tensor& logits) override;
  bool done() const override;
  std::vector<Hypothesis> results() const override;
  int64_t steps() const override;

  // The seed sample `index` draws with (index 0: `seed` itself).
  static uint64_t sample_seed(uint64_t seed, int64_t index);

 private:
  std::vector<SamplingSearcher> samples_;
  int64_t pad_token_id_;
};

}  // namespace srformer
