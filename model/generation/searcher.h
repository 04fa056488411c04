#pragma once
// Per-request decoding strategies (greedy, sampling, beam search). A Searcher owns the decisions
// of one request; the caller owns the model and its batched DecoderState. Each step the caller
// runs the model on all rows of all requests, hands each Searcher the logits of its own rows,
// and applies the returned row reordering to the state. This keeps continuous batching (server)
// and offline generation on the same code.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/generation/options.h"

namespace srformer {

enum class FinishReason { kNone, kEos, kLength, kCancelled };
const char* to_string(FinishReason reason);

struct Hypothesis {
  std::vector<int64_t> tokens;  // new tokens, decoder_start excluded, EOS included when emitted
  double score = 0.0;           // beam: HF sequences_scores; greedy/sampling: sum of log-probs
  // Per token of `tokens`: its log-probability under the distribution it was chosen from (after the
  // logits processors; sampling: after the warpers too), as HF's compute_transition_scores gives it.
  // Greedy/sampling: they sum to `score`; beam: to score * (tokens without EOS + 1) ^ length_penalty up to
  // float rounding (the beam score is their running float sum, as in HF).
  std::vector<float> token_logprobs;
  FinishReason finish_reason = FinishReason::kNone;
};

struct SearchStep {
  // For each of the searcher's rows after this step: the token to feed next step [rows] int64 (CPU).
  torch::Tensor next_tokens;
  // For each row after this step: which of the searcher's rows (before the step) it continues
  // [rows] int64 (CPU). Identity for greedy/sampling; beam search reorders; several samples leave out
  // the rows of samples that ended (the request's rows fall).
  torch::Tensor parent_rows;
  // Tokens that became final this step, for streaming (greedy/sampling: the chosen token of the
  // single row; beam search: empty until done, then the best hypothesis).
  std::vector<int64_t> emitted;
  std::vector<float> emitted_logprobs;  // one per emitted token (Hypothesis::token_logprobs)
  bool done = false;
};

class Searcher {
 public:
  virtual ~Searcher() = default;
  // Rows this request occupies in the batch now: 1, num_beams for beam search, or the samples still
  // drawing. Never rises; falls only where a step's parent_rows leave rows out.
  virtual int64_t num_rows() const = 0;
  // logits: [num_rows, vocab] float32 for this request's rows, on any device.
  virtual SearchStep advance(const torch::Tensor& logits) = 0;
  virtual bool done() const = 0;
  // Final hypotheses, num_return_sequences of them: beam search best first, samples in draw order
  // (HF's orders). Valid once done().
  virtual std::vector<Hypothesis> results() const = 0;
  // Number of steps taken (new tokens decided per row).
  virtual int64_t steps() const = 0;
};

// Why a search stops where the model's logits at `step` hold NaN: the model, not the request, is at fault.
std::string non_finite_logits_message(int64_t step);

// A request whose options leave no token to choose at `step` (every one excluded, e.g. by
// no_repeat_ngram_size with min_new_tokens over a small vocabulary): the request, not the model, is at
// fault, and the server answers INVALID_ARGUMENT.
class NoTokenLeftError : public std::invalid_argument {
 public:
  explicit NoTokenLeftError(int64_t step);
};

// Throws NoTokenLeftError where every one of `scores` (processed, [rows, vocab]) is -inf, else the
// runtime_error of non_finite_logits_message: what a search that found nothing to choose says.
[[noreturn]] void throw_no_choice(const torch::Tensor& scores, int64_t step);

// Creates the searcher the options ask for (validates them first).
std::unique_ptr<Searcher> make_searcher(const GenerationOptions& options);

}  // namespace srformer
