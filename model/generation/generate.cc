#include "model/generation/generate.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "model/kernels/serial_region.h"
#include "model/limits.h"

namespace srformer {

GenerationOptions with_model_tokens(GenerationOptions options, const ModelConfig& config) {
  options.decoder_start_token_id = config.decoder_start_token_id;
  options.eos_token_id = config.eos_token_id;
  options.extra_eos_token_ids = config.extra_eos_token_ids;
  options.pad_token_id = config.pad_token_id;
  if (!options.forced_bos_token_id) options.forced_bos_token_id = config.forced_bos_token_id;
  if (!options.forced_eos_token_id) {
    options.forced_eos_token_id = config.forced_eos_token_id;
    options.extra_forced_eos_token_ids = config.extra_forced_eos_token_ids;
  }
  options.decoder_positions = decoder_positions(config);
  return options;
}

GenerationOptions model_generation_defaults(const ModelConfig& config) {
  GenerationOptions o = with_model_tokens(GenerationOptions{}, config);
  // HF's max_length / min_length count the decoder start token; new tokens are one fewer.
  o.max_new_tokens = config.max_length ? std::max<int64_t>(1, *config.max_length - 1) : 128;
  if (o.decoder_positions > 0) o.max_new_tokens = std::min(o.max_new_tokens, o.decoder_positions);
  o.min_new_tokens = config.min_length ? std::max<int64_t>(0, *config.min_length - 1) : 0;
  o.num_beams = config.num_beams.value_or(1);
  o.num_beam_groups = config.num_beam_groups.value_or(1);
  o.diversity_penalty = config.diversity_penalty.value_or(0.0);
  o.length_penalty = config.length_penalty.value_or(1.0);
  o.early_stopping = config.early_stopping.value_or(EarlyStopping::kHeuristic);
  // Hugging Face applies only sizes > 0: a checkpoint's -1 is off, not a size to refuse every request for.
  o.no_repeat_ngram_size = std::max<int64_t>(0, config.no_repeat_ngram_size.value_or(0));
  o.do_sample = config.do_sample.value_or(false);
  o.temperature = config.temperature.value_or(1.0);
  o.top_k = config.top_k.value_or(50);  // HF's default: sampling keeps the 50 likeliest tokens
  o.top_p = config.top_p.value_or(1.0);
  o.min_p = config.min_p.value_or(0.0);
  o.typical_p = config.typical_p.value_or(1.0);
  o.epsilon_cutoff = config.epsilon_cutoff.value_or(0.0);
  o.eta_cutoff = config.eta_cutoff.value_or(0.0);
  o.repetition_penalty = config.repetition_penalty.value_or(1.0);
  // As no_repeat_ngram_size: only sizes > 0 are applied.
  o.encoder_no_repeat_ngram_size = std::max<int64_t>(0, config.encoder_no_repeat_ngram_size.value_or(0));
  o.encoder_repetition_penalty = config.encoder_repetition_penalty.value_or(1.0);
  o.bad_words_ids = config.bad_words_ids;
  o.suppress_tokens = config.suppress_tokens;
  o.begin_suppress_tokens = config.begin_suppress_tokens;
  o.exponential_decay_length_penalty = config.exponential_decay_length_penalty;
  o.sequence_bias = config.sequence_bias;
  o.forced_decoder_ids = config.forced_decoder_ids;
  // Sampling with one beam draws that many; beams (searched or sampled) return at most one per beam
  // (HF refuses more; callers that change do_sample or num_beams clamp it again).
  o.num_return_sequences =
      std::clamp<int64_t>(config.num_return_sequences.value_or(1), 1,
                          draws_independent_samples(o) ? kMaxNumBeams : std::max<int64_t>(1, o.num_beams));
  return o;
}

int64_t default_num_return_sequences(const GenerationOptions& defaults, const GenerationOptions& settled) {
  return draws_independent_samples(settled) ? defaults.num_return_sequences
                                            : std::min(defaults.num_return_sequences, settled.num_beams);
}

int64_t default_expected_length(const ModelConfig& config, int64_t max_new_tokens) {
  return config.srformer.expected_length.value_or(max_new_tokens);
}

int64_t max_expected_length(const ModelConfig& config, int64_t max_new_tokens_cap) {
  return std::max<int64_t>(4 * max_new_tokens_cap, config.srformer.expected_length.value_or(0));
}

std::string unsupported_generation_warning(const ModelConfig& config) {
  if (config.unsupported_generation.empty()) return "";
  std::string settings;
  for (const auto& s : config.unsupported_generation) settings += (settings.empty() ? "" : ", ") + s;
  return "its generation defaults set " + settings +
         ", which srformer does not implement; generating without (outputs may differ from Hugging Face's)";
}

std::string unusable_generation_defaults(const ModelConfig& config) {
  try {
    // Lengths past the limits are clamped by every caller (the server's limit, --max-new-tokens), not refused.
    GenerationOptions d = model_generation_defaults(config);
    d.max_new_tokens = std::min(d.max_new_tokens, kMaxNewTokensLimit);
    d.min_new_tokens = std::min(d.min_new_tokens, d.max_new_tokens);
    validate(d);
  } catch (const std::invalid_argument& e) {
    return std::string("its generation defaults (generation_config.json, else config.json) are not usable: ") +
           e.what() + "; what a request or flag leaves unset comes from them";
  }
  return "";
}

std::vector<GenerateResult> generate(Seq2SeqModel& model, const torch::Tensor& input_ids,
                                     const torch::Tensor& attention_mask, const GenerationOptions& options,
                                     const std::optional<torch::Tensor>& expected_length,
                                     const std::function<void(int64_t, int64_t)>& on_token) {
  validate(options);
  if (input_ids.dim() != 2 || attention_mask.sizes() != input_ids.sizes()) {
    throw std::invalid_argument("generate() expects input_ids [B, k] and an attention_mask of the same shape");
  }
  const int64_t batch = input_ids.size(0);
  std::vector<GenerateResult> results(static_cast<size_t>(batch));
  if (batch == 0) return results;
  torch::Tensor lengths;
  if (expected_length && expected_length->defined()) {
    if (expected_length->dim() != 1 || expected_length->size(0) != batch) {
      throw std::invalid_argument("expected_length must be [B] = [" + std::to_string(batch) + "], one L per row");
    }
    lengths = expected_length->to(torch::kInt64);
    if (lengths.min().item<int64_t>() < 1) throw std::invalid_argument("expected_length values must be >= 1");
  } else {
    lengths = torch::full({batch}, default_expected_length(model.config(), options.max_new_tokens), torch::kInt64);
  }

  torch::NoGradGuard no_grad;
  const auto device = model.device();
  const auto encoded = model.encode(input_ids.to(device), attention_mask.to(device));
  // No row takes more than max_new_tokens steps: the switch table needs no entry past them.
  DecoderState state =
      model.start(encoded, lengths.to(device), torch::full({batch}, options.max_new_tokens, torch::kInt64).to(device));

  // One searcher per request; each request's row is repeated once per row it needs (beams).
  struct Live {
    int64_t request;
    std::unique_ptr<Searcher> searcher;
  };
  std::vector<Live> live;
  std::vector<int64_t> rows;
  const bool reads_input = reads_encoder_input(options);
  const auto cpu_ids = reads_input ? input_ids.to(torch::kCPU, torch::kInt64).contiguous() : torch::Tensor();
  const auto cpu_mask = reads_input ? attention_mask.to(torch::kCPU, torch::kInt64).contiguous() : torch::Tensor();
  for (int64_t b = 0; b < batch; ++b) {
    if (!reads_input) {
      live.push_back({b, make_searcher(options)});
    } else {
      // Each row's own tokens, its padding left out: a request generates as it would alone.
      std::vector<int64_t> ids;
      const auto* id = cpu_ids[b].data_ptr<int64_t>();
      const auto* mask = cpu_mask[b].data_ptr<int64_t>();
      for (int64_t i = 0; i < input_ids.size(1); ++i) {
        if (mask[i] != 0) ids.push_back(id[i]);
      }
      live.push_back({b, make_searcher(with_encoder_input(options, ids))});
    }
    rows.insert(rows.end(), static_cast<size_t>(live.back().searcher->num_rows()), b);
  }
  if (static_cast<int64_t>(rows.size()) != batch) state.select(torch::tensor(rows, torch::kInt64));
  std::vector<int64_t> tokens(rows.size(), options.decoder_start_token_id);

  while (!live.empty()) {
    // One device-to-host copy per step for the whole batch; the searchers slice it.
    const auto logits = model.step(state, torch::tensor(tokens, torch::kInt64).to(device)).to(torch::kCPU);
    std::vector<Live> still_live;
    std::vector<int64_t> keep, next_tokens;
    std::vector<int64_t> owner;  // the request each of this step's rows belongs to
    for (const auto& request : live) {
      owner.insert(owner.end(), static_cast<size_t>(request.searcher->num_rows()), request.request);
    }
    std::vector<bool> same_request;  // kept row j stays with the request that held row j (beams)
    int64_t offset = 0;
    const kernels::SerialRegion serial;  // many small ops per request: one thread is faster
    for (auto& request : live) {
      const int64_t n = request.searcher->num_rows();
      const SearchStep step = request.searcher->advance(logits.narrow(0, offset, n));
      if (on_token) {
        for (const int64_t token : step.emitted) on_token(request.request, token);
      }
      if (step.done) {
        auto& result = results[static_cast<size_t>(request.request)];
        result.hypotheses = request.searcher->results();
        result.steps = request.searcher->steps();
      } else {
        const auto parents = step.parent_rows.accessor<int64_t, 1>();
        const auto chosen = step.next_tokens.accessor<int64_t, 1>();
        // One per row after the step: as many as before, or fewer where samples ended.
        for (int64_t i = 0; i < parents.size(0); ++i) {
          same_request.push_back(owner[keep.size()] == request.request);
          keep.push_back(offset + parents[i]);
          next_tokens.push_back(chosen[i]);
        }
        still_live.push_back(std::move(request));
      }
      offset += n;
    }
    live = std::move(still_live);
    if (live.empty()) break;
    state.retain(keep, same_request);
    tokens = std::move(next_tokens);
  }
  return results;
}

}  // namespace srformer
