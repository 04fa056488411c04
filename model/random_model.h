#pragma once
// Writes a randomly initialised Hugging Face model directory (config.json + model.safetensors) for
// any BART/T5 configuration: for tests, benchmarks and demos that must not download weights.
#include <cstdint>
#include <filesystem>

#include "model/config.h"

namespace srformer {

// Every parameter the loader expects, under Hugging Face names, seeded and deterministic.
// `std` > 0: every weight matrix and bias N(0, std), RAF threshold/leak drawn at random (tests exercise
// them all). `std` <= 0: Hugging Face's initialisation, the right start for training from scratch (T5:
// per projection, embeddings N(0,1); BART: 0.02, biases and final_logits_bias 0, the padding token's
// embedding row 0) and the RAF parameters' configured initial values (srformer.raf_init, by default
// the authors'). Norm weights are 1 either way.
void write_random_model(const std::filesystem::path& dir, const ModelConfig& config, uint64_t seed, double std = 0.1);

// Small configurations for tests: d_model 32, 4 heads, 2+2 layers.
ModelConfig tiny_config(Architecture arch, CrossAttentionKind kind, int64_t segment_size, int64_t vocab_size = 96);

// The shapes of the paper's base models (BART-base: d 768, 12 heads, 6+6 layers, vocab 50265;
// T5-small: d 512, 8 heads, 6+6 layers, vocab 32128).
ModelConfig bart_base_config(CrossAttentionKind kind, int64_t segment_size);
ModelConfig t5_small_config(CrossAttentionKind kind, int64_t segment_size);

}  // namespace srformer
