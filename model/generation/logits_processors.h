#pragma once
// Logits processors and warpers with Hugging Face transformers 4.11 semantics (top-p: 4.30-4.45's, which
// 4.11's differs from at exact ties). Every function takes scores [rows, vocab] float32 on the CPU and
// modifies them in place. A row's history is HF's `input_ids`: decoder_start_token_id followed by the
// tokens generated so far, so cur_len (the history length) counts the start token.
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "model/generation/options.h"

namespace srformer {

using TokenHistory = std::vector<int64_t>;

// A CPU float32 copy of a searcher's logits [rows, vocab] that the processors may modify, made in
// `buffer` (the searcher's own, reused every step: a fresh vocabulary-sized tensor per step costs
// more in allocation and page faults than the search itself). Throws std::invalid_argument when the
// shape is wrong or a token id of `options` is outside the vocabulary.
torch::Tensor scores_from_logits(const torch::Tensor& logits, int64_t rows, const GenerationOptions& options,
                                 torch::Tensor& buffer);
// The checks scores_from_logits makes, without the copy (for a caller that reads the logits where they lie).
void check_logits(const torch::Tensor& logits, int64_t rows, const GenerationOptions& options);

// RepetitionPenaltyLogitsProcessor: for every token in the row's history, a negative score is
// multiplied by `penalty` and a non-negative one divided by it.
void apply_repetition_penalty(const torch::Tensor& scores, const std::vector<TokenHistory>& histories, double penalty);

// EncoderRepetitionPenaltyLogitsProcessor: every token of `encoder_input_ids` has a negative score
// multiplied by 1 / `penalty` and a non-negative one divided by it, in every row (a penalty above 1
// favours the input's tokens).
void apply_encoder_repetition_penalty(const torch::Tensor& scores, const std::vector<int64_t>& encoder_input_ids,
                                      double penalty);

// Tokens that would complete an n-gram of `encoder_input_ids` with the last n - 1 tokens of `history`
// (EncoderNoRepeatNGramLogitsProcessor; n = 1 bans every input token).
std::vector<int64_t> banned_encoder_ngram_tokens(const std::vector<int64_t>& encoder_input_ids,
                                                 const TokenHistory& history, int64_t ngram_size);
void apply_encoder_no_repeat_ngram(const torch::Tensor& scores, const std::vector<int64_t>& encoder_input_ids,
                                   const std::vector<TokenHistory>& histories, int64_t ngram_size);

// Tokens that would complete an n-gram already present in `history` (NoRepeatNGramLogitsProcessor).
std::vector<int64_t> banned_ngram_tokens(const TokenHistory& history, int64_t ngram_size);
void apply_no_repeat_ngram(const torch::Tensor& scores, const std::vector<TokenHistory>& histories, int64_t ngram_size);

// NoBadWordsLogitsProcessor (transformers 4.34 and later, a -inf SequenceBiasLogitsProcessor): the tokens
// options.bad_words_ids ban after `history`, in the list's order (repeats allowed): every one-token
// sequence's (but one that is an EOS id, which HF drops), and every longer sequence's last token where it
// is no longer than the history and the history ends with the rest of it.
std::vector<int64_t> banned_bad_words(const GenerationOptions& options, const TokenHistory& history);
void apply_bad_words(const torch::Tensor& scores, const GenerationOptions& options,
                     const std::vector<TokenHistory>& histories);

// SequenceBiasLogitsProcessor: each (sequence, bias) pair adds `bias` (as float) to the score of the
// sequence's last token, a one-token sequence's in every row, a longer one's where it is no longer than the
// history and the history ends with the rest of it. A repeated sequence counts once, with its last bias
// (HF's dict of the pairs); biases on one token add up. Prepared once from the list (a searcher's, for all
// its steps): deduplicating the pairs is quadratic in their number.
class SequenceBias {
 public:
  SequenceBias() = default;
  // Throws std::invalid_argument for an empty sequence (validate() refuses one first).
  explicit SequenceBias(const std::vector<std::pair<std::vector<int64_t>, double>>& bias);
  bool empty() const { return columns_.empty(); }
  // Throws std::out_of_range where a biased token is outside the vocabulary.
  void apply(const torch::Tensor& scores, const std::vector<TokenHistory>& histories) const;

