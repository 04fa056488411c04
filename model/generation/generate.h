#pragma once
// Offline generation over a Seq2SeqModel: the whole batch is encoded once and decoded together, one
// model step per iteration over every live row; finished requests leave the batch.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/generation/options.h"
#include "model/generation/searcher.h"
#include "model/seq2seq.h"

namespace srformer {

struct GenerateResult {
  std::vector<Hypothesis> hypotheses;  // best first, options.num_return_sequences of them
  int64_t steps = 0;                   // decoding steps this request took
};

// Copies the model's token ids (decoder start, EOS, pad, and forced BOS/EOS unless `options` already
// sets them) and its decoder positions (BART's max_position_embeddings; T5 has no limit) into `options`.
GenerationOptions with_model_tokens(GenerationOptions options, const ModelConfig& config);

// The model's generation defaults (Hugging Face meanings, ModelConfig's generation fields): its tokens,
// max_new_tokens = max_length − 1 (else 128; at most the decoder's positions), min_new_tokens = min_length − 1 (else 0;
// callers clamp it to their max_new_tokens), num_beams, num_beam_groups, diversity_penalty, length_penalty,
// early_stopping, no_repeat_ngram_size, encoder_no_repeat_ngram_size, encoder_repetition_penalty, bad_words_ids,
// suppress_tokens, begin_suppress_tokens, exponential_decay_length_penalty, sequence_bias, forced_decoder_ids, and the
// sampling settings do_sample, temperature, top_k (else 50, as HF), top_p, min_p, typical_p, epsilon_cutoff,
// eta_cutoff, repetition_penalty, and num_return_sequences (sampling with one beam: that many samples; beams, searched
// or sampled: at most num_beams); the rest GenerationOptions' own defaults. The server, `srformer summarize` and
// `srformer eval` start here; callers that change do_sample or num_beams clamp num_return_sequences again
// (default_num_return_sequences).
GenerationOptions model_generation_defaults(const ModelConfig& config);

// num_return_sequences where the caller sets none, once `settled` has its do_sample and num_beams: the
// model's default (model_generation_defaults): as many samples when sampling with one beam, at most one
// per beam otherwise (beam search, beam sampling).
int64_t default_num_return_sequences(const GenerationOptions& defaults, const GenerationOptions& settled);

// SRformer's expected length L (the step -> segment schedule) where a request sets none: the checkpoint's
// srformer.expected_length (the L a model trained here was trained with), else the request's
// max_new_tokens. The server, `srformer summarize`, `srformer eval` and generate() all use it.
int64_t default_expected_length(const ModelConfig& config, int64_t max_new_tokens);
// The largest L a request may set: 4x the most new tokens it may ask for (past that no L means anything,
// and the schedule's cost grows with L), or the model's own srformer.expected_length where larger.
int64_t max_expected_length(const ModelConfig& config, int64_t max_new_tokens_cap);

// What to tell the user where the checkpoint's generation defaults set something this library does not
// implement (ModelConfig::unsupported_generation); empty where they set nothing of the kind.
std::string unsupported_generation_warning(const ModelConfig& config);

// Why the checkpoint's generation defaults (generation_config.json, else config.json) are not usable as
// they stand (validate() refuses them: num_beams 0, top_p -1, ...), naming where they come from; empty
// when they are. Whatever a request or flag leaves unset is taken from them, and then refused.
std::string unusable_generation_defaults(const ModelConfig& config);

// input_ids [B,k] int64, attention_mask [B,k]. expected_length: [B] int64 (the SRformer L per row);
// empty -> default_expected_length(model.config(), options.max_new_tokens) for every row. on_token(row, token) is
// called for every token a searcher emits (greedy/sampling: each step; beam search: the best hypothesis once it is
// done). Every row uses `options` with its own searcher (sampling rows share options.seed), and its own
// unpadded input as encoder_input_ids where the options read them.
std::vector<GenerateResult> generate(Seq2SeqModel& model, const torch::Tensor& input_ids,
                                     const torch::Tensor& attention_mask, const GenerationOptions& options,
                                     const std::optional<torch::Tensor>& expected_length = std::nullopt,
                                     const std::function<void(int64_t, int64_t)>& on_token = {});

}  // namespace srformer
