#pragma once
// Model configuration read from a Hugging Face config.json plus our "srformer" block.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/generation/early_stopping.h"

namespace srformer {

enum class Architecture { kBart, kT5 };

// The Hugging Face activation names (ACT2FN keys) a feed-forward may use; others are refused by name.
inline constexpr const char* kActivations[] = {
    "relu", "gelu", "gelu_python", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "quick_gelu", "silu", "swish"};
bool is_supported_activation(const std::string& name);

// Cross-attention variants (paper §4.2-4.3). All share one interface (attention/cross_attention.h).
enum class CrossAttentionKind {
  kFull,          // standard softmax over all keys
  kSegmented,     // softmax over segment i only
  kSrformer,      // segmented + RAF recurrent term (q R)/||K||
  kAblationI,     // only the recurrent term
  kAblationII,    // no division by ||K||
  kAblationIII,   // no RAF: P used directly
  kAblationIV,    // RAF on K_i^T V_i instead of P
  kXlMemory,      // Transformer-XL style: segment i plus segment i-1
  kGlobalTokens,  // LongT5 style: segment i plus one mean-pooled key/value per segment
};

const char* to_string(CrossAttentionKind kind);
CrossAttentionKind cross_attention_from_string(const std::string& name);  // throws on unknown
const char* to_string(Architecture arch);
// A Hugging Face early_stopping value: true, false or "never". Otherwise throws std::invalid_argument
// starting with `where` (the file).
EarlyStopping early_stopping_from_json(const nlohmann::json& value, const std::string& where);
// As Hugging Face writes it: true, false or "never".
nlohmann::json early_stopping_to_json(EarlyStopping e);

// SNN_kv's initial scale (raf_init.weight_scale, `convert --raf-init-weight-scale`): 1 is the authors'
// initialisation; far above it the recurrent term swamps attention, and near float's range the
// initial bound overflows.
inline constexpr double kMaxRafInitWeightScale = 1000.0;
// Throws std::invalid_argument starting with `name` when `scale` is outside [0, kMaxRafInitWeightScale].
void check_raf_init_weight_scale(double scale, const std::string& name);

struct SrformerConfig {
  CrossAttentionKind cross_attention = CrossAttentionKind::kFull;
  int64_t segment_size = 0;        // s; 0 for full
  std::optional<double> kv_clamp;  // BART: 2.0; T5: none
  double raf_init_threshold = 0.1;
  double raf_init_leak = 0.5;
  // SNN_kv's initial weights U(-b, b), b = weight_scale / sqrt(d): 1 is nn.Linear's default (the
  // authors'); smaller values start the recurrent term small when converting a trained model.
  double raf_init_weight_scale = 1.0;
  // srformer.expected_length: the L to generate with where a request sets none (a model trained here:
  // its training L). Unset: each request's max_new_tokens (default_expected_length, generate.h).
  std::optional<int64_t> expected_length;
  // Whether config.json had an "srformer" block (without one a checkpoint is plain full attention).
  bool from_block = false;
  // True when the cross-attention variant carries RAF parameters/state.
  bool uses_raf() const;
  // True when the variant reads segments (everything but full).
  bool segmented() const { return cross_attention != CrossAttentionKind::kFull; }
};

// Training dropout, Hugging Face's fields: BART `dropout` (0.1 when absent), `attention_dropout` and
// `activation_dropout` (0); T5 `dropout_rate` (0.1) for all three. Only training applies them.
struct DropoutRates {
  double hidden = 0.0;
  double attention = 0.0;
  double activation = 0.0;
};

struct ModelConfig {
  Architecture arch = Architecture::kBart;
  // config.json's model_type as read: "bart", "t5", or "mt5" (multilingual T5: T5 v1.1's architecture
  // with its own defaults); empty in configs made in code, which are arch's (type_name()).
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t d_model = 0;
  int64_t num_heads = 0;  // same in encoder and decoder
  int64_t head_dim = 0;   // d_kv (T5) or d_model / heads (BART)
  int64_t d_ff = 0;
  int64_t encoder_layers = 0;
  int64_t decoder_layers = 0;
  int64_t pad_token_id = 0;
  // The EOS id (config.json's; its list's first), and the further ids a list-valued eos_token_id names:
  // generation ends a sequence at any of them, as Hugging Face's does.
  int64_t eos_token_id = 1;
  std::vector<int64_t> extra_eos_token_ids;
  std::optional<int64_t> bos_token_id;
  int64_t decoder_start_token_id = 0;  // generation's first token (generation_config.json's where it sets one)
  // config.json's decoder_start_token_id where generation_config.json replaced it with another id: Hugging
  // Face's training shifts labels right with config.json's (shift_tokens_right, T5's _shift_right read
  // model.config), and a saved config.json keeps it. nullopt: the same id (training_decoder_start()).
  std::optional<int64_t> config_decoder_start_token_id;
  std::optional<int64_t> forced_bos_token_id;
  // The forced EOS id (a list's lowest), and the list's others, forced with it (each scores 0).
  std::optional<int64_t> forced_eos_token_id;
  std::vector<int64_t> extra_forced_eos_token_ids;
  bool tie_word_embeddings = true;
  // T5: whether the decoder's output is scaled by d_model^-0.5 before the head. transformers 5 saves it
  // as scale_decoder_outputs (and tie_word_embeddings true for every T5); unset, tie_word_embeddings
  // decides, as in transformers 4 (scales_decoder_outputs()).
  std::optional<bool> scale_decoder_outputs;
  double layer_norm_eps = 1e-5;