 private:
  struct Longer {
    std::vector<int64_t> sequence;  // two tokens or more
    float bias;
    size_t column;  // its last token's index in columns_
  };
  std::vector<int64_t> columns_;  // the tokens any sequence biases (its last), ascending
  std::vector<float> one_token_;  // per column: its one-token sequence's bias, else 0
  std::vector<Longer> longer_;    // in HF's dict order
};

// HammingDiversityLogitsProcessor: in every row, each token's score loses float(penalty) * float(count),
// count the times it occurs in `earlier_tokens` (what the groups before this one chose at this step; ids
// outside the vocabulary are ignored).
void apply_hamming_diversity(const torch::Tensor& scores, const std::vector<int64_t>& earlier_tokens, double penalty);

// ExponentialDecayLengthPenalty: once cur_len exceeds start + 1 (the start token and `start` new tokens),
// each EOS id's score s becomes s + |s| * (factor^(cur_len - start - 1) - 1); an EOS at -inf stays there.
void apply_exponential_decay_length_penalty(const torch::Tensor& scores, int64_t cur_len, int64_t start, double factor,
                                            const std::vector<int64_t>& eos_token_ids);

// ForceTokensLogitsProcessor (transformers 4.27-4.39): the token options.forced_decoder_ids force at
// cur_len (the last pair of that index; none where its token is null or no pair has it).
std::optional<int64_t> forced_decoder_token(const GenerationOptions& options, int64_t cur_len);

// MinLengthLogitsProcessor: every EOS id gets -inf while cur_len < min_length (HF lengths, start token
// included).
void apply_min_length(const torch::Tensor& scores, int64_t cur_len, int64_t min_length,
                      const std::vector<int64_t>& eos_token_ids);

// ForcedBOS/ForcedEOS: every token but `tokens` gets -inf, each of `tokens` gets 0 (HF's
// ForcedEOSTokenLogitsProcessor with a list of ids).
void apply_forced_tokens(const torch::Tensor& scores, const std::vector<int64_t>& tokens);

// Warpers (sampling only), in the order HF applies them: temperature, top-k, top-p.
void apply_temperature(const torch::Tensor& scores, double temperature);
// Keeps the tokens scoring at least the k-th best score (ties at the boundary survive).
void apply_top_k(const torch::Tensor& scores, int64_t top_k, int64_t min_tokens_to_keep = 1);
// Removes the tokens whose cumulative probability in increasing order (their own and every less
// likely token's) is at most 1 - top_p, keeping at least min_tokens_to_keep: transformers 4.30-4.45's
// TopPLogitsWarper. Where the likeliest tokens reach exactly top_p the rest go (4.11 kept one more).
void apply_top_p(const torch::Tensor& scores, double top_p, int64_t min_tokens_to_keep = 1);

// SuppressTokensLogitsProcessor and SuppressTokensAtBeginLogitsProcessor: the ids below `vocab` they set to
// -inf at cur_len (begin_suppress_tokens at cur_len 1, or 2 where forced_bos_token_id is set, plus the last
// forced_decoder_ids pair's index, as HF's begin_index for an encoder-decoder model).
std::vector<int64_t> suppressed_tokens(const GenerationOptions& options, int64_t cur_len, int64_t vocab);

// The processors HF generate() builds from `options`, applied in its order: sequence bias, Hamming diversity (group
// beam search: options.diversity_penalty against `earlier_group_tokens`), encoder repetition penalty, repetition
// penalty, no-repeat n-gram, encoder no-repeat n-gram, bad words, min length (HF min_length = min_new_tokens + 1, every
// EOS id), forced BOS (at cur_len 1), forced EOS (at cur_len max_length - 1, max_length = max_new_tokens + 1),
// exponential decay length penalty, suppressed tokens, forced decoder ids. All rows share cur_len. With
// VocabLimit::kKeep the ids at or past options.vocab_limit keep their scores (Hugging Face's processed scores, which
// know no tokenizer size): greedy search normalises over them, never picking them. `sequence_bias` is
// options.sequence_bias prepared (SequenceBias(options.sequence_bias)), as a searcher keeps it for all its steps.
enum class VocabLimit { kApply, kKeep };
void process_logits(const GenerationOptions& options, const SequenceBias& sequence_bias,
                    const std::vector<TokenHistory>& histories, const torch::Tensor& scores,
                    VocabLimit vocab_limit = VocabLimit::kApply, const std::vector<int64_t>& earlier_group_tokens = {});
// The tokens process_logits forces at cur_len (a forced_decoder_ids token, else the forced EOS ids at its last
// step, else forced BOS at the first); empty where it forces none.
std::vector<int64_t> forced_tokens(const GenerationOptions& options, int64_t cur_len);
// What process_logits does at this step when all it does is exclude tokens (no repetition penalty of
// either kind, no sequence bias or EOS decay, no forced token) and every id it names lies inside the vocabulary: the
// tokens it sets to -inf for `history` below token_limit(), ascending (repeats allowed). std::nullopt otherwise: the
// caller then applies process_logits to a copy of the scores (which also reports ids outside the vocabulary). Lets the
// searchers' kernels skip tokens instead of writing a vocabulary-sized copy per step.
std::optional<std::vector<int64_t>> excluded_tokens(const GenerationOptions& options, const TokenHistory& history,
                                                    int64_t vocab);
// Whether the searchers' kernels may read `logits` where they lie: the CPU kernels are on and the
// logits are `rows` contiguous CPU float32 rows of at least one score.
bool kernels_read_in_place(const torch::Tensor& logits, int64_t rows);
// The first token id process_logits excludes for the vocabulary limit (vocab when none).
int64_t token_limit(const GenerationOptions& options, int64_t vocab);
// MinPLogitsWarper: removes the tokens whose probability is below min_p times the row's highest, keeping
// at least min_tokens_to_keep (the likeliest).
void apply_min_p(const torch::Tensor& scores, double min_p, int64_t min_tokens_to_keep = 1);
// TypicalLogitsWarper: ranks tokens by |-log p - entropy| and keeps those ranked before the first whose
// cumulative probability in that order reaches `mass`, that one included (ties with it too), and at
// least min_tokens_to_keep: the likeliest token may go.
void apply_typical_p(const torch::Tensor& scores, double mass, int64_t min_tokens_to_keep = 1);
// EpsilonLogitsWarper: removes the tokens with probability below `epsilon` unless they score at least
// the min_tokens_to_keep-th best.
void apply_epsilon_cutoff(const torch::Tensor& scores, double epsilon, int64_t min_tokens_to_keep = 1);
// EtaLogitsWarper: as epsilon with the cutoff min(epsilon, sqrt(epsilon) * exp(-entropy)) per row.
void apply_eta_cutoff(const torch::Tensor& scores, double epsilon, int64_t min_tokens_to_keep = 1);

// The warpers HF sample() applies after the processors, in its order (temperature, top-k, top-p, min-p,
// typical, epsilon, eta); the filters keep at least `min_tokens_to_keep` tokens per row.
void warp_logits(const GenerationOptions& options, const torch::Tensor& scores, int64_t min_tokens_to_keep = 1);

}  // namespace srformer
