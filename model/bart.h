#pragma once
// BART (Lewis et al. 2019) with the cross-attention variant from the config: learned positions
// offset by 2, layernorm_embedding, post-LN layers, GELU, LM head tied to the shared embedding
// plus final_logits_bias. Parameter names are Hugging Face's.
#include <memory>

#include "model/encoder_decoder.h"
#include "model/io/checkpoint.h"

namespace srformer {

std::unique_ptr<EncoderDecoderModel> load_bart(const ModelConfig& config, const CheckpointReader& ckpt,
                                               const LoadOptions& options);

}  // namespace srformer
