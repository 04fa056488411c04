#pragma once
// What a model's architecture bounds and what only its config suggests: decoder positions and input length.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "model/config.h"

namespace srformer {

// Decoder positions the model has (0 = no limit): BART's learned position embeddings bound the tokens it
// writes (new token n is decided at position n - 1); T5's relative positions do not.
inline int64_t decoder_positions(const ModelConfig& config) {
  return config.arch == Architecture::kBart ? config.max_position_embeddings : 0;
}

// True where ModelConfig::max_input_tokens is the length the checkpoint was made for rather than what
// its encoder can read, so an operator may raise it: T5's relative positions read any length (its
// n_positions is advisory, as Hugging Face's tokenizers' model_max_length; an SRformer fine-tuned on
// long documents keeps T5's 512), while BART's learned positions end at max_position_embeddings.
inline bool input_limit_can_be_raised(const ModelConfig& config) { return config.arch == Architecture::kT5; }

// The input limit of a model whose config.json sets none (ModelConfig::max_input_tokens_is_fallback) where
// the operator sets none either: an encoder's attention time grows with the square of the input, and its
// memory too without the CPU attention kernels (4096 tokens cost a sixteenth of 16384).
inline constexpr int64_t kUnboundedModelInputTokens = 4096;

// The input limit of an offline tool (`srformer summarize`, `eval`, `inspect`), as the server's
// (effective_max_input_tokens): its --max-input-tokens where given, which may lower the model's limit
// and raise it only where input_limit_can_be_raised; else the model's, or kUnboundedModelInputTokens
// where the model's config.json sets none. Throws std::invalid_argument naming the flag otherwise.
inline int64_t input_limit_with(const ModelConfig& config, std::optional<int64_t> flag) {
  if (!flag) return config.max_input_tokens_is_fallback ? kUnboundedModelInputTokens : config.max_input_tokens;
  if (*flag < 1) throw std::invalid_argument("--max-input-tokens must be at least 1");
  if (*flag > config.max_input_tokens && !input_limit_can_be_raised(config)) {
    throw std::invalid_argument("--max-input-tokens " + std::to_string(*flag) + " is over the model's limit of " +
                                std::to_string(config.max_input_tokens));
  }
  return *flag;
}

}  // namespace srformer
