// Configuration parsing: HF configs, the "srformer" block, and clear errors.
#include "model/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/limits.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

nlohmann::json t5_json() {
  return {{"model_type", "t5"}, {"vocab_size", 64}, {"d_model", 32},     {"d_kv", 8},        {"num_heads", 4},
          {"d_ff", 64},         {"num_layers", 2},  {"pad_token_id", 0}, {"eos_token_id", 1}};
}

std::string error_of(const nlohmann::json& j) {
  try {
    (void)ModelConfig::from_json(j);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::string error_with_generation(const nlohmann::json& j, const nlohmann::json& generation) {
  try {
    (void)ModelConfig::from_json(j, &generation);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

nlohmann::json bart_json() {
  return {{"model_type", "bart"},  {"vocab_size", 64},    {"d_model", 32},       {"encoder_attention_heads", 4},
          {"encoder_ffn_dim", 64}, {"encoder_layers", 1}, {"decoder_layers", 1}, {"max_position_embeddings", 64}};
}

// T5Config (configuration_t5.py) splits feed_forward_proj at '-': dense_act_fn is the last part, except
// that "gated-gelu" means gelu_new; is_gated_act is a leading "gated". Keys the file sets itself win.
TEST(Config, T5FeedForwardProjIsReadAsHuggingFaceDerivesIt) {
  struct Want {
    const char* feed_forward_proj;
    const char* act;
    bool gated;
  };
  for (const auto& w : {Want{"relu", "relu", false}, Want{"gelu", "gelu", false}, Want{"gated-gelu", "gelu_new", true},
                        Want{"gated-relu", "relu", true}, Want{"gated-silu", "silu", true}, Want{"silu", "silu", false},
                        Want{"gelu_new", "gelu_new", false}, Want{"gated-gelu_new", "gelu_new", true},
                        Want{"gated-gelu_pytorch_tanh", "gelu_pytorch_tanh", true}}) {
    SCOPED_TRACE(w.feed_forward_proj);
    auto j = t5_json();
    j["feed_forward_proj"] = w.feed_forward_proj;
    const auto c = ModelConfig::from_json(j);
    EXPECT_EQ(c.activation, w.act);
    EXPECT_EQ(c.gated_ffn, w.gated);
    const auto again = ModelConfig::from_json(c.to_json(&j));  // saved and read back, by us or by HF
    EXPECT_EQ(again.activation, w.act);
    EXPECT_EQ(again.gated_ffn, w.gated);
    EXPECT_EQ(c.to_json()["dense_act_fn"], w.act);
  }
  auto j = t5_json();
  j["feed_forward_proj"] = "gated-gelu";
  j["dense_act_fn"] = "gelu";  // as PretrainedConfig sets leftover keys after T5Config's derivation
  EXPECT_EQ(ModelConfig::from_json(j).activation, "gelu");
  j["is_gated_act"] = false;
  EXPECT_FALSE(ModelConfig::from_json(j).gated_ffn);
  // gated + exact gelu cannot be written as feed_forward_proj alone: dense_act_fn keeps it.
  j["is_gated_act"] = true;
  const auto exact = ModelConfig::from_json(j);
  const auto back = ModelConfig::from_json(exact.to_json());
  EXPECT_EQ(back.activation, "gelu");
  EXPECT_TRUE(back.gated_ffn);

  const auto refused = [](const nlohmann::json& edits, const std::string& says) {
    auto k = t5_json();
    k.merge_patch(edits);
    EXPECT_NE(error_of(k).find(says), std::string::npos) << edits.dump() << ": " << error_of(k);
  };
  refused({{"feed_forward_proj", "gelu-new"}}, "'feed_forward_proj' is 'gelu-new'; it must be ACT or gated-ACT");
  refused({{"feed_forward_proj", "gated-gelu-new"}}, "it must be ACT or gated-ACT");
  refused({{"feed_forward_proj", "gated-mish"}},
          "feed_forward_proj 'gated-mish': activation 'mish' is not supported (supported: relu, gelu,");
  refused({{"feed_forward_proj", "gated-"}}, "activation '' is not supported");
  refused({{"dense_act_fn", "tanh"}}, "dense_act_fn 'tanh': activation 'tanh' is not supported");
}

TEST(Config, BartTakesTheActivationsItComputesAndNamesTheOthers) {
  for (const char* act : kActivations) {
    auto j = bart_json();
    j["activation_function"] = act;
    EXPECT_EQ(ModelConfig::from_json(j).activation, act);
    EXPECT_EQ(ModelConfig::from_json(ModelConfig::from_json(j).to_json()).activation, act);
  }
  auto j = bart_json();
  j["activation_function"] = "mish";
  EXPECT_NE(error_of(j).find("config.json: activation_function 'mish' is not supported (supported: relu, gelu, "
                             "gelu_python, gelu_new, gelu_pytorch_tanh, gelu_fast, quick_gelu, silu, swish)"),
            std::string::npos)
      << error_of(j);
}

// BartConfig's defaults where config.json lacks a key (older and tiny checkpoints): bos 0, decoder start 2
// and forced_eos_token_id 2 whatever eos_token_id is; null means none. T5Config has none of these.
TEST(Config, BartSpecialTokensTakeBartConfigsDefaults) {
  auto j = bart_json();
  j["eos_token_id"] = 5;
  const auto c = ModelConfig::from_json(j);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.decoder_start_token_id, 2);
  EXPECT_EQ(c.forced_eos_token_id, 2);
  EXPECT_FALSE(c.forced_bos_token_id);
  j["forced_eos_token_id"] = nullptr;
  EXPECT_FALSE(ModelConfig::from_json(j).forced_eos_token_id);
  j["decoder_start_token_id"] = nullptr;  // generate then starts with bos_token_id
  j["bos_token_id"] = 3;
  EXPECT_EQ(ModelConfig::from_json(j).decoder_start_token_id, 3);
  // transformers < 4.2's flag for BART-CNN: BartConfig turns it into forced_bos_token_id = bos_token_id.
  j["force_bos_token_to_be_generated"] = true;
  EXPECT_EQ(ModelConfig::from_json(j).forced_bos_token_id, 3);
  j["forced_bos_token_id"] = 4;
  EXPECT_EQ(ModelConfig::from_json(j).forced_bos_token_id, 4);
  // A config made in code keeps "none" through a save (the keys are written as null).
  auto unset = bart_json();
  unset["forced_eos_token_id"] = nullptr;
  unset["bos_token_id"] = nullptr;
  const auto none = ModelConfig::from_json(ModelConfig::from_json(unset).to_json());
  EXPECT_FALSE(none.forced_eos_token_id);
  EXPECT_FALSE(none.bos_token_id);
  // generation_config.json replaces them all: no forced_eos_token_id there is none.
  const nlohmann::json g = {{"num_beams", 2}};
  EXPECT_FALSE(ModelConfig::from_json(bart_json(), &g).forced_eos_token_id);
  const auto t5 = ModelConfig::from_json(t5_json());
  EXPECT_FALSE(t5.forced_eos_token_id);
  EXPECT_FALSE(t5.bos_token_id);
  EXPECT_EQ(t5.decoder_start_token_id, 0);
}

// T5Config has no decoder start of its own: Hugging Face's generate then starts with bos_token_id where
// config.json sets one (it cannot generate without either). The pad id stood in for it even then.
TEST(Config, AT5WithoutADecoderStartStartsWithItsBos) {
  auto t5 = t5_json();
  ASSERT_FALSE(t5.contains("decoder_start_token_id"));
  EXPECT_EQ(ModelConfig::from_json(t5).decoder_start_token_id, 0) << "no bos: the pad id, as T5 checkpoints say";
  t5["bos_token_id"] = 5;
  EXPECT_EQ(ModelConfig::from_json(t5).decoder_start_token_id, 5);
  t5["decoder_start_token_id"] = 0;
  EXPECT_EQ(ModelConfig::from_json(t5).decoder_start_token_id, 0);
}

// transformers 3's BartConfig keys for mBART/Marian/Blenderbot-style networks: today's BartModel ignores
// them, so a checkpoint that sets one was trained for another network and is refused by name.
TEST(Config, LegacyBartVariantKeysAreRefusedByName) {
  for (const auto& [key, value] : std::vector<std::pair<const char*, bool>>{{"normalize_before", true},
                                                                            {"add_final_layer_norm", true},
                                                                            {"normalize_embedding", false},
                                                                            {"static_position_embeddings", true},
                                                                            {"do_blenderbot_90_layernorm", true}}) {
    auto j = bart_json();
    j[key] = value;
    EXPECT_NE(error_of(j).find("config.json: '" + std::string(key) + "' is " + (value ? "true" : "false")),
              std::string::npos)
        << error_of(j);
    j[key] = !value;  // plain BART's value, as bart-base's config.json writes them
    EXPECT_EQ(error_of(j), "");
  }
}

TEST(Config, PrunedHeadsAndEncoderDecoderTyingAreRefused) {
  for (auto j : {t5_json(), bart_json()}) {
    j["pruned_heads"] = nlohmann::json::object();
    j["tie_encoder_decoder"] = false;
    EXPECT_EQ(error_of(j), "");
    j["pruned_heads"] = {{"0", {1, 2}}};
    EXPECT_NE(error_of(j).find("'pruned_heads' is {\"0\":[1,2]}; models with pruned attention heads are not"),
              std::string::npos)
        << error_of(j);
    j["pruned_heads"] = nullptr;
    j["tie_encoder_decoder"] = true;
    EXPECT_NE(error_of(j).find("'tie_encoder_decoder' is true"), std::string::npos) << error_of(j);
  }
}

// A quantized checkpoint (bitsandbytes, GPTQ, AWQ, ...) is refused by name; it was refused as dozens of weights
// "of the wrong type" and unexpected scales, with a hint to check the shapes in config.json.
TEST(Config, QuantizedCheckpointsAreRefusedSayingWhatToUse) {
  for (auto j : {t5_json(), bart_json()}) {
    j["quantization_config"] = nullptr;
    EXPECT_EQ(error_of(j), "");
    j["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_8bit", true}};
    EXPECT_NE(error_of(j).find("'quantization_config' says the weights are quantized (quant_method 'bitsandbytes'), "
                               "which is not supported: use the model's unquantized checkpoint"),
              std::string::npos)
        << error_of(j);
    j["quantization_config"] = "gptq";
    EXPECT_NE(error_of(j).find("'quantization_config' says the weights are quantized, which"), std::string::npos)
        << error_of(j);
  }
}

// Hugging Face's other encoder-decoder families share key names with BART or T5 but compute otherwise:
// each is refused with what is supported, never loaded as its look-alike.
TEST(Config, OtherModelTypesAreRefusedNamingTheSupportedOnes) {
  for (const char* type :
       {"mbart", "pegasus", "pegasus_x", "longt5", "umt5", "switch_transformers", "led", "marian", "blenderbot",
        "blenderbot-small", "bigbird_pegasus", "plbart", "fsmt", "prophetnet", "m2m_100", "nllb-moe", "BART", "T5"}) {
    for (auto j : {bart_json(), t5_json()}) {
      j["model_type"] = type;
      EXPECT_NE(error_of(j).find("model_type '" + std::string(type) + "' is not supported (supported: bart, t5, mt5)"),
                std::string::npos)
          << error_of(j);
    }
  }
  auto j = t5_json();
  j.erase("model_type");
  EXPECT_NE(error_of(j).find("config.json: no 'model_type' (supported: bart, t5, mt5)"), std::string::npos)
      << error_of(j);
}

TEST(Config, PlainCheckpointLoadsAsFullAttention) {
  const auto c = ModelConfig::from_json(t5_json());
  EXPECT_EQ(c.srformer.cross_attention, CrossAttentionKind::kFull);
  EXPECT_EQ(c.decoder_layers, 2);  // num_decoder_layers defaults to num_layers
  EXPECT_FALSE(c.srformer.kv_clamp);
  EXPECT_DOUBLE_EQ(c.srformer.raf_init_leak, 0.1);
}

TEST(Config, T5V11GatedGeluAndUntiedHeadAndInnerDimDifferentFromDModel) {
  auto j = t5_json();
  j["feed_forward_proj"] = "gated-gelu";
  j["tie_word_embeddings"] = false;
  j["d_kv"] = 16;  // 4 * 16 = 64 != d_model 32
  const auto c = ModelConfig::from_json(j);
  EXPECT_TRUE(c.gated_ffn);
  EXPECT_EQ(c.activation, "gelu_new");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.inner_dim(), 64);
}

TEST(Config, MultilingualT5TakesMt5ConfigsDefaults) {
  auto j = t5_json();
  j["model_type"] = "mt5";
  const auto mt5 = ModelConfig::from_json(j);
  EXPECT_EQ(mt5.arch, Architecture::kT5);
  EXPECT_EQ(mt5.type_name(), "mt5");
  EXPECT_FALSE(mt5.tie_word_embeddings);
  EXPECT_TRUE(mt5.gated_ffn);
  EXPECT_EQ(mt5.activation, "gelu_new");
  EXPECT_EQ(mt5.to_json()["model_type"], "mt5");
  const auto t5 = ModelConfig::from_json(t5_json());  // T5Config's: tied, relu
  EXPECT_TRUE(t5.tie_word_embeddings);
  EXPECT_FALSE(t5.gated_ffn);
  EXPECT_EQ(t5.to_json()["model_type"], "t5");
  j["tie_word_embeddings"] = true;  // what the file says wins
  j["feed_forward_proj"] = "relu";
  const auto set = ModelConfig::from_json(j);
  EXPECT_TRUE(set.tie_word_embeddings);
  EXPECT_FALSE(set.gated_ffn);
  ModelConfig in_code;  // made in code: its architecture's name
  in_code.arch = Architecture::kT5;
  EXPECT_EQ(in_code.type_name(), "t5");
}

// T5's d_model^-0.5 output scaling: tie_word_embeddings in configs of transformers 4, scale_decoder_outputs
// in those of transformers 5, which writes tie_word_embeddings true for every T5 and mT5 (its mT5 scales
// nothing unless the key says so).
TEST(Config, TransformersFivesScaleDecoderOutputsDecidesT5sOutputScaling) {
  const auto scales = [](const nlohmann::json& edits) {
    auto j = t5_json();
    j.merge_patch(edits);
    return ModelConfig::from_json(j).scales_decoder_outputs();
  };
  EXPECT_TRUE(scales(nlohmann::json::object()));           // t5-small: tied, scaled
  EXPECT_FALSE(scales({{"tie_word_embeddings", false}}));  // flan-t5 as transformers 4 saved it
  EXPECT_FALSE(scales({{"tie_word_embeddings", true},      // and as transformers 5 saves it
                       {"scale_decoder_outputs", false},
                       {"transformers_version", "5.17.0"}}));
  EXPECT_TRUE(scales({{"tie_word_embeddings", true}, {"scale_decoder_outputs", true}}));
  EXPECT_TRUE(scales({{"tie_word_embeddings", false}, {"scale_decoder_outputs", true}}));
  EXPECT_FALSE(scales({{"model_type", "mt5"}}));
  EXPECT_TRUE(scales({{"model_type", "mt5"}, {"tie_word_embeddings", true}, {"transformers_version", "4.46.3"}}));
  EXPECT_FALSE(scales({{"model_type", "mt5"}, {"tie_word_embeddings", true}, {"transformers_version", "5.2.0"}}));
  EXPECT_TRUE(scales({{"model_type", "mt5"}, {"transformers_version", "5.2.0"}, {"scale_decoder_outputs", true}}));
  // Written back as read; absent where the file had none.
  auto j = t5_json();
  j["scale_decoder_outputs"] = false;
  EXPECT_EQ(ModelConfig::from_json(j).to_json()["scale_decoder_outputs"], false);
  EXPECT_FALSE(ModelConfig::from_json(t5_json()).to_json().contains("scale_decoder_outputs"));
}

TEST(Config, AT5WithoutNPositionsSaysItsInputLimitIsAFallback) {
  const auto none = ModelConfig::from_json(t5_json());
  EXPECT_TRUE(none.max_input_tokens_is_fallback);
  EXPECT_EQ(none.max_input_tokens, 16384);
  auto j = t5_json();
  j["n_positions"] = 512;
  const auto set = ModelConfig::from_json(j);
  EXPECT_FALSE(set.max_input_tokens_is_fallback);
  EXPECT_EQ(set.max_input_tokens, 512);
  // The offline tools take the server's limit for it (summarize accepted 16384 tokens where the server
  // refused 4097), and a flag raises or lowers it there as on the server.
  EXPECT_EQ(input_limit_with(none, std::nullopt), kUnboundedModelInputTokens);
  EXPECT_EQ(input_limit_with(none, 9000), 9000);
  EXPECT_EQ(input_limit_with(none, 100), 100);
  EXPECT_EQ(input_limit_with(set, std::nullopt), 512);
  EXPECT_EQ(input_limit_with(set, 2048), 2048);
}

TEST(Config, SrformerBlock) {
  auto j = t5_json();
  j["srformer"] = {{"cross_attention", "srformer"}, {"segment_size", 16}, {"expected_length", 100}};
  const auto c = ModelConfig::from_json(j);
  EXPECT_EQ(c.srformer.cross_attention, CrossAttentionKind::kSrformer);
  EXPECT_EQ(c.srformer.segment_size, 16);
  EXPECT_EQ(c.srformer.expected_length, 100);
  EXPECT_TRUE(c.srformer.uses_raf());
  // Round trip through to_json.
  const auto again = ModelConfig::from_json(c.to_json());
  EXPECT_EQ(again.srformer.segment_size, 16);
  EXPECT_EQ(again.srformer.cross_attention, CrossAttentionKind::kSrformer);
  EXPECT_EQ(again.srformer.expected_length, 100);
  // Without one, none is written (a saved model keeps taking each request's max_new_tokens).
  j["srformer"].erase("expected_length");
  EXPECT_FALSE(ModelConfig::from_json(j).to_json()["srformer"].contains("expected_length"));
}

TEST(Config, ClearErrors) {
  auto j = t5_json();
  j["srformer"] = {{"cross_attention", "sparse"}, {"segment_size", 4}};
  EXPECT_NE(error_of(j).find("unknown cross_attention 'sparse'"), std::string::npos) << error_of(j);
  j["srformer"] = {{"cross_attention", "srformer"}};
  EXPECT_NE(error_of(j).find("segment_size is required"), std::string::npos) << error_of(j);
  j["srformer"] = {{"cross_attention", "full"}, {"segment_size", 8}};
  EXPECT_NE(error_of(j).find("cross_attention is 'full'"), std::string::npos) << error_of(j);
  j["srformer"] = {{"cross_attention", "srformer"}, {"segment_size", 8}, {"segmnet", 1}};
  EXPECT_NE(error_of(j).find("unknown key 'srformer.segmnet'"), std::string::npos) << error_of(j);
  auto k = t5_json();
  k["model_type"] = "gpt2";
  EXPECT_NE(error_of(k).find("model_type 'gpt2' is not supported (supported: bart, t5, mt5)"), std::string::npos)
      << error_of(k);
  k = t5_json();
  k.erase("d_model");
  EXPECT_NE(error_of(k).find("missing required key 'd_model'"), std::string::npos);
  k = t5_json();
  k["eos_token_id"] = 999;
  EXPECT_NE(error_of(k).find("outside the vocabulary"), std::string::npos);
}

// Values nlohmann would silently bend (16.5 to 16, 1e30 to INT64_MIN) and settings whose arithmetic
// fails later (a negative epsilon makes NaN; a bucket count under 4 divides by zero) stop the load.
TEST(Config, NumbersOutOfShapeAreRefusedByName) {
  const auto refused = [](const char* key, const nlohmann::json& value, const std::string& says) {
    auto j = t5_json();
    j[key] = value;
    const auto error = error_of(j);
    EXPECT_NE(error.find("config.json: "), std::string::npos) << key << ": " << error;
    EXPECT_NE(error.find(says), std::string::npos) << key << ": " << error;
  };
  refused("d_model", 32.5, "key 'd_model' must be a whole number within range, got 32.5");
  refused("d_model", 1e30, "key 'd_model' must be a whole number within range");
  refused("eos_token_id", 18446744073709551615ULL, "key 'eos_token_id' must be a whole number within range");
  refused("num_heads", -4, "'num_heads' must be positive, got -4");
  refused("relative_attention_num_buckets", -1, "'relative_attention_num_buckets' must be at least 4, got -1");
  refused("relative_attention_max_distance", -5, "'relative_attention_max_distance' must exceed half");
  refused("relative_attention_max_distance", 16, "'relative_attention_max_distance' must exceed half");
  refused("layer_norm_epsilon", -1, "'layer_norm_epsilon' must be a small positive number");
  refused("layer_norm_epsilon", 0, "'layer_norm_epsilon' must be a small positive number");
  refused("n_positions", 0, "'n_positions' must be positive, got 0");
  refused("max_new_tokens", 0, "'max_new_tokens' must be positive, got 0");
  // Sizes past 2^24 are a damaged file, refused before anything multiplies them (they overflowed int64).
  for (const auto& [key, name] : std::vector<std::pair<const char*, const char*>>{
           {"num_heads", "num_heads"},
           {"d_kv", "d_kv"},
           {"d_model", "d_model"},
           {"d_ff", "d_ff"},
           {"num_layers", "encoder layers"},
           {"vocab_size", "vocab_size"},
           {"n_positions", "n_positions"},
           {"relative_attention_num_buckets", "relative_attention_num_buckets"},
           {"relative_attention_max_distance", "relative_attention_max_distance"}}) {
    refused(key, int64_t{1} << 62, "'" + std::string(name) + "' is 4611686018427387904; at most 16777216 (2^24)");
  }
  // Generation counts likewise (min_new_tokens near 2^63 overflowed adding the start token).
  refused("min_new_tokens", INT64_MAX, "'min_new_tokens' is 9223372036854775807; a count past 16777216");
  refused("num_beams", int64_t{1} << 40, "'num_beams' is 1099511627776; a count past 16777216");
  auto huge_segments = t5_json();
  huge_segments["srformer"] = {{"cross_attention", "srformer"}, {"segment_size", INT64_MAX}};
  EXPECT_NE(error_of(huge_segments).find("'srformer.segment_size' is 9223372036854775807; at most 16777216"),
            std::string::npos)
      << error_of(huge_segments);
  // A whole number written as a float is one (some exporters write 32.0), and the edges still load.
  auto j = t5_json();
  j["d_model"] = 32.0;
  j["relative_attention_num_buckets"] = 4;
  j["relative_attention_max_distance"] = 3;
  EXPECT_EQ(ModelConfig::from_json(j).d_model, 32);

  auto bart = bart_json();
  EXPECT_EQ(error_of(bart), "");
  bart["max_position_embeddings"] = INT64_MAX;
  EXPECT_NE(error_of(bart).find("'max_position_embeddings' is 9223372036854775807; at most 16777216"),
            std::string::npos)
      << error_of(bart);
  bart["max_position_embeddings"] = -3;
  EXPECT_NE(error_of(bart).find("'max_position_embeddings' must be positive, got -3"), std::string::npos)
      << error_of(bart);
}

TEST(Config, TheRafInitialisationIsCheckedLikeTheRestOfTheBlock) {
  const auto error_with = [](const nlohmann::json& raf_init) {
    auto j = t5_json();
    j["srformer"] = {{"cross_attention", "srformer"}, {"segment_size", 8}, {"raf_init", raf_init}};
    return error_of(j);
  };
  EXPECT_NE(error_with({{"treshold", 0.2}}).find("config.json: unknown key 'srformer.raf_init.treshold'"),
            std::string::npos)
      << error_with({{"treshold", 0.2}});
  EXPECT_NE(error_with(5).find("srformer.raf_init must be an object"), std::string::npos);
  EXPECT_NE(error_with({{"threshold", "x"}}).find("key 'threshold' has the wrong type"), std::string::npos);
  EXPECT_NE(error_with({{"weight_scale", 1e300}}).find("srformer.raf_init.weight_scale must be in [0, 1000]"),
            std::string::npos)
      << error_with({{"weight_scale", 1e300}});
  EXPECT_EQ(error_with({{"threshold", 0.2}, {"leak", 0.3}, {"weight_scale", 0.5}}), "");
  EXPECT_EQ(error_with(nullptr), "");
  // An unknown variant names the file and the key.
  auto j = t5_json();
  j["srformer"] = {{"cross_attention", "magic"}, {"segment_size", 8}};
  EXPECT_NE(error_of(j).find("config.json: srformer: unknown cross_attention 'magic'"), std::string::npos)
      << error_of(j);
}

// Hugging Face generates with generation_config.json's eos_token_id (an id or a list), stopping at any
// listed id. config.json's id stays the first where the list holds it; the others are the extra ids.
TEST(Config, GenerationConfigsEosIsTheOneGeneratedWith) {
  const auto j = t5_json();  // eos 1
  const auto with = [&](const nlohmann::json& eos) {
    const nlohmann::json g = {{"eos_token_id", eos}};
    return ModelConfig::from_json(j, &g);
  };
  EXPECT_EQ(with(5).eos_token_id, 5);
  EXPECT_TRUE(with(5).unsupported_generation.empty());
  EXPECT_TRUE(with(5).extra_eos_token_ids.empty());
  EXPECT_EQ(with(nlohmann::json::array({7})).eos_token_id, 7);
  const auto listed = with(nlohmann::json::array({3, 1}));  // keeps config.json's where listed
  EXPECT_EQ(listed.eos_token_id, 1);
  EXPECT_EQ(listed.extra_eos_token_ids, std::vector<int64_t>{3});
  EXPECT_TRUE(listed.unsupported_generation.empty()) << listed.unsupported_generation[0];
  EXPECT_EQ(with(nlohmann::json::array({4, 6})).eos_token_id, 4);
  EXPECT_EQ(with(nlohmann::json::array({4, 6})).extra_eos_token_ids, std::vector<int64_t>{6});
  EXPECT_NE(error_with_generation(j, {{"eos_token_id", 999}}).find("generation_config.json: special token id 999"),
            std::string::npos);
  EXPECT_NE(error_with_generation(j, {{"eos_token_id", nlohmann::json::array({1, 999})}})
                .find("generation_config.json: special token id 999"),
            std::string::npos);
  EXPECT_NE(error_with_generation(j, {{"eos_token_id", nlohmann::json::array({"x"})}})
                .find("'eos_token_id' must be an id or a list"),
            std::string::npos);
}

// "eos_token_id": null (or []) is Hugging Face's None: its generate would end no sequence before
// max_length, every summary running on past its end. Refused, naming the file and key; it loaded with
// BartConfig's or T5Config's default id instead (1 here), which Hugging Face does not stop at.
TEST(Config, NullOrEmptyEosIdIsRefusedNamingTheFile) {
  auto j = t5_json();
  for (const auto& none : {nlohmann::json(nullptr), nlohmann::json::array()}) {
    j["eos_token_id"] = none;
    const auto error = error_of(j);
    EXPECT_EQ(
        error.rfind("config.json: 'eos_token_id' is " + none.dump() + ": Hugging Face would then end no summary", 0),
        0u)
        << error;
    const auto generation = error_with_generation(t5_json(), {{"eos_token_id", none}});
    EXPECT_EQ(generation.rfind("generation_config.json: 'eos_token_id' is " + none.dump(), 0), 0u) << generation;
  }
}

// Newer transformers save generation defaults only in generation_config.json; Hugging Face then
// generates with that file's values and ignores config.json's (keys it lacks take HF's defaults).
TEST(Config, GenerationConfigReplacesConfigJsonsGenerationDefaults) {
  auto j = t5_json();
  j["num_beams"] = 4;
  j["max_length"] = 142;
  j["no_repeat_ngram_size"] = 3;
  j["forced_bos_token_id"] = 5;
  j["top_k"] = 10;
  const auto plain = ModelConfig::from_json(j);
  EXPECT_EQ(plain.num_beams, 4);
  EXPECT_EQ(plain.top_k, 10);
  EXPECT_FALSE(plain.do_sample);
  EXPECT_FALSE(plain.srformer.expected_length) << "no srformer.expected_length: each request's max_new_tokens";
  const nlohmann::json g = {{"num_beams", 2},
                            {"max_new_tokens", 60},
                            {"min_length", 11},
                            {"early_stopping", "never"},
                            {"decoder_start_token_id", 3},
                            {"forced_eos_token_id", 1},
                            {"do_sample", true},
                            {"temperature", 0.7},
                            {"top_p", 0.9},
                            {"repetition_penalty", 1.1},
                            {"num_return_sequences", 2}};
  const auto c = ModelConfig::from_json(j, &g);
  EXPECT_EQ(c.num_beams, 2);
  EXPECT_EQ(c.max_length, 61) << "max_new_tokens + the decoder start";
  EXPECT_EQ(c.min_length, 11);
  EXPECT_EQ(c.early_stopping, EarlyStopping::kNever);
  EXPECT_FALSE(c.no_repeat_ngram_size) << "config.json's value is not generation_config.json's";
  EXPECT_FALSE(c.forced_bos_token_id);
  EXPECT_EQ(c.forced_eos_token_id, 1);
  EXPECT_EQ(c.decoder_start_token_id, 3);
  EXPECT_EQ(c.do_sample, true);
  EXPECT_EQ(c.temperature, 0.7);
  EXPECT_EQ(c.top_p, 0.9);
  EXPECT_EQ(c.repetition_penalty, 1.1);
  EXPECT_EQ(c.num_return_sequences, 2);
  EXPECT_FALSE(plain.num_return_sequences);
  // Several samples per request are drawn: nothing to warn of.
  EXPECT_TRUE(c.unsupported_generation.empty());
  EXPECT_FALSE(c.top_k) << "config.json's value is not generation_config.json's";
  EXPECT_FALSE(c.srformer.expected_length) << "not derived from max_length: the request's max_new_tokens";
  // A summarization task's parameters still win, as in HF's summarization pipeline.
  j["task_specific_params"] = {{"summarization", {{"num_beams", 6}, {"prefix", "summarize: "}}}};
  const auto task = ModelConfig::from_json(j, &g);
  EXPECT_EQ(task.num_beams, 6);
  EXPECT_EQ(task.max_length, 61);
  EXPECT_EQ(task.summarization_prefix, "summarize: ");
}

// A checkpoint saved by transformers 4.27-4.40 after a training script set model.config.num_beams (or a
// config.json edited by hand) has a generation_config.json made from config.json before that
// ("_from_model_config": true): transformers 4's generate() then builds its settings from config.json
// again. generation_config.json's were used, so such a checkpoint summarized greedily and without its
// lengths.
TEST(Config, ConfigJsonsGenerationKeysWinOverAGenerationConfigMadeFromIt) {
  auto j = t5_json();
  j["num_beams"] = 4;
  j["max_length"] = 128;
  j["no_repeat_ngram_size"] = 3;
  nlohmann::json g = {
      {"_from_model_config", true}, {"decoder_start_token_id", 0}, {"eos_token_id", 1}, {"pad_token_id", 0}};
  const auto legacy = ModelConfig::from_json(j, &g);
  EXPECT_EQ(legacy.num_beams, 4);
  EXPECT_EQ(legacy.max_length, 128);
  EXPECT_EQ(legacy.no_repeat_ngram_size, 3);
  g["_from_model_config"] = false;  // a generation_config.json of its own: it decides
  EXPECT_FALSE(ModelConfig::from_json(j, &g).num_beams);
  // config.json at the defaults (or null, as transformers 4.41+ leaves the keys it moved): the file's.
  g = {{"_from_model_config", true}, {"num_beams", 4}, {"max_length", 142}};
  j["num_beams"] = 1;
  j["max_length"] = nullptr;
  j["no_repeat_ngram_size"] = 0;
  EXPECT_EQ(ModelConfig::from_json(j, &g).num_beams, 4);
  EXPECT_EQ(ModelConfig::from_json(j, &g).max_length, 142);
  // BART's forced_eos_token_id 2 is BartConfig's own default: not a setting of the checkpoint's.
  auto bart = bart_json();
  bart["forced_eos_token_id"] = 2;
  EXPECT_EQ(ModelConfig::from_json(bart, &g).num_beams, 4);
  bart["forced_bos_token_id"] = 0;  // BART-CNN's: config.json decides, as it does in transformers 4
  const auto cnn = ModelConfig::from_json(bart, &g);
  EXPECT_FALSE(cnn.num_beams);
  EXPECT_EQ(cnn.forced_bos_token_id, 0);
}

// HF's summarization pipeline updates the generation config with the task's parameters, and
// generate() then takes max_new_tokens / min_new_tokens over max_length / min_length wherever they
// were set: a task's lengths do not undo generation_config.json's new-token counts, but its own do.
TEST(Config, TaskLengthsLeaveGenerationConfigsNewTokenCountsStanding) {
  auto j = t5_json();
  j["task_specific_params"] = {{"summarization", {{"max_length", 142}, {"min_length", 56}}}};
  const nlohmann::json g = {{"max_new_tokens", 60}, {"min_new_tokens", 5}};
  const auto c = ModelConfig::from_json(j, &g);
  EXPECT_EQ(c.max_length, 61) << "max_new_tokens 60 + the decoder start";
  EXPECT_EQ(c.min_length, 6) << "min_new_tokens 5 + the decoder start";
  const auto lengths_only = ModelConfig::from_json(j, nullptr);
  EXPECT_EQ(lengths_only.max_length, 142);
  EXPECT_EQ(lengths_only.min_length, 56);
  j["task_specific_params"]["summarization"] = {{"max_new_tokens", 99}, {"min_new_tokens", 9}, {"max_length", 20}};
  const auto task = ModelConfig::from_json(j, &g);
  EXPECT_EQ(task.max_length, 100);
  EXPECT_EQ(task.min_length, 10);
}

// facebook/bart-large-cnn's config.json (and distilbart-cnn's, bart-large-xsum's) sets PretrainedConfig's
// top-level "prefix" to " ", which Hugging Face's summarization pipeline puts before every document
// (huggingface/transformers#14673, #8101); task_specific_params.summarization.prefix, where the task has the
// key, replaces it (t5-small's "summarize: "; null: none). The top-level one was ignored.
TEST(Config, TheConfigsPrefixGoesBeforeEachDocumentUnlessTheTaskSetsItsOwn) {
  const auto cnn = nlohmann::json::parse(R"({
    "_num_labels": 3, "activation_dropout": 0.0, "activation_function": "gelu", "add_final_layer_norm": false,
    "architectures": ["BartForConditionalGeneration"], "attention_dropout": 0.0, "bos_token_id": 0,
    "classif_dropout": 0.0, "d_model": 1024, "decoder_attention_heads": 16, "decoder_ffn_dim": 4096,
    "decoder_layerdrop": 0.0, "decoder_layers": 12, "decoder_start_token_id": 2, "dropout": 0.1,
    "early_stopping": true, "encoder_attention_heads": 16, "encoder_ffn_dim": 4096, "encoder_layerdrop": 0.0,
    "encoder_layers": 12, "eos_token_id": 2, "force_bos_token_to_be_generated": true, "forced_bos_token_id": 0,
    "forced_eos_token_id": 2, "init_std": 0.02, "is_encoder_decoder": true, "length_penalty": 2.0,
    "max_length": 142, "max_position_embeddings": 1024, "min_length": 56, "model_type": "bart",
    "no_repeat_ngram_size": 3, "normalize_before": false, "num_beams": 4, "num_hidden_layers": 12,
    "output_past": true, "pad_token_id": 1, "prefix": " ", "scale_embedding": false,
    "task_specific_params": {"summarization": {"early_stopping": true, "length_penalty": 2.0, "max_length": 142,
                                               "min_length": 56, "no_repeat_ngram_size": 3, "num_beams": 4}},
    "vocab_size": 50264})");
  const auto c = ModelConfig::from_json(cnn);
  EXPECT_EQ(c.summarization_prefix, " ");
  EXPECT_EQ(c.forced_bos_token_id, 0);
  EXPECT_EQ(c.max_length, 142);
  auto task = cnn;
  task["task_specific_params"]["summarization"]["prefix"] = "summarize: ";
  EXPECT_EQ(ModelConfig::from_json(task).summarization_prefix, "summarize: ");
  task["task_specific_params"]["summarization"]["prefix"] = nullptr;
  EXPECT_FALSE(ModelConfig::from_json(task).summarization_prefix);
  auto none = cnn;
  none.erase("prefix");
  EXPECT_FALSE(ModelConfig::from_json(none).summarization_prefix);
}

