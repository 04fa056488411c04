#pragma once
// T5 v1.0 / v1.1 with the cross-attention variant from the config: RMS norm (pre-LN), relative
// position buckets shared from layer 0 of each stack, unscaled attention, relu or gated-gelu FFN,
// d_model^-0.5 before a tied LM head. Parameter names are Hugging Face's.
#include <memory>

#include "model/encoder_decoder.h"
#include "model/io/checkpoint.h"

namespace srformer {

std::unique_ptr<EncoderDecoderModel> load_t5(const ModelConfig& config, const CheckpointReader& ckpt,
                                             const LoadOptions& options);

}  // namespace srformer
