#pragma once
// The model library's public API: encode a batch, then decode it incrementally (one token per row
// per step) or teacher-forced. Rows are independent sequences: each has its own length, step t,
// expected length L, SRformer segment and RAF membrane, and rows can join, leave or be reordered
// between steps (continuous batching, beam search).
#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/decoder_state.h"
#include "model/raf_init.h"
#include "model/state_footprint.h"

namespace srformer {

struct EncoderOutput {
  torch::Tensor hidden;  // [B, k, d_model], model dtype
  torch::Tensor mask;    // [B, k] bool, true = real token (padding only at the end of a row)
};

// Asked before each encoder layer's attention and before its feed-forward, and by start() before each
// decoder layer's cross keys/values; returning true abandons the encode with EncodeInterrupted. A
// server passes one so that a long input whose requests are all cancelled, past their deadline or shut
// down stops within half a layer instead of running the whole encoder for nobody, and uses the pause to
// step its running rows (an encode of a long input would otherwise stall them for seconds).
using EncodeStop = std::function<bool()>;

class EncodeInterrupted : public std::runtime_error {
 public:
  EncodeInterrupted() : std::runtime_error("encode interrupted: its caller asked to stop") {}
};

struct LoadOptions {
  torch::Device device = torch::kCPU;
  // fp16/bf16 on CUDA (RAF/K^TV stay fp32). bf16 on the CPU (needs AMX or AVX512-BF16): projections
  // multiply bfloat16 weights (kernels/bf16_linear.h), everything else stays fp32.
  torch::ScalarType dtype = torch::kFloat32;
  // Replaces the checkpoint's "srformer" block (e.g. serve a plain checkpoint segmented).
  std::optional<SrformerConfig> srformer;
  // Where RAF parameters come from (param_binder.h): by default the checkpoint must hold them; a
  // conversion into SRformer creates those it lacks (or all) with the authors' initial values.
  RafInit raf_init = RafInit::kFromCheckpoint;
  uint64_t seed = 0;  // for initialised RAF weights
  // SRformer: compute every segment switch's RAF drive when a row starts decoding (flat step time in
  // the input length, more state per row; CrossAttention::precompute_switches).
  bool precompute_switches = true;
  // fp32 on a CPU with AVX2 + FMA: also hold every projection (and the LM head) in the layout of
  // kernels/fp32_packed_linear.h, which encodes and decode steps multiply faster, for a second copy of
  // those weights in memory (T5-small +242 MB, BART-base +551 MB). Only for models whose weights do not
  // change after loading: training turns it off. SRFORMER_CPU_PACKED=0 in the environment also does.
  bool pack_projections = true;
  // An encode a caller may pause (EncodeStop set, no autograd) runs a long input's sublayers in pieces,
  // asking `stop` between them (T5; BART's inputs end at 1,024 positions): self-attention by blocks of
  // queries of at most this many query-key pairs over the batch, the feed-forward and the keys' and
  // values' projections by blocks of at most this many positions over the batch; start() with `stop`
  // set projects each decoder layer's cross keys and values by the same blocks of positions. A
  // 16k-token T5-small attention sublayer is seconds of work; a piece of either default, tens of
  // milliseconds. SRFORMER_ENCODE_PIECES=0 in the environment keeps the sublayers whole.
  int64_t encode_piece_scores = int64_t{1} << 22;
  int64_t encode_piece_positions = 2048;
};

class Seq2SeqModel {
 public:
  virtual ~Seq2SeqModel() = default;
  virtual const ModelConfig& config() const = 0;
  virtual torch::Device device() const = 0;
  virtual torch::ScalarType dtype() const = 0;