// Many checkpoints list several EOS ids in config.json ("eos_token_id": [1, 2]), and forced_eos_token_id
// may be a list too. Generation stops at any listed EOS id; every listed forced id is forced (the lowest
// first). They were cut to one id each, with a warning that the others were left out.
TEST(Config, ListValuedEosIdsInConfigJsonLoad) {
  auto j = t5_json();
  j["eos_token_id"] = {1, 2, 1};
  const auto c = ModelConfig::from_json(j);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.extra_eos_token_ids, std::vector<int64_t>{2});
  EXPECT_TRUE(c.unsupported_generation.empty()) << c.unsupported_generation[0];
  j["eos_token_id"] = {2};
  j["forced_eos_token_id"] = {2, 1};
  const auto forced = ModelConfig::from_json(j);
  EXPECT_EQ(forced.eos_token_id, 2);
  EXPECT_TRUE(forced.extra_eos_token_ids.empty());
  EXPECT_EQ(forced.forced_eos_token_id, 1);
  EXPECT_EQ(forced.extra_forced_eos_token_ids, std::vector<int64_t>{2});
  EXPECT_TRUE(forced.unsupported_generation.empty());
  j["forced_eos_token_id"] = nlohmann::json::array();
  EXPECT_FALSE(ModelConfig::from_json(j).forced_eos_token_id);
  EXPECT_TRUE(ModelConfig::from_json(j).extra_forced_eos_token_ids.empty());
  j["forced_eos_token_id"] = {1, 70};
  EXPECT_NE(error_of(j).find("special token id 70 outside the vocabulary"), std::string::npos) << error_of(j);
  j["eos_token_id"] = {"x"};
  EXPECT_NE(error_of(j).find("'eos_token_id' must be an id or a list of ids"), std::string::npos) << error_of(j);
}

