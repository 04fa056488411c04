#pragma once
// Several independent samples for one request (do_sample with num_return_sequences > 1), as Hugging
// Face's sample() draws them from a request repeated once per sequence.
#include <cstdint>
#include <vector>

#include "model/generation/single_row_searcher.h"

namespace srformer {

// One row per sample, each a SamplingSearcher with a seed of its own: sample 0 uses options.seed, so
// it is the sequence a one-sample request with that seed gets; the others use seeds mixed from it and
// their index. A sample that ends leaves the batch at once (its row is left out of parent_rows): HF
// keeps feeding it the pad token until every sample has ended, which changes no sample's tokens but
// costs a row-step each. Sample 0's tokens are emitted as they are drawn (a stream shows it, and it
// leads the results); results() are in draw order, as HF returns them, not ordered by score.
class MultiSampleSearcher : public Searcher {
 public:
  explicit MultiSampleSearcher(const GenerationOptions& options);

  int64_t num_rows() const override { return static_cast<int64_t>(live_.size()); }
  SearchStep advance(const torch::Tensor& logits) override;
  bool done() const override;
  std::vector<Hypothesis> results() const override;
  int64_t steps() const override;

  // The seed sample `index` draws with (index 0: `seed` itself).
  static uint64_t sample_seed(uint64_t seed, int64_t index);

 private:
  std::vector<SamplingSearcher> samples_;
  std::vector<size_t> live_;  // the sample each row draws, in row order (those not yet ended)
};

}  // namespace srformer
