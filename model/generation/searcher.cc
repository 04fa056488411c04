#include "model/generation/searcher.h"

#include <limits>

#include "model/generation/beam_searcher.h"
#include "model/generation/multi_sample_searcher.h"
#include "model/generation/single_row_searcher.h"

namespace srformer {

std::string non_finite_logits_message(int64_t step) {
  return "the model's logits hold NaN at step " + std::to_string(step) +
         ": its weights or config.json make non-finite values; check the weights for NaN and settings such "
         "as layer_norm_epsilon";
}

NoTokenLeftError::NoTokenLeftError(int64_t step)
    : std::invalid_argument("at step " + std::to_string(step) +
                            " the request's options leave no token to choose (no_repeat_ngram_size, "
                            "min_new_tokens, repetition_penalty, top_k/top_p together exclude every one); "
                            "relax them, e.g. a smaller no_repeat_ngram_size or min_new_tokens") {}

void throw_no_choice(const torch::Tensor& scores, int64_t step) {
  if (scores.defined() && scores.numel() > 0 && !at::isnan(scores).any().item<bool>() &&
      (scores == -std::numeric_limits<float>::infinity()).all().item<bool>()) {
    throw NoTokenLeftError(step);
  }
  throw std::runtime_error(non_finite_logits_message(step));
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