// A saved checkpoint's config.json keeps the lists (it wrote the first id only, and the model it saved
// stopped at fewer ids when loaded again); single ids stay single.
TEST(Config, ListValuedEosIdsSurviveASave) {
  auto j = t5_json();
  j["eos_token_id"] = {3, 1};
  j["forced_eos_token_id"] = {5, 4};
  const auto c = ModelConfig::from_json(j);
  const auto saved = c.to_json();
  EXPECT_EQ(saved.at("eos_token_id"), nlohmann::json::array({3, 1}));
  EXPECT_EQ(saved.at("forced_eos_token_id"), nlohmann::json::array({4, 5}));
  const auto again = ModelConfig::from_json(saved);
  EXPECT_EQ(again.eos_token_id, 3);
  EXPECT_EQ(again.extra_eos_token_ids, c.extra_eos_token_ids);
  EXPECT_EQ(again.forced_eos_token_id, 4);
  EXPECT_EQ(again.extra_forced_eos_token_ids, c.extra_forced_eos_token_ids);
  const auto single = ModelConfig::from_json(t5_json()).to_json();
  EXPECT_EQ(single.at("eos_token_id"), 1);
  EXPECT_TRUE(single.at("forced_eos_token_id").is_null());
}

// "top_k": null is Hugging Face's None: no top-k filtering (its TopKLogitsWarper needs a value), not the
// default 50 an absent key gives. It gave 50.
TEST(Config, NullTopKIsNoTopKFiltering) {
  auto j = t5_json();
  EXPECT_FALSE(ModelConfig::from_json(j).top_k) << "absent: the default";
  j["top_k"] = nullptr;
  EXPECT_EQ(ModelConfig::from_json(j).top_k, 0);
  const nlohmann::json g = {{"top_k", nullptr}};
  j["top_k"] = 10;
  EXPECT_EQ(ModelConfig::from_json(j, &g).top_k, 0);
}

