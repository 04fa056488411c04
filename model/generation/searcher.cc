#include "model/generation/searcher.h"

#include "model/generation/beam_searcher.h"
#include "model/generation/multi_sample_searcher.h"
#include "model/generation/single_row_searcher.h"

namespace srformer {

std::string non_finite_logits_message(int64_t step) {
  return "the model's logits hold NaN at step " + std::to_string(step) +
         " (or the options excluded every token): its weights or config.json make non-finite values; "
         "check the weights for NaN and settings such as layer_norm_epsilon";
}

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

std::unique_ptr<Searcher> make_searcher(const GenerationOptions& options) {
  validate(options);
  if (draws_independent_samples(options)) {
    if (options.num_return_sequences > 1) return std::make_unique<MultiSampleSearcher>(options);
    return std::make_unique<SamplingSearcher>(options);
  }
  // HF generate() runs greedy search for one beam; BeamSearcher would pick the same tokens but
  // score them as beam search does (length-normalised).
  if (options.num_beams == 1) return std::make_unique<GreedySearcher>(options);
  return std::make_unique<BeamSearcher>(options);  // beam search, or beam sampling with do_sample
}

}  // namespace srformer
