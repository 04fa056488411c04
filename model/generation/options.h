#pragma once
// Generation options with Hugging Face meanings (transformers generate()).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/generation/early_stopping.h"

namespace srformer {

// Limits enforced by validate() (the server may apply tighter ones of its own).
inline constexpr int64_t kMaxNewTokensLimit = 4096;
inline constexpr int64_t kMaxNumBeams = 64;
// |length_penalty| beyond it leaves beam scores sum(logprob) / length^penalty at -0 or -inf for all.
inline constexpr double kMaxLengthPenalty = 10.0;

struct GenerationOptions {
  int64_t max_new_tokens = 128;  // tokens after decoder_start (HF max_length - 1)
  int64_t min_new_tokens = 0;    // EOS is suppressed before this many new tokens
  int64_t num_beams = 1;
  // Hugging Face's diverse (group) beam search: the beams split into num_beam_groups groups of
  // num_beams / num_beam_groups, each searched as beam search of its own, one after the other at every step;
  // a group's log-probabilities lose diversity_penalty for each time the groups before it chose the token
  // at this step (HammingDiversityLogitsProcessor). Beam search only: with one beam both are ignored.
  int64_t num_beam_groups = 1;
  double diversity_penalty = 0.0;
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::kHeuristic;
  int64_t num_return_sequences = 1;
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 0;   // 0 = off
  double top_p = 1.0;  // 1 = off
  // Hugging Face's further sampling warpers, after top-p in its order: min_p (tokens below min_p times the
  // likeliest one's probability go; 0 = off), typical_p (typical decoding; 1 or more = off), epsilon_cutoff
  // and eta_cutoff (truncation sampling; off unless in (0, 1), as HF applies them).
  double min_p = 0.0;
  double typical_p = 1.0;
  double epsilon_cutoff = 0.0;
  double eta_cutoff = 0.0;
  uint64_t seed = 0;
  int64_t no_repeat_ngram_size = 0;
  double repetition_penalty = 1.0;
  // Hugging Face's encoder_no_repeat_ngram_size: no n-gram of the encoder input is generated (0 = off).
  int64_t encoder_no_repeat_ngram_size = 0;
  // Hugging Face's encoder_repetition_penalty: the encoder input's tokens have their scores multiplied
  // (negative) or divided (non-negative) by 1 / penalty, so a penalty above 1 favours them (1 = off).
  double encoder_repetition_penalty = 1.0;
  // Hugging Face's bad_words_ids: sequences never generated. A one-token sequence's token is never chosen
  // (one that is an EOS id is dropped, as HF drops it); a longer one's last token is not chosen where the
  // history (decoder start included) ends with the rest of it.
  std::vector<std::vector<int64_t>> bad_words_ids;
  // Hugging Face's suppress_tokens (never generated) and begin_suppress_tokens (not generated as the first
  // new token, or as the second where forced_bos_token_id forces the first). Ids outside the vocabulary
  // are ignored, as HF's isin ignores them.
  std::vector<int64_t> suppress_tokens;
  std::vector<int64_t> begin_suppress_tokens;
  // Hugging Face's exponential_decay_length_penalty (start, factor): once more than `start` tokens are
  // generated, each EOS id's score s gains |s| * (factor^(new tokens - start) - 1) (factor > 1 favours ending).
  std::optional<std::pair<int64_t, double>> exponential_decay_length_penalty;
  // Hugging Face's sequence_bias: each (sequence, bias) adds `bias` to the sequence's last token's score
  // where the history ends with the rest of it (a one-token sequence: always).
  std::vector<std::pair<std::vector<int64_t>, double>> sequence_bias;
  // Hugging Face's forced_decoder_ids, as transformers 4.27-4.39 apply them: (index, token) forces `token`
  // where the history (decoder start included) holds `index` tokens; a null token (std::nullopt) forces
  // none; a later pair of the same index wins.
  std::vector<std::pair<int64_t, std::optional<int64_t>>> forced_decoder_ids;
  // The request's encoder input (its tokens, no padding), which the two settings above read: set by
  // with_encoder_input where they are on, else empty.
  std::vector<int64_t> encoder_input_ids;
  std::optional<int64_t> forced_bos_token_id;
  std::optional<int64_t> forced_eos_token_id;
  // Further ids forced with it at the last step: Hugging Face's list-valued forced_eos_token_id gives every
  // listed id the score 0 (greedy search takes the lowest, sampling and beams any of them).
  std::vector<int64_t> extra_forced_eos_token_ids;