  // BART
  int64_t max_position_embeddings = 1024;
  bool scale_embedding = false;
  // BART activation_function / T5 dense_act_fn, in Hugging Face's ACT2FN names (kActivations).
  std::string activation = "gelu";

  // T5
  bool gated_ffn = false;  // is_gated_act: feed_forward_proj "gated-*"
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;

  // Generation defaults (HF meanings) from generation_config.json where the checkpoint has one, else
  // config.json; then task_specific_params.summarization's; absent -> std::nullopt.
  std::optional<int64_t> max_length;
  std::optional<int64_t> min_length;
  std::optional<int64_t> num_beams;
  std::optional<int64_t> num_beam_groups;
  std::optional<double> diversity_penalty;
  std::optional<double> length_penalty;
  std::optional<EarlyStopping> early_stopping;
  std::optional<int64_t> no_repeat_ngram_size;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  std::optional<double> min_p;
  std::optional<double> typical_p;
  std::optional<double> epsilon_cutoff;
  std::optional<double> eta_cutoff;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> encoder_no_repeat_ngram_size;
  std::optional<double> encoder_repetition_penalty;
  // Hugging Face's bad_words_ids (empty: none; its null and [] alike).
  std::vector<std::vector<int64_t>> bad_words_ids;
  // Hugging Face's suppress_tokens and begin_suppress_tokens (empty: none).
  std::vector<int64_t> suppress_tokens;
  std::vector<int64_t> begin_suppress_tokens;
  // Hugging Face's exponential_decay_length_penalty [start, factor], sequence_bias [[[ids], bias], ...] and
  // forced_decoder_ids [[index, token or null], ...] (GenerationOptions' meanings; unset or empty: none).
  std::optional<std::pair<int64_t, double>> exponential_decay_length_penalty;
  std::vector<std::pair<std::vector<int64_t>, double>> sequence_bias;
  std::vector<std::pair<int64_t, std::optional<int64_t>>> forced_decoder_ids;
  std::optional<int64_t> num_return_sequences;
  // Generation settings the checkpoint sets that this library does not implement and that would change
  // what Hugging Face generates (constrained beam search, contrastive search, ...), as "key=value":
  // callers warn that generation goes on without them.
  std::vector<std::string> unsupported_generation;
  // Put before each document: task_specific_params.summarization.prefix (T5's "summarize: ") where the task
  // has the key, else config.json's top-level "prefix" (BART-CNN's " "), as Hugging Face's pipeline does.
  std::optional<std::string> summarization_prefix;

  DropoutRates dropout;

  // Longest input the model accepts (BART: max_position_embeddings; T5: n_positions, else 16384).
  int64_t max_input_tokens = 1024;
  // True where config.json sets no limit (a T5 without n_positions: relative positions have none), so
  // max_input_tokens is the fallback above, not the checkpoint's. A server caps such models lower by
  // default (the encoder's time grows with the square of the input).
  bool max_input_tokens_is_fallback = false;

  SrformerConfig srformer;

  int64_t inner_dim() const { return num_heads * head_dim; }
  // The decoder input's first token in teacher-forced training, before the labels shifted right.
  int64_t training_decoder_start() const { return config_decoder_start_token_id.value_or(decoder_start_token_id); }
  bool scales_decoder_outputs() const { return scale_decoder_outputs.value_or(tie_word_embeddings); }

  // config.json's content; `generation`: generation_config.json's, whose generation defaults then
  // replace config.json's (as in Hugging Face). Throws std::invalid_argument naming the file.
  static ModelConfig from_json(const nlohmann::json& j, const nlohmann::json* generation = nullptr);
  // Reads config.json and, beside it, generation_config.json where there is one.
  static ModelConfig load(const std::filesystem::path& config_json);
  // Writes the config back in Hugging Face form (original keys kept when `original` is given).
  nlohmann::json to_json(const nlohmann::json* original = nullptr) const;

  // model_type, or the architecture's name where the config was made in code: what config.json says.
  std::string type_name() const;
};

}  // namespace srformer
