#pragma once
// How far a model's input limit binds.
#include "model/config.h"

namespace srformer {

// True where ModelConfig::max_input_tokens is the length the checkpoint was made for rather than what
// its encoder can read, so an operator may raise it: T5's relative positions read any length (its
// n_positions is advisory, as Hugging Face's tokenizers' model_max_length; an SRformer fine-tuned on
// long documents keeps T5's 512), while BART's learned positions end at max_position_embeddings.
inline bool input_limit_can_be_raised(const ModelConfig& config) { return config.arch == Architecture::kT5; }

}  // namespace srformer