  // Token ids from the model config.
  int64_t decoder_start_token_id = 0;
  int64_t eos_token_id = 1;
  // Further ids that end a sequence as eos_token_id does (a checkpoint's list of EOS ids after its first):
  // Hugging Face stops on any id of the list and keeps all of them out before min_new_tokens.
  std::vector<int64_t> extra_eos_token_ids;
  int64_t pad_token_id = 0;
  // Ids at or above this are never generated (0 = no limit): the tokenizer's vocabulary size, since a
  // model's embedding may have rows past it that no text stands for (T5: 32128 rows, 32100 tokens).
  int64_t vocab_limit = 0;
  // Decoder positions the model has (0 = no limit): BART's learned position embeddings bound
  // max_new_tokens (new token n is decided at position n - 1); T5's relative positions do not.
  int64_t decoder_positions = 0;
};

// Sampling with one beam: each returned sequence is an independent sample drawing in a batch row of its
// own (up to kMaxNumBeams of them). Otherwise (greedy search, beam search, beam sampling) a request
// returns at most one sequence per beam.
inline bool draws_independent_samples(const GenerationOptions& o) { return o.do_sample && o.num_beams <= 1; }

// The groups the beams search in: num_beam_groups with beams, else 1 (greedy search and sampling have none).
inline int64_t beam_groups(const GenerationOptions& o) { return o.num_beams > 1 ? o.num_beam_groups : 1; }

// Whether `token` ends a sequence: eos_token_id or one of extra_eos_token_ids.
inline bool is_eos(const GenerationOptions& o, int64_t token) {
  return token == o.eos_token_id ||
         std::find(o.extra_eos_token_ids.begin(), o.extra_eos_token_ids.end(), token) != o.extra_eos_token_ids.end();
}
// Whether the options read the encoder input (encoder_no_repeat_ngram_size, encoder_repetition_penalty).
inline bool reads_encoder_input(const GenerationOptions& o) {
  return o.encoder_no_repeat_ngram_size > 0 || o.encoder_repetition_penalty != 1.0;
}
// `options` with encoder_input_ids = `input_ids` (the request's encoder input, padding excluded) where
// reads_encoder_input, else as they are: one request is one Hugging Face batch row of its own.
GenerationOptions with_encoder_input(GenerationOptions options, const std::vector<int64_t>& input_ids);

// Every id that ends a sequence (eos_token_id first), and every id forced at the last step (none without
// forced_eos_token_id).
std::vector<int64_t> eos_token_ids(const GenerationOptions& o);
std::vector<int64_t> forced_eos_token_ids(const GenerationOptions& o);

// Throws std::invalid_argument with a message that says what to fix.
void validate(const GenerationOptions& options);

// The values a request (or a tool's flags) sets itself; unset ones are the model's defaults, which
// validate() checks only where they act (top_p when sampling, length_penalty with beams, ...).
struct GivenOptions {
  std::optional<double> length_penalty, temperature, top_p, min_p, typical_p, epsilon_cutoff, eta_cutoff,
      diversity_penalty;
  std::optional<int64_t> top_k, no_repeat_ngram_size, encoder_no_repeat_ngram_size, num_beam_groups;
};

// A field's name as the caller's user writes it: the API's own (top_p), or a flag's (--top-p).
using OptionName = std::string (*)(std::string_view field);
std::string field_name(std::string_view field);  // as it is
std::string flag_name(std::string_view field);   // --top-p

// Refuses a given value outside its range whether or not it acts (the server's rule for a request's own
// values and the tools' for their flags): throws std::invalid_argument naming the option, its range, the
// value that turns it off and the value given ("top_k must be >= 0 (0 disables it), got -1").
// validate() still checks the settled options.
void check_given_options(const GivenOptions& given, OptionName name = field_name);

}  // namespace srformer