// A PEFT adapter directory (LoRA fine-tunes of flan-t5 are common) is named as one, with its base model and
// how to merge it; it was asked whether it was a Hugging Face model directory.
TEST(Config, APeftAdapterDirectoryIsNamedWithHowToMergeIt) {
  testing::TempDir dir("adapter");
  const auto error_loading = [&] {
    try {
      (void)ModelConfig::load(dir.path() / "config.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_loading().find("is this a Hugging Face model directory?"), std::string::npos);
  std::ofstream(dir.path() / "adapter_config.json")
      << R"({"base_model_name_or_path": "google/flan-t5-base", "peft_type": "LORA", "r": 8})";
  const auto error = error_loading();
  EXPECT_NE(error.find(dir.path().string() +
                       " holds a PEFT adapter (adapter_config.json, base model google/flan-t5-base), not a model: "
                       "merge it into its base model"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("merge_and_unload().save_pretrained(OUT)"), std::string::npos) << error;
  std::ofstream(dir.path() / "adapter_config.json") << "{";  // unreadable: named without its base model
  EXPECT_NE(error_loading().find(" holds a PEFT adapter (adapter_config.json), not a model"), std::string::npos)
      << error_loading();
}

// encoder_no_repeat_ngram_size and encoder_repetition_penalty are applied, so no longer warned of.
TEST(Config, EncoderNoRepeatNGramSizeAndEncoderRepetitionPenaltyAreRead) {
  testing::TempDir dir("config");
  std::ofstream(dir.path() / "config.json") << t5_json().dump();
  std::ofstream(dir.path() / "generation_config.json")
      << R"({"encoder_no_repeat_ngram_size": 3, "encoder_repetition_penalty": 1.5})";
  const auto c = ModelConfig::load(dir.path() / "config.json");
  EXPECT_EQ(c.encoder_no_repeat_ngram_size, 3);
  EXPECT_EQ(c.encoder_repetition_penalty, 1.5);
  EXPECT_TRUE(c.unsupported_generation.empty()) << c.unsupported_generation[0];
}

TEST(Config, BadWordsIdsAreReadAndCheckedAgainstTheVocabulary) {
  testing::TempDir dir("config");
  auto j = t5_json();
  j["vocab_size"] = 100;
  std::ofstream(dir.path() / "config.json") << j.dump();
  const auto load = [&](const std::string& generation) {
    std::ofstream(dir.path() / "generation_config.json") << generation;
    return ModelConfig::load(dir.path() / "config.json");
  };
  const auto c = load(R"({"bad_words_ids": [[5], [7, 9]]})");
  EXPECT_EQ(c.bad_words_ids, (std::vector<std::vector<int64_t>>{{5}, {7, 9}}));
  EXPECT_TRUE(c.unsupported_generation.empty()) << c.unsupported_generation[0];
  EXPECT_TRUE(load(R"({"bad_words_ids": null})").bad_words_ids.empty());
  for (const char* bad : {R"({"bad_words_ids": [[5], []]})", R"({"bad_words_ids": [5, 7]})",
                          R"({"bad_words_ids": [[-1]]})", R"({"bad_words_ids": [[100]]})"}) {
    EXPECT_THROW(load(bad), std::invalid_argument) << bad;
  }
}

// exponential_decay_length_penalty, sequence_bias and forced_decoder_ids are applied (they were only warned
// of), and checked as Hugging Face's processors check them (sequence_bias: ids > 0, a float bias), their ids
// against the vocabulary.
TEST(Config, ExponentialDecaySequenceBiasAndForcedDecoderIdsAreReadAndChecked) {
  testing::TempDir dir("config");
  auto j = t5_json();
  j["vocab_size"] = 100;
  std::ofstream(dir.path() / "config.json") << j.dump();
  const auto load = [&](const std::string& generation) {
    std::ofstream(dir.path() / "generation_config.json") << generation;
    return ModelConfig::load(dir.path() / "config.json");
  };
  const auto c = load(R"({"exponential_decay_length_penalty": [20, 1.05],
                          "sequence_bias": [[[5], -2.0], [[7, 9], 1.5]],
                          "forced_decoder_ids": [[1, 50], [2, null]]})");
  EXPECT_EQ(c.exponential_decay_length_penalty, (std::pair<int64_t, double>{20, 1.05}));
  EXPECT_EQ(c.sequence_bias, (std::vector<std::pair<std::vector<int64_t>, double>>{{{5}, -2.0}, {{7, 9}, 1.5}}));
  EXPECT_EQ(c.forced_decoder_ids,
            (std::vector<std::pair<int64_t, std::optional<int64_t>>>{{1, 50}, {2, std::nullopt}}));
  EXPECT_TRUE(c.unsupported_generation.empty()) << c.unsupported_generation[0];
  const auto none = load(R"({"exponential_decay_length_penalty": null, "sequence_bias": null,
                             "forced_decoder_ids": null})");
  EXPECT_FALSE(none.exponential_decay_length_penalty);
  EXPECT_TRUE(none.sequence_bias.empty());
  EXPECT_TRUE(none.forced_decoder_ids.empty());
  EXPECT_TRUE(none.unsupported_generation.empty()) << none.unsupported_generation[0];
  for (const char* bad :
       {R"({"exponential_decay_length_penalty": [20]})", R"({"exponential_decay_length_penalty": [2.5, 1.05]})",
        R"({"exponential_decay_length_penalty": 1.05})", R"({"sequence_bias": []})", R"({"sequence_bias": [[[5], 1]]})",
        R"({"sequence_bias": [[[0], 1.0]]})", R"({"sequence_bias": [[[], 1.0]]})",
        R"({"sequence_bias": [[[100], 1.0]]})", R"({"sequence_bias": {"5": 1.0}})", R"({"forced_decoder_ids": [[1]]})",
        R"({"forced_decoder_ids": [[1, -1]]})", R"({"forced_decoder_ids": [[1, 100]]})"}) {
    EXPECT_THROW(load(bad), std::invalid_argument) << bad;
  }
}

// A decay start or forced index past 2^24 either way is a damaged file, as a count is. -2^63 passed the bound
// (std::abs overflowed to itself, a negative number) and made generation's regulation start overflow;
// 2^64 - 1 was read as -1; an index near 2^63 made the step after it (begin_suppress_tokens') overflow.
TEST(Config, DecayStartAndForcedDecoderIndexPastTheCountBoundAreRefused) {
  testing::TempDir dir("config");
  std::ofstream(dir.path() / "config.json") << t5_json().dump();
  const auto load = [&](const std::string& generation) {
    std::ofstream(dir.path() / "generation_config.json") << generation;
    return ModelConfig::load(dir.path() / "config.json");
  };
  for (const char* bad : {R"({"exponential_decay_length_penalty": [-9223372036854775808, 1.05]})",
                          R"({"exponential_decay_length_penalty": [18446744073709551615, 1.05]})",
                          R"({"exponential_decay_length_penalty": [-16777217, 1.05]})",
                          R"({"forced_decoder_ids": [[9223372036854775807, null]]})",
                          R"({"forced_decoder_ids": [[-9223372036854775808, 5]]})",
                          R"({"forced_decoder_ids": [[18446744073709551615, 5]]})"}) {
    EXPECT_THROW(load(bad), std::invalid_argument) << bad;
  }
  EXPECT_EQ(load(R"({"exponential_decay_length_penalty": [-16777216, 1.05]})").exponential_decay_length_penalty,
            (std::pair<int64_t, double>{-16777216, 1.05}));
  EXPECT_EQ(load(R"({"forced_decoder_ids": [[16777216, 5]]})").forced_decoder_ids,
            (std::vector<std::pair<int64_t, std::optional<int64_t>>>{{16777216, 5}}));
}

TEST(Config, SuppressTokensAndBeginSuppressTokensAreRead) {
  testing::TempDir dir("config");
  std::ofstream(dir.path() / "config.json") << t5_json().dump();
  std::ofstream(dir.path() / "generation_config.json")
      << R"({"suppress_tokens": [5, 6], "begin_suppress_tokens": [7], "num_beams": 4})";
  const auto c = ModelConfig::load(dir.path() / "config.json");
  EXPECT_EQ(c.suppress_tokens, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(c.begin_suppress_tokens, (std::vector<int64_t>{7}));
  EXPECT_TRUE(c.unsupported_generation.empty()) << c.unsupported_generation[0];
  std::ofstream(dir.path() / "generation_config.json") << R"({"suppress_tokens": [5, "x"]})";
  EXPECT_THROW(ModelConfig::load(dir.path() / "config.json"), std::invalid_argument);
}

TEST(Config, LoadReadsGenerationConfigBesideConfigJsonAndNamesTheFileAtFault) {
  testing::TempDir dir("config");
  std::ofstream(dir.path() / "config.json") << t5_json().dump();
  EXPECT_FALSE(ModelConfig::load(dir.path() / "config.json").num_beams);
  std::ofstream(dir.path() / "generation_config.json") << R"({"num_beams": 3, "max_length": 20})";
  const auto c = ModelConfig::load(dir.path() / "config.json");
  EXPECT_EQ(c.num_beams, 3);
  EXPECT_EQ(c.max_length, 20);
  const auto error_loading = [&](const std::string& generation) -> std::string {
    std::ofstream(dir.path() / "generation_config.json") << generation;
    try {
      (void)ModelConfig::load(dir.path() / "config.json");
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  // What HF would apply and we do not is listed for a warning; settings at their neutral value are not.
  // Group beam search is applied (it was warned of).
  std::ofstream(dir.path() / "generation_config.json")
      << R"({"num_beam_groups": 4, "diversity_penalty": 0.5, "constraints": null,
            "force_words_ids": [[5]], "num_beams": 4})";
  const auto unsupported = ModelConfig::load(dir.path() / "config.json");
  EXPECT_EQ(unsupported.unsupported_generation, (std::vector<std::string>{"force_words_ids=[[5]]"}));
  EXPECT_EQ(unsupported.num_beam_groups, 4);
  EXPECT_EQ(unsupported.diversity_penalty, 0.5);
  std::ofstream(dir.path() / "generation_config.json")
      << R"({"renormalize_logits": true, "stop_strings": ["\n"], "num_beams": 4})";
  EXPECT_EQ(ModelConfig::load(dir.path() / "config.json").unsupported_generation,
            (std::vector<std::string>{"renormalize_logits=true", R"(stop_strings=["\n"])"}));
  // Newer ones: top-H sampling and watermarking change what HF generates, and HF refuses DoLa for
  // encoder-decoder models; they went unmentioned.
  std::ofstream(dir.path() / "generation_config.json")
      << R"({"top_h": 0.4, "watermarking_config": {"greenlist_ratio": 0.25}, "dola_layers": "high"})";
  EXPECT_EQ(ModelConfig::load(dir.path() / "config.json").unsupported_generation,
            (std::vector<std::string>{"top_h=0.4", R"(watermarking_config={"greenlist_ratio":0.25})",
                                      R"(dola_layers="high")"}));
  // Values with which Hugging Face generates as without the setting (penalty_alpha 0 is no contrastive
  // search, guidance_scale 1 no guidance, empty suppress lists) are not warned of; they were.
  std::ofstream(dir.path() / "generation_config.json")
      << R"({"penalty_alpha": 0, "guidance_scale": 1.0, "suppress_tokens": [],
            "begin_suppress_tokens": [], "num_beams": 4})";
  EXPECT_EQ(ModelConfig::load(dir.path() / "config.json").unsupported_generation, std::vector<std::string>{});
  std::ofstream(dir.path() / "generation_config.json") << R"({"penalty_alpha": 0.6, "guidance_scale": 1.5})";
  EXPECT_EQ(ModelConfig::load(dir.path() / "config.json").unsupported_generation,
            (std::vector<std::string>{"penalty_alpha=0.6", "guidance_scale=1.5"}));
  // The sampling warpers min_p, typical_p, epsilon_cutoff and eta_cutoff are applied (they were warned of).
  std::ofstream(dir.path() / "generation_config.json")
      << R"({"min_p": 0.05, "typical_p": 0.9, "epsilon_cutoff": 3e-4, "eta_cutoff": 1e-3})";
  const auto warped = ModelConfig::load(dir.path() / "config.json");
  EXPECT_EQ(warped.unsupported_generation, std::vector<std::string>{});
  EXPECT_EQ(warped.min_p, 0.05);
  EXPECT_EQ(warped.typical_p, 0.9);
  EXPECT_EQ(warped.epsilon_cutoff, 3e-4);
  EXPECT_EQ(warped.eta_cutoff, 1e-3);
  const auto bad_type = error_loading(R"({"num_beams": "four"})");
  EXPECT_EQ(bad_type.find((dir.path() / "generation_config.json: key 'num_beams' has the wrong type").string()), 0u)
      << bad_type;
  const auto bad_early = error_loading(R"({"early_stopping": "sometimes"})");
  EXPECT_NE(bad_early.find(R"(generation_config.json: 'early_stopping' is "sometimes"; Hugging Face's values are)"),
            std::string::npos)
      << bad_early;
  const auto bad_json = error_loading("{");
  EXPECT_NE(bad_json.find("generation_config.json is not valid JSON"), std::string::npos) << bad_json;
  std::filesystem::remove(dir.path() / "generation_config.json");
  std::filesystem::create_directories(dir.path() / "generation_config.json");
  try {
    (void)ModelConfig::load(dir.path() / "config.json");
    ADD_FAILURE() << "a directory read as generation_config.json";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json is a directory; it must be a JSON file or absent"),
              std::string::npos)
        << e.what();  // it said "basic_filebuf::underflow error reading the file: Is a directory"
  }
  std::filesystem::remove(dir.path() / "generation_config.json");
  const auto bad_id = error_loading(R"({"forced_bos_token_id": 999})");
  EXPECT_NE(bad_id.find("generation_config.json: special token id 999 outside the vocabulary"), std::string::npos)
      << bad_id;
}

}  // namespace
}  // namespace srformer