  // input_ids [B,k] int64; attention_mask [B,k] (int or bool, 1 = real).
  EncoderOutput encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
    return encode(input_ids, attention_mask, EncodeStop{});
  }
  // The same, asking `stop` (when set) between sublayers; throws EncodeInterrupted when it says so.
  virtual EncoderOutput encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                               const EncodeStop& stop) = 0;

  // Builds the per-row decoder state from encoder output: cross K/V for every layer, and for
  // segmented variants K^T V, ||K|| and a zero RAF membrane. expected_length: [B] int64 (L per row).
  // max_steps: [B] int64, the most steps each row will take (its max_new_tokens), or undefined for
  // no bound; SRformer's switch table then holds only the segments those steps reach (with L above
  // max_new_tokens the rest of the schedule never comes), and a row must not step past it.
  DecoderState start(const EncoderOutput& enc, const torch::Tensor& expected_length,
                     const torch::Tensor& max_steps = {}) {
    return start(enc, expected_length, max_steps, EncodeStop{});
  }
  // The same, asking `stop` (when set) before each decoder layer's part, as encode() does.
  DecoderState start(const EncoderOutput& enc, const torch::Tensor& expected_length, const EncodeStop& stop) {
    return start(enc, expected_length, torch::Tensor(), stop);
  }
  virtual DecoderState start(const EncoderOutput& enc, const torch::Tensor& expected_length,
                             const torch::Tensor& max_steps, const EncodeStop& stop) = 0;

  // One decoding step for every row: tokens [B] int64 (the previous token of each row, the first
  // being decoder_start_token_id). Returns logits [B, vocab] float32 and advances every row's t.
  virtual torch::Tensor step(DecoderState& state, const torch::Tensor& tokens) = 0;

  // Teacher-forced forward (checks, training) over the decoder input [B,q]: q >= 1, B the encoder output's rows
  // (else std::invalid_argument). expected_length [B] defaults to q. Returns logits [B,q,vocab] float32.
  virtual torch::Tensor forward(const EncoderOutput& enc, const torch::Tensor& decoder_input_ids,
                                const std::optional<torch::Tensor>& expected_length = std::nullopt) = 0;

  // The bytes a row of start()'s state holds, by what they grow with (state_footprint.h): for budgets.
  virtual StateFootprint state_footprint() const = 0;

  // Number of parameters.
  virtual int64_t parameter_count() const = 0;
  // Bytes of the parameters as held (every tensor of named_parameters() once).
  int64_t parameter_bytes() const {
    int64_t n = 0;
    for (const auto& [name, t] : named_parameters()) n += static_cast<int64_t>(t.nbytes());
    return n;
  }
  // Bytes of the projections' packed copies held beside the parameters (LoadOptions::pack_projections:
  // fp32 panels; `--dtype bf16` on the CPU: bfloat16 tiles); 0 when nothing is packed.
  virtual int64_t packed_weight_bytes() const { return 0; }
  // Every parameter under its Hugging Face name (tied tensors once).
  virtual const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() const = 0;

 protected:
  // For encode()'s and start()'s implementations, at each of their pauses (EncodeStop): throws
  // EncodeInterrupted when `stop` is set and says so.
  static void stop_if_asked(const EncodeStop& stop) {
    if (stop && stop()) throw EncodeInterrupted();
  }
};

// The dtype a model runs in where the user names none: fp32 on the CPU; on CUDA fp16, except T5 on a GPU
// with native bfloat16 (`gpu_has_bf16`): T5's activations overflow fp16 on some checkpoints (Hugging Face
// clamps them and keeps its feed-forward output projection in fp32), and bf16 has fp32's range.
torch::ScalarType default_dtype(const ModelConfig& config, const torch::Device& device, bool gpu_has_bf16);

// Loads a Hugging Face model directory (config.json + model.safetensors | sharded | pytorch_model.bin).
std::unique_ptr<Seq2SeqModel> load_model(const std::filesystem::path& dir, const LoadOptions& options = {});

// Throws std::invalid_argument, saying what to do, where `device` is CUDA and this build (LibTorch
// without CUDA) or machine (no GPU, no driver, fewer GPUs than the index) cannot run on it.
void check_device_available(const torch::Device& device);

// Writes a model back as a Hugging Face directory (config.json keeping the original's other keys,
// model.safetensors with tied tensors stored once). Tokenizer files of `source_dir` (when given) are
// copied along. Floating-point tensors are stored as `storage` (float32, float16 or bfloat16): in
// float32 the directory reloads to identical outputs; the 16-bit forms halve the file and reload to
// the rounded weights (computation stays float32 on the CPU).
void save_model(const Seq2SeqModel& model, const std::filesystem::path& dir,
                const std::filesystem::path& source_dir = {}, torch::ScalarType storage = torch::kFloat32);

}  // namespace srformer
