#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "model/config_generation.h"
#include "model/io/json_file.h"

namespace srformer {

namespace {

struct KindName {
  CrossAttentionKind kind;
  const char* name;
};
constexpr KindName kKinds[] = {
    {CrossAttentionKind::kFull, "full"},
    {CrossAttentionKind::kSegmented, "segmented"},
    {CrossAttentionKind::kSrformer, "srformer"},
    {CrossAttentionKind::kAblationI, "ablation_i"},
    {CrossAttentionKind::kAblationII, "ablation_ii"},
    {CrossAttentionKind::kAblationIII, "ablation_iii"},
    {CrossAttentionKind::kAblationIV, "ablation_iv"},
    {CrossAttentionKind::kXlMemory, "xl_memory"},
    {CrossAttentionKind::kGlobalTokens, "global_tokens"},
};

constexpr std::string_view kConfigFile = "config.json";
[[noreturn]] void config_error(const std::string& what) {
  throw std::invalid_argument(std::string(kConfigFile) + ": " + what);
}

template <typename T>
std::optional<T> opt(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if constexpr (std::is_same_v<T, int64_t>) {
    // nlohmann converts 16.5 to 16 and 1e30 to INT64_MIN: a count or an id must be a whole number in range
    // (2.0 is one; exporters write some so).
    constexpr double kLimit = 9007199254740992.0;  // 2^53: beyond it doubles skip integers
    const bool whole = it->is_number_integer() && !(it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX);
    const bool whole_float = it->is_number_float() && std::trunc(it->get<double>()) == it->get<double>() &&
                             std::abs(it->get<double>()) <= kLimit;
    if (it->is_number() && !whole && !whole_float) {
      config_error(std::string("key '") + key + "' must be a whole number within range, got " + it->dump());
    }
    if (whole_float) return static_cast<int64_t>(it->get<double>());
  }
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    config_error(std::string("key '") + key + "' has the wrong type (" + it->type_name() + ")");
  }
}

template <typename T>
T req(const nlohmann::json& j, const char* key) {
  auto v = opt<T>(j, key);
  if (!v) config_error(std::string("missing required key '") + key + "'");
  return *v;
}

// A size or count: positive, and far below where products of two of them overflow (2^24: the largest
// real vocabulary is ~256k, the widest layer ~50k); a larger one is a damaged or mistyped file.
constexpr int64_t kMaxConfigSize = int64_t{1} << 24;

// Whether an integer JSON number lies within ±kMaxConfigSize, judged as written: int64_t would wrap one
// past 2^63 to a negative number, and std::abs of -2^63 overflows.
bool within_config_size(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(kMaxConfigSize);
  const auto x = v.get<int64_t>();
  return x >= -kMaxConfigSize && x <= kMaxConfigSize;
}

void require_positive(int64_t v, const char* key) {
  if (v <= 0) config_error(std::string("'") + key + "' must be positive, got " + std::to_string(v));
  if (v > kMaxConfigSize) {
    config_error(std::string("'") + key + "' is " + std::to_string(v) + "; at most " + std::to_string(kMaxConfigSize) +
                 " (2^24) is taken: is the file damaged?");
  }
}

void parse_srformer(const nlohmann::json& j, ModelConfig& c) {
  SrformerConfig& s = c.srformer;
  // Authors' defaults per architecture (DESIGN.md: threshold 0.1; leak 0.1 T5, 0.5 BART; clamp 2.0 BART).
  s.raf_init_threshold = 0.1;
  s.raf_init_leak = c.arch == Architecture::kT5 ? 0.1 : 0.5;
  s.kv_clamp = c.arch == Architecture::kBart ? std::optional<double>(2.0) : std::nullopt;

  const auto it = j.find("srformer");
  if (it == j.end() || it->is_null()) return;  // plain checkpoint: full attention
  const auto& b = *it;
  if (!b.is_object()) config_error("'srformer' must be an object");
  s.from_block = true;
  static const char* kKnown[] = {"cross_attention", "segment_size", "kv_clamp", "raf_init", "expected_length"};
  for (const auto& [key, value] : b.items()) {
    if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return key == k; }) ==
        std::end(kKnown)) {
      config_error("unknown key 'srformer." + key +
                   "' (known: cross_attention, segment_size, kv_clamp, raf_init, expected_length)");
    }
  }
  try {
    s.cross_attention = cross_attention_from_string(opt<std::string>(b, "cross_attention").value_or("full"));
  } catch (const std::invalid_argument& e) {
    config_error(std::string("srformer: ") + e.what());
  }
  const auto seg = opt<int64_t>(b, "segment_size");
  if (s.segmented()) {
    if (!seg)
      config_error(std::string("srformer.segment_size is required for cross_attention '") +
                   to_string(s.cross_attention) + "'");
    require_positive(*seg, "srformer.segment_size");
    s.segment_size = *seg;
  } else if (seg && *seg != 0) {
    config_error(
        "srformer.segment_size is set but cross_attention is 'full' (the default where it is unset or null); "
        "remove segment_size or pick a segmented variant");
  }
  if (b.contains("kv_clamp")) {
    s.kv_clamp = opt<double>(b, "kv_clamp");
    if (s.kv_clamp && *s.kv_clamp <= 0) config_error("srformer.kv_clamp must be positive or null");
  }
  if (const auto r = b.find("raf_init"); r != b.end() && !r->is_null()) {
    if (!r->is_object()) config_error("srformer.raf_init must be an object (threshold, leak, weight_scale)");
    for (const auto& [key, value] : r->items()) {
      if (key != "threshold" && key != "leak" && key != "weight_scale") {
        config_error("unknown key 'srformer.raf_init." + key + "' (known: threshold, leak, weight_scale)");
      }
    }
    s.raf_init_threshold = opt<double>(*r, "threshold").value_or(s.raf_init_threshold);
    s.raf_init_leak = opt<double>(*r, "leak").value_or(s.raf_init_leak);
    s.raf_init_weight_scale = opt<double>(*r, "weight_scale").value_or(s.raf_init_weight_scale);
    if (!(s.raf_init_threshold > 0) || !std::isfinite(s.raf_init_threshold)) {
      config_error("srformer.raf_init.threshold must be a positive number");
    }
    if (!std::isfinite(s.raf_init_leak)) config_error("srformer.raf_init.leak must be a finite number");
    try {
      check_raf_init_weight_scale(s.raf_init_weight_scale, "srformer.raf_init.weight_scale");
    } catch (const std::invalid_argument& e) {
      config_error(e.what());
    }
  }
  if (const auto L = opt<int64_t>(b, "expected_length")) {
    require_positive(*L, "srformer.expected_length");
    s.expected_length = *L;
  }
}

}  // namespace

void check_raf_init_weight_scale(double scale, const std::string& name) {
  if (!(scale >= 0 && scale <= kMaxRafInitWeightScale)) {
    throw std::invalid_argument(name + " must be in [0, " + std::to_string(static_cast<int>(kMaxRafInitWeightScale)) +
                                "] (1 is the authors' initialisation), got " + std::to_string(scale));
  }
}

const char* to_string(CrossAttentionKind kind) {
  for (const auto& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

CrossAttentionKind cross_attention_from_string(const std::string& name) {
  for (const auto& k : kKinds) {
    if (name == k.name) return k.kind;
  }
  std::string known;
  for (const auto& k : kKinds) known += std::string(known.empty() ? "" : ", ") + k.name;
  throw std::invalid_argument("unknown cross_attention '" + name + "' (known: " + known + ")");
}

const char* to_string(Architecture arch) { return arch == Architecture::kBart ? "bart" : "t5"; }

EarlyStopping early_stopping_from_json(const nlohmann::json& value, const std::string& where) {
  if (value.is_boolean()) return early_stopping_from_bool(value.get<bool>());
  if (value == "never") return EarlyStopping::kNever;
  if (value == "true" || value == "false") return early_stopping_from_bool(value == "true");  // as strings too
  throw std::invalid_argument(where + ": 'early_stopping' is " + value.dump() +
                              "; Hugging Face's values are true, false and \"never\"");
}

nlohmann::json early_stopping_to_json(EarlyStopping e) {
  return e == EarlyStopping::kNever ? nlohmann::json("never") : nlohmann::json(e == EarlyStopping::kWhenFull);
}

bool SrformerConfig::uses_raf() const {
  switch (cross_attention) {
    case CrossAttentionKind::kSrformer:
    case CrossAttentionKind::kAblationI:
    case CrossAttentionKind::kAblationII:
    case CrossAttentionKind::kAblationIV:
      return true;
    default:
      return false;
  }
}

namespace {

// Which lengths an earlier source gave in new tokens: Hugging Face keeps max_new_tokens / min_new_tokens
// beside max_length / min_length, and they win over them wherever they were set (generate()'s
// _prepare_generated_length, 4.39-4.45; before it both minimums applied, so the larger won), so a task's
// max_length does not undo a generation_config.json's max_new_tokens.
struct NewTokenLengths {
  bool max = false;
  bool min = false;
};

// Generation defaults in Hugging Face's keys, from config.json, generation_config.json or a
// task's parameters; keys the object lacks leave the value as it was.
void read_generation_defaults(const nlohmann::json& j, ModelConfig& c, NewTokenLengths& new_tokens) {
  // Counts (lengths, beams, n-gram sizes): past 2^24 either way the file is damaged; nearer 2^63 adding
  // the start token overflowed. Their meaning is checked where generation options are (options.cc).
  const auto count = [&j](const char* key) -> std::optional<int64_t> {
    const auto v = opt<int64_t>(j, key);
    if (v && (*v > kMaxConfigSize || *v < -kMaxConfigSize)) {
      config_error(std::string("'") + key + "' is " + std::to_string(*v) + "; a count past " +
                   std::to_string(kMaxConfigSize) + " (2^24) is not taken: is the file damaged?");
    }
    return v;
  };
  // HF's max_length / min_length count the decoder start token; *_new_tokens, where set, win.
  if (auto v = count("max_length"); v && !new_tokens.max) c.max_length = v;
  if (auto v = count("max_new_tokens")) {
    // As Hugging Face's GenerationConfig.validate: no room for a token is a mistake, not a default.
    require_positive(*v, "max_new_tokens");
    c.max_length = *v + 1;
    new_tokens.max = true;
  }
  if (auto v = count("min_length"); v && !new_tokens.min) c.min_length = v;
  if (auto v = count("min_new_tokens")) {
    c.min_length = *v + 1;
    new_tokens.min = true;
  }
  if (auto v = count("num_beams")) c.num_beams = v;
  if (auto v = count("num_beam_groups")) c.num_beam_groups = v;
  if (auto v = opt<double>(j, "diversity_penalty")) c.diversity_penalty = v;
  if (auto v = opt<double>(j, "length_penalty")) c.length_penalty = v;
  if (const auto it = j.find("early_stopping"); it != j.end() && !it->is_null()) {
    c.early_stopping = early_stopping_from_json(*it, std::string(kConfigFile));
  }
  if (auto v = count("no_repeat_ngram_size")) c.no_repeat_ngram_size = v;
  if (auto v = opt<bool>(j, "do_sample")) c.do_sample = v;
  if (auto v = opt<double>(j, "temperature")) c.temperature = v;
  if (auto v = count("top_k")) {
    c.top_k = v;
  } else if (const auto it = j.find("top_k"); it != j.end() && it->is_null()) {
    c.top_k = 0;  // Hugging Face's None: no top-k filtering, where an absent key is its default 50
  }
  if (auto v = opt<double>(j, "top_p")) c.top_p = v;
  if (auto v = opt<double>(j, "min_p")) c.min_p = v;
  if (auto v = opt<double>(j, "typical_p")) c.typical_p = v;
  if (auto v = opt<double>(j, "epsilon_cutoff")) c.epsilon_cutoff = v;
  if (auto v = opt<double>(j, "eta_cutoff")) c.eta_cutoff = v;
  if (auto v = opt<double>(j, "repetition_penalty")) c.repetition_penalty = v;
  if (auto v = count("encoder_no_repeat_ngram_size")) c.encoder_no_repeat_ngram_size = v;
  if (auto v = opt<double>(j, "encoder_repetition_penalty")) c.encoder_repetition_penalty = v;
  if (const auto it = j.find("bad_words_ids"); it != j.end() && !it->is_null()) {
    // As Hugging Face's NoBadWordsLogitsProcessor checks it, and its ids against the vocabulary (HF's
    // first generate() call would fail there).
    const auto malformed = [&it] {
      config_error("'bad_words_ids' must be a list of non-empty lists of token ids, e.g. [[5], [7, 9]]; got " +
                   it->dump());
    };
    if (!it->is_array()) malformed();
    std::vector<std::vector<int64_t>> words;
    for (const auto& sequence : *it) {
      if (!sequence.is_array() || sequence.empty()) malformed();
      words.emplace_back();
      for (const auto& id : sequence) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0) malformed();
        if (id.get<int64_t>() >= c.vocab_size) {
          config_error("'bad_words_ids' holds token " + std::to_string(id.get<int64_t>()) +
                       ", outside the vocabulary (vocab_size " + std::to_string(c.vocab_size) + ")");
        }
        words.back().push_back(id.get<int64_t>());
      }
    }
    c.bad_words_ids = std::move(words);
  }
  for (const auto& [key, list] : {std::pair{"suppress_tokens", &c.suppress_tokens},
                                  std::pair{"begin_suppress_tokens", &c.begin_suppress_tokens}}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    std::vector<int64_t> ids;
    for (const auto& id : it->is_array() ? *it : nlohmann::json::array({nullptr})) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        config_error("'" + std::string(key) + "' must be a list of token ids, e.g. [5, 7]; got " + it->dump());
      }
      ids.push_back(id.get<int64_t>());
    }
    *list = std::move(ids);
  }
  if (const auto it = j.find("exponential_decay_length_penalty"); it != j.end() && !it->is_null()) {
    // Hugging Face's (start_index, decay_factor) tuple, a two-element list in JSON.
    if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() || !(*it)[1].is_number() ||
        !within_config_size((*it)[0])) {
      config_error(
          "'exponential_decay_length_penalty' must be [start, factor] (new tokens before EOS is favoured, "
          "a number), e.g. [20, 1.05]; got " +
          it->dump());
    }
    c.exponential_decay_length_penalty = std::pair{(*it)[0].get<int64_t>(), (*it)[1].get<double>()};
  }
  // An id of a list below the vocabulary (HF's first generate() call fails on one past it).
  const auto token_in_vocabulary = [&c](const char* key, int64_t id) {
    if (id >= c.vocab_size) {
      config_error(std::string("'") + key + "' holds token " + std::to_string(id) +
                   ", outside the vocabulary (vocab_size " + std::to_string(c.vocab_size) + ")");
    }
  };
  if (const auto it = j.find("sequence_bias"); it != j.end() && !it->is_null()) {
    // As Hugging Face's SequenceBiasLogitsProcessor checks its list form (the only one JSON can hold): a
    // non-empty list of [non-empty list of ids > 0, float] pairs (HF takes 1 for an int, not a float).
    const auto malformed = [&it] {
      config_error(
          "'sequence_bias' must be a non-empty list of [[token ids > 0], bias] pairs with a "
          "floating-point bias, e.g. [[[5], -2.0], [[7, 9], 1.5]]; got " +
          it->dump());
    };
    if (!it->is_array() || it->empty()) malformed();
    std::vector<std::pair<std::vector<int64_t>, double>> bias;
    for (const auto& pair : *it) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_array() || pair[0].empty() ||
          !pair[1].is_number_float()) {
        malformed();
      }
      std::vector<int64_t> sequence;
      for (const auto& id : pair[0]) {
        if (!id.is_number_integer() || id.get<int64_t>() <= 0) malformed();
        token_in_vocabulary("sequence_bias", id.get<int64_t>());
        sequence.push_back(id.get<int64_t>());
      }
      bias.emplace_back(std::move(sequence), pair[1].get<double>());
    }
    c.sequence_bias = std::move(bias);
  }
  if (const auto it = j.find("forced_decoder_ids"); it != j.end() && !it->is_null()) {
    // [[index, token], ...] as Whisper's configs hold them; a null token forces nothing at its index.
    const auto malformed = [&it] {
      config_error("'forced_decoder_ids' must be a list of [index, token id or null] pairs, e.g. [[1, 250004]]; got " +
                   it->dump());
    };
    if (!it->is_array()) malformed();
    std::vector<std::pair<int64_t, std::optional<int64_t>>> forced;
    for (const auto& pair : *it) {
      // The index bounded as a count is: the first suppressed-at-begin step is 1 past the last one.
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !within_config_size(pair[0]) ||
          !(pair[1].is_null() || (pair[1].is_number_integer() && pair[1].get<int64_t>() >= 0))) {
        malformed();
      }
      std::optional<int64_t> token;
      if (!pair[1].is_null()) {
        token = pair[1].get<int64_t>();
        token_in_vocabulary("forced_decoder_ids", *token);
      }
      forced.emplace_back(pair[0].get<int64_t>(), token);
    }
    c.forced_decoder_ids = std::move(forced);
  }
  if (auto v = count("num_return_sequences")) c.num_return_sequences = v;
  // Hugging Face settings we do not implement, with the value that leaves generation as without them
  // (null: any value but null changes it). penalty_alpha 0 is no contrastive search, guidance_scale 1 no
  // guidance.
  static const std::pair<const char*, nlohmann::json> kUnsupported[] = {
      {"penalty_alpha", 0.0},    {"force_words_ids", nullptr}, {"constraints", nullptr},
      {"guidance_scale", 1.0},   {"max_time", nullptr},        {"renormalize_logits", false},
      {"stop_strings", nullptr}, {"top_h", nullptr},           {"watermarking_config", nullptr},
      {"dola_layers", nullptr},
  };
  for (const auto& [key, neutral] : kUnsupported) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null() || *it == neutral) continue;
    const std::string setting = std::string(key) + "=" + it->dump();
    if (std::find(c.unsupported_generation.begin(), c.unsupported_generation.end(), setting) ==
        c.unsupported_generation.end()) {
      c.unsupported_generation.push_back(setting);
    }
  }
}

}  // namespace

// Whether transformers 4's generate() takes config.json's generation keys over generation_config.json:
// where that file was made from config.json ("_from_model_config": true, as every checkpoint saved by
// 4.27-4.40 without its own generation settings has) and config.json sets one of them to other than
// PretrainedConfig's global default or its class's own (BART's forced_eos_token_id 2), generate() builds
// its settings from config.json again (_prepare_generation_config's legacy branch): the way training
// scripts set num_beams or max_length before GenerationConfig existed, and a config.json edited by hand.
// transformers 5 dropped that branch; the checkpoints are transformers 4's.
bool config_json_generation_wins(const nlohmann::json& j, const nlohmann::json& g, bool bart) {
  if (!g.is_object() || g.value("_from_model_config", false) != true) return false;
  // PretrainedConfig._get_global_generation_defaults().
  static const std::pair<const char*, nlohmann::json> kGlobalDefaults[] = {
      {"max_length", 20},
      {"min_length", 0},
      {"do_sample", false},
      {"early_stopping", false},
      {"num_beams", 1},
      {"num_beam_groups", 1},
      {"diversity_penalty", 0.0},
      {"temperature", 1.0},
      {"top_k", 50},
      {"top_p", 1.0},
      {"typical_p", 1.0},
      {"repetition_penalty", 1.0},
      {"length_penalty", 1.0},
      {"no_repeat_ngram_size", 0},
      {"encoder_no_repeat_ngram_size", 0},
      {"bad_words_ids", nullptr},
      {"num_return_sequences", 1},
      {"forced_bos_token_id", nullptr},
      {"forced_eos_token_id", nullptr},
      {"exponential_decay_length_penalty", nullptr},
      {"suppress_tokens", nullptr},
      {"begin_suppress_tokens", nullptr}};
  for (const auto& [key, global] : kGlobalDefaults) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null() || *it == global) continue;
    if (bart && std::string_view(key) == "forced_eos_token_id" && *it == 2) continue;  // BartConfig's default
    return true;
  }
  return false;
}

namespace {

// A token id or a list of them (Hugging Face's eos_token_id and forced_eos_token_id may be either);
// std::nullopt where the key is absent or null.
std::optional<std::vector<int64_t>> ids_of(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) return std::vector<int64_t>{*opt<int64_t>(j, key)};
  std::vector<int64_t> ids;
  for (const auto& id : *it) {
    if (!id.is_number_integer()) {
      config_error("'" + std::string(key) + "' must be an id or a list of ids, got " + it->dump());
    }
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

// eos_token_id (config.json's, or generation_config.json's, which Hugging Face generates with): one id,
// or a list of them, any of which ends a sequence (Hugging Face's generate stops on each, and min_length
// keeps each out). eos_token_id is the list's first, or `keep` where the list holds it (config.json's id,
// read again from generation_config.json); the others become extra_eos_token_ids. An absent key keeps
// what `c` has. null or [] is refused: Hugging Face would then end no sequence before max_length, every
// summary running on past its end to max_new_tokens.
void read_eos(const nlohmann::json& j, ModelConfig& c, std::optional<int64_t> keep) {
  if (!j.contains("eos_token_id")) return;
  const auto ids = ids_of(j, "eos_token_id");
  if (!ids || ids->empty()) {
    config_error("'eos_token_id' is " + j.at("eos_token_id").dump() +
                 ": Hugging Face would then end no summary before max_length (each would run on past its end); "
                 "set the tokenizer's EOS id, or a list of the ids that end a sequence");
  }
  c.eos_token_id = keep && std::find(ids->begin(), ids->end(), *keep) != ids->end() ? *keep : ids->front();
  c.extra_eos_token_ids.clear();
  for (const int64_t id : *ids) {
    if (id != c.eos_token_id &&
        std::find(c.extra_eos_token_ids.begin(), c.extra_eos_token_ids.end(), id) == c.extra_eos_token_ids.end()) {
      c.extra_eos_token_ids.push_back(id);
    }
  }
}

// forced_eos_token_id, one id or a list: Hugging Face's processor gives every listed id the score 0 at the
// last step (greedy search takes the lowest, sampling and beams any). The lowest is forced_eos_token_id,
// the others extra_forced_eos_token_ids. An empty list or null forces nothing.
void read_forced_eos(const nlohmann::json& j, ModelConfig& c) {
  auto ids = ids_of(j, "forced_eos_token_id").value_or(std::vector<int64_t>{});
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  c.forced_eos_token_id = ids.empty() ? std::nullopt : std::optional<int64_t>(ids.front());
  c.extra_forced_eos_token_ids.assign(ids.begin() + (ids.empty() ? 0 : 1), ids.end());
}

// Every special token id the config sets (generation_config.json may set some again) in the vocabulary.
void check_token_ids(const ModelConfig& c) {
  std::vector<std::optional<int64_t>> ids{c.pad_token_id, c.eos_token_id, c.decoder_start_token_id,
                                          c.forced_bos_token_id, c.forced_eos_token_id};
  ids.insert(ids.end(), c.extra_eos_token_ids.begin(), c.extra_eos_token_ids.end());
  ids.insert(ids.end(), c.extra_forced_eos_token_ids.begin(), c.extra_forced_eos_token_ids.end());
  for (const auto& id : ids) {
    if (id && (*id < 0 || *id >= c.vocab_size)) {
      config_error("special token id " + std::to_string(*id) + " outside the vocabulary");
    }
  }
}

std::string supported_activations() {
  std::string names;
  for (const char* a : kActivations) names += std::string(names.empty() ? "" : ", ") + a;
  return names;
}

// T5Config's derivation (configuration_t5.py): feed_forward_proj is "ACT" or "gated-ACT", where
// "gated-gelu" means gelu_new (kept so for old checkpoints) but plain "gelu" the exact (erf) GELU. A
// config.json's own dense_act_fn and is_gated_act (newer transformers save them) win, since
// PretrainedConfig sets the keys left over after T5Config's own last.
void parse_t5_feed_forward(const nlohmann::json& j, const std::string& type, ModelConfig& c) {
  const auto ff = opt<std::string>(j, "feed_forward_proj").value_or(type == "mt5" ? "gated-gelu" : "relu");
  const auto dash = ff.find('-');
  const bool gated = dash != std::string::npos && ff.compare(0, dash, "gated") == 0;
  if (dash != std::string::npos && (!gated || ff.find('-', dash + 1) != std::string::npos)) {
    config_error("'feed_forward_proj' is '" + ff + "'; it must be ACT or gated-ACT (e.g. relu, gated-gelu)");
  }
  c.gated_ffn = gated;
  c.activation = ff == "gated-gelu" ? "gelu_new" : ff.substr(gated ? dash + 1 : 0);
  const auto dense_act_fn = opt<std::string>(j, "dense_act_fn");
  if (dense_act_fn) c.activation = *dense_act_fn;
  if (const auto is_gated = opt<bool>(j, "is_gated_act")) c.gated_ffn = *is_gated;
  if (!is_supported_activation(c.activation)) {
    config_error((dense_act_fn ? "dense_act_fn '" + *dense_act_fn + "'" : "feed_forward_proj '" + ff + "'") +
                 ": activation '" + c.activation + "' is not supported (supported: " + supported_activations() + ")");
  }
}

// Keys of transformers 3's BartConfig, when mBART, Marian and Blenderbot-90M checkpoints were "bart" too.
// Today's BartModel ignores them and computes plain BART (post-LN, layernorm_embedding, learned positions,
// no final stack norm), and so do we: any other value means weights trained for another network.
void refuse_legacy_bart_variants(const nlohmann::json& j) {
  struct Legacy {
    const char* key;
    bool bart;  // plain BART's value
    const char* what;
  };
  static constexpr Legacy kLegacy[] = {
      {"normalize_before", false, "mBART-style pre-LN"},
      {"add_final_layer_norm", false, "a layer norm after each stack, as mBART"},
      {"normalize_embedding", true, "layernorm_embedding; false: none"},
      {"static_position_embeddings", false, "sinusoidal positions, as Marian"},
      {"do_blenderbot_90_layernorm", false, "Blenderbot-90M's layer norms"},
  };
  for (const auto& l : kLegacy) {
    if (opt<bool>(j, l.key).value_or(l.bart) != l.bart) {
      config_error(std::string("'") + l.key + "' is " + (l.bart ? "false" : "true") + " (" + l.what +
                   "); only plain BART's value (" + (l.bart ? "true" : "false") +
                   ") is supported: is this an mBART, Marian or Blenderbot checkpoint?");
    }
  }
}

// PretrainedConfig fields that change which weights exist: Hugging Face prunes heads (T5) or fails (BART),
// ties the decoder's weights to the encoder's, or reads quantized weights through a quantization library
// (int8 and packed 4-bit matrices beside their scales, which were refused as dozens of wrong types);
// the weights here would not fit either way.
void refuse_weight_layout_changes(const nlohmann::json& j) {
  if (const auto it = j.find("quantization_config"); it != j.end() && !it->is_null()) {
    const auto method = it->is_object() ? it->find("quant_method") : it->end();
    config_error("'quantization_config' says the weights are quantized" +
                 (it->is_object() && method != it->end() && method->is_string()
                      ? " (quant_method '" + method->get<std::string>() + "')"
                      : std::string()) +
                 ", which is not supported: use the model's unquantized checkpoint (float32, float16 or bfloat16 "
                 "weights)");
  }
  if (const auto it = j.find("pruned_heads"); it != j.end() && !it->is_null() && !it->empty()) {
    config_error("'pruned_heads' is " + it->dump() + "; models with pruned attention heads are not supported");
  }
  if (opt<bool>(j, "tie_encoder_decoder").value_or(false)) {
    config_error("'tie_encoder_decoder' is true (decoder weights shared with the encoder's); not supported");
  }
}

// The major version of the transformers that saved config.json ("transformers_version"), 0 where unsaid.
int transformers_major_version(const nlohmann::json& j) {
  const auto version = j.find("transformers_version");
  if (version == j.end() || !version->is_string()) return 0;
  const std::string v = version->get<std::string>();
  const auto digits = std::find_if(v.begin(), v.end(), [](char ch) { return ch < '0' || ch > '9'; });
  if (digits == v.begin() || digits - v.begin() > 4) return 0;
  return std::stoi(std::string(v.begin(), digits));
}

// Whether T5 scales its decoder's output by d_model^-0.5 before the head. transformers 4 did so where
// tie_word_embeddings was true; transformers 5 writes tie_word_embeddings true for every T5 and mT5 (the
// head a checkpoint stores is still its own) and says scale_decoder_outputs instead, which wins where it
// is written. Its mT5 scales nothing unless the key says so.
void read_output_scaling(const nlohmann::json& j, const std::string& type, ModelConfig& c) {
  if (const auto scale = opt<bool>(j, "scale_decoder_outputs")) {
    c.scale_decoder_outputs = *scale;
  } else if (type == "mt5" && transformers_major_version(j) >= 5) {
    c.scale_decoder_outputs = false;
  }
}

}  // namespace

bool is_supported_activation(const std::string& name) {
  return std::find_if(std::begin(kActivations), std::end(kActivations), [&](const char* a) { return name == a; }) !=
         std::end(kActivations);
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const nlohmann::json* generation) {
  if (!j.is_object()) config_error("top level must be a JSON object");
  ModelConfig c;
  const auto type = opt<std::string>(j, "model_type").value_or("");
  if (type.empty()) config_error("no 'model_type' (supported: bart, t5, mt5)");
  if (type == "bart") {
    c.arch = Architecture::kBart;
  } else if (type == "t5" || type == "mt5") {
    c.arch = Architecture::kT5;
  } else {
    config_error("model_type '" + type + "' is not supported (supported: bart, t5, mt5)");
  }
  c.model_type = type;
  c.vocab_size = req<int64_t>(j, "vocab_size");
  c.d_model = req<int64_t>(j, "d_model");
  const bool bart = c.arch == Architecture::kBart;
  // BartConfig's and T5Config's defaults where a key is absent; an explicit null is no id.
  c.pad_token_id = opt<int64_t>(j, "pad_token_id").value_or(bart ? 1 : 0);
  c.eos_token_id = bart ? 2 : 1;
  read_eos(j, c, std::nullopt);
  c.bos_token_id = j.contains("bos_token_id") || !bart ? opt<int64_t>(j, "bos_token_id") : std::optional<int64_t>(0);
  if (!j.contains("decoder_start_token_id")) {
    // BartConfig's default is 2 itself, not eos_token_id. T5Config has none: Hugging Face's generate then
    // starts with bos_token_id, and cannot generate without one; T5 starts with the pad id, as every T5
    // checkpoint says.
    c.decoder_start_token_id = bart ? 2 : c.bos_token_id.value_or(c.pad_token_id);
  } else if (const auto start = opt<int64_t>(j, "decoder_start_token_id")) {
    c.decoder_start_token_id = *start;
  } else {  // null: Hugging Face's generate starts with bos_token_id
    c.decoder_start_token_id = c.bos_token_id.value_or(bart ? c.eos_token_id : c.pad_token_id);
  }
  c.forced_bos_token_id = opt<int64_t>(j, "forced_bos_token_id");
  // BartConfig forces token 2 at max_length unless the key says otherwise (null: nothing forced).
  if (j.contains("forced_eos_token_id") || !bart) {
    read_forced_eos(j, c);
  } else {
    c.forced_eos_token_id = 2;
  }
  // transformers < 4.2's BART-CNN flag, which BartConfig still turns into forced_bos_token_id = bos.
  if (bart && !c.forced_bos_token_id && opt<bool>(j, "force_bos_token_to_be_generated").value_or(false)) {
    c.forced_bos_token_id = c.bos_token_id;
  }
  refuse_weight_layout_changes(j);
  // Hugging Face's MT5Config unties the LM head by default, T5Config and BartConfig tie it.
  c.tie_word_embeddings = opt<bool>(j, "tie_word_embeddings").value_or(type != "mt5");

  if (c.arch == Architecture::kBart) {
    const auto enc_heads = req<int64_t>(j, "encoder_attention_heads");
    const auto dec_heads = opt<int64_t>(j, "decoder_attention_heads").value_or(enc_heads);
    if (enc_heads != dec_heads) config_error("encoder and decoder attention heads differ; not supported");
    c.num_heads = enc_heads;
    require_positive(c.num_heads, "encoder_attention_heads");
    if (c.d_model % c.num_heads != 0) config_error("d_model must be divisible by the number of heads");
    c.head_dim = c.d_model / c.num_heads;
    c.d_ff = req<int64_t>(j, "encoder_ffn_dim");
    if (opt<int64_t>(j, "decoder_ffn_dim").value_or(c.d_ff) != c.d_ff)
      config_error("encoder_ffn_dim != decoder_ffn_dim; not supported");
    c.encoder_layers = req<int64_t>(j, "encoder_layers");
    c.decoder_layers = req<int64_t>(j, "decoder_layers");
    c.max_position_embeddings = req<int64_t>(j, "max_position_embeddings");
    require_positive(c.max_position_embeddings, "max_position_embeddings");
    c.scale_embedding = opt<bool>(j, "scale_embedding").value_or(false);
    refuse_legacy_bart_variants(j);
    c.activation = opt<std::string>(j, "activation_function").value_or("gelu");
    if (!is_supported_activation(c.activation)) {
      config_error("activation_function '" + c.activation +
                   "' is not supported (supported: " + supported_activations() + ")");
    }
    c.dropout = {opt<double>(j, "dropout").value_or(0.1), opt<double>(j, "attention_dropout").value_or(0.0),
                 opt<double>(j, "activation_dropout").value_or(0.0)};
    c.layer_norm_eps = 1e-5;
    c.max_input_tokens = c.max_position_embeddings;
  } else {
    c.num_heads = req<int64_t>(j, "num_heads");
    c.head_dim = req<int64_t>(j, "d_kv");
    c.d_ff = req<int64_t>(j, "d_ff");
    c.encoder_layers = req<int64_t>(j, "num_layers");
    c.decoder_layers = opt<int64_t>(j, "num_decoder_layers").value_or(c.encoder_layers);
    c.layer_norm_eps = opt<double>(j, "layer_norm_epsilon").value_or(1e-6);
    c.relative_attention_num_buckets = opt<int64_t>(j, "relative_attention_num_buckets").value_or(32);
    c.relative_attention_max_distance = opt<int64_t>(j, "relative_attention_max_distance").value_or(128);
    require_positive(c.num_heads, "num_heads");
    require_positive(c.head_dim, "d_kv");
    // Each direction's half of the buckets starts with exact distances: at least one bucket each.
    if (c.relative_attention_num_buckets < 4) {
      config_error("'relative_attention_num_buckets' must be at least 4, got " +
                   std::to_string(c.relative_attention_num_buckets) + " (T5 uses 32)");
    }
    require_positive(c.relative_attention_num_buckets, "relative_attention_num_buckets");
    // Past the exact buckets, distances are bucketed by log(distance / exact) / log(max_distance / exact):
    // a max_distance within the exact range divides by zero or less.
    if (c.relative_attention_max_distance <= c.relative_attention_num_buckets / 2) {
      config_error("'relative_attention_max_distance' must exceed half of relative_attention_num_buckets (" +
                   std::to_string(c.relative_attention_num_buckets / 2) + "), got " +
                   std::to_string(c.relative_attention_max_distance) + " (T5 uses 128 with 32 buckets)");
    }
    require_positive(c.relative_attention_max_distance, "relative_attention_max_distance");
    if (!(c.layer_norm_eps > 0) || !std::isfinite(c.layer_norm_eps)) {
      config_error("'layer_norm_epsilon' must be a small positive number (T5 uses 1e-6), got " +
                   std::to_string(c.layer_norm_eps));
    }
    parse_t5_feed_forward(j, type, c);
    read_output_scaling(j, type, c);
    const auto n_positions = opt<int64_t>(j, "n_positions");
    if (n_positions) require_positive(*n_positions, "n_positions");
    c.max_input_tokens = n_positions.value_or(16384);
    c.max_input_tokens_is_fallback = !n_positions.has_value();
    const double rate = opt<double>(j, "dropout_rate").value_or(0.1);
    c.dropout = {rate, rate, rate};
  }
  for (const double p : {c.dropout.hidden, c.dropout.attention, c.dropout.activation}) {
    if (!(p >= 0.0 && p < 1.0)) config_error("dropout rates must be in [0, 1), got " + std::to_string(p));
  }
  require_positive(c.vocab_size, "vocab_size");
  require_positive(c.d_model, "d_model");
  require_positive(c.head_dim, "head_dim");
  require_positive(c.d_ff, "d_ff");
  require_positive(c.encoder_layers, "encoder layers");
  require_positive(c.decoder_layers, "decoder layers");
  check_token_ids(c);

  // Hugging Face generates with generation_config.json where the checkpoint has one (newer
  // transformers save the defaults only there), else with config.json's keys, which also win over a
  // generation_config.json made from them that they no longer match (config_json_generation_wins).
  NewTokenLengths new_tokens;
  if (generation && !config_json_generation_wins(j, *generation, bart)) {
    const auto& g = *generation;
    try {
      if (!g.is_object()) config_error("top level must be a JSON object");
      if (auto v = opt<int64_t>(g, "decoder_start_token_id"); v && *v != c.decoder_start_token_id) {
        c.config_decoder_start_token_id = c.decoder_start_token_id;
        c.decoder_start_token_id = *v;
      }
      read_eos(g, c, c.eos_token_id);
      c.forced_bos_token_id = opt<int64_t>(g, "forced_bos_token_id");
      read_forced_eos(g, c);
      read_generation_defaults(g, c, new_tokens);
      check_token_ids(c);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("generation_config.json" + std::string(e.what()).substr(kConfigFile.size()));
    }
  } else {
    read_generation_defaults(j, c, new_tokens);
  }
  // PretrainedConfig.prefix, which Hugging Face's summarization pipeline puts before every document (BART-CNN
  // and DistilBART-CNN checkpoints set " "); the task's own, null included, replaces it as the pipeline's
  // config.update does.
  c.summarization_prefix = opt<std::string>(j, "prefix");
  if (const auto tsp = j.find("task_specific_params"); tsp != j.end() && tsp->is_object()) {
    if (const auto s = tsp->find("summarization"); s != tsp->end() && s->is_object()) {
      if (s->contains("prefix")) c.summarization_prefix = opt<std::string>(*s, "prefix");
      read_generation_defaults(*s, c, new_tokens);  // as HF's summarization pipeline applies them
    }
  }
  parse_srformer(j, c);
  return c;
}

ModelConfig ModelConfig::load(const std::filesystem::path& config_json) {
  if (!std::filesystem::exists(config_json)) {
    // A PEFT adapter (a LoRA fine-tune of flan-t5, say) holds only changes to its base model's weights.
    const auto adapter = config_json.parent_path() / "adapter_config.json";
    if (std::filesystem::exists(adapter)) {
      std::string base;
      try {
        const auto a = read_json_file<std::invalid_argument>(adapter, "a JSON file");
        if (a.is_object() && a.contains("base_model_name_or_path") && a["base_model_name_or_path"].is_string()) {
          base = ", base model " + a["base_model_name_or_path"].get<std::string>();
        }
      } catch (const std::invalid_argument&) {
        // the message below stands without the base model's name
      }
      throw std::runtime_error(config_json.parent_path().string() + " holds a PEFT adapter (adapter_config.json" +
                               base +
                               "), not a model: merge it into its base model once with Python (peft: "
                               "PeftModel.from_pretrained(base, DIR).merge_and_unload().save_pretrained(OUT), and the "
                               "base's tokenizer saved to OUT) and serve OUT");
    }
    throw std::runtime_error("cannot open " + config_json.string() + ": is this a Hugging Face model directory?");
  }
  const auto j = read_json_file<std::invalid_argument>(config_json, "the model's JSON configuration");
  // Hugging Face generates with the defaults in generation_config.json where the directory has one.
  const auto generation_json = config_json.parent_path() / "generation_config.json";
  std::optional<nlohmann::json> generation;
  if (std::filesystem::exists(generation_json)) {
    generation = read_json_file<std::invalid_argument>(generation_json, "a JSON file or absent");
  }
  try {
    return from_json(j, generation ? &*generation : nullptr);
  } catch (const std::invalid_argument& e) {
    // The message starts with the file's name (config.json or generation_config.json).
    const auto dir = config_json.parent_path();
    throw std::invalid_argument((dir.empty() ? std::string() : dir.string() + "/") + e.what());
  }
}

std::string ModelConfig::type_name() const { return model_type.empty() ? to_string(arch) : model_type; }

nlohmann::json ModelConfig::to_json(const nlohmann::json* original) const {
  nlohmann::json j = original != nullptr ? *original : nlohmann::json::object();
  j["model_type"] = type_name();
  j["vocab_size"] = vocab_size;
  j["d_model"] = d_model;
  j["pad_token_id"] = pad_token_id;
  j["tie_word_embeddings"] = tie_word_embeddings;
  // Written even when unset: an absent key means BartConfig's default (bos 0, forced_eos 2) on reading.
  const auto id_or_null = [](const std::optional<int64_t>& id) { return id ? nlohmann::json(*id) : nlohmann::json(); };
  j["bos_token_id"] = id_or_null(bos_token_id);
  // The ids a generation_config.json may set again: `original`'s own stay as they are (the model's
  // generation_config.json is saved beside it). Written from generation_config.json's, they changed
  // config.json, and a forced id there made config.json's generation keys win over generation_config.json's
  // one made from it (config_json_generation_wins) when the model was read again.
  if (original == nullptr) {
    // A list where the checkpoint named several (its first or config.json's id first, as read).
    auto eos = nlohmann::json::array({eos_token_id});
    for (const int64_t id : extra_eos_token_ids) eos.push_back(id);
    j["eos_token_id"] = eos.size() == 1 ? eos.front() : eos;
    j["decoder_start_token_id"] = training_decoder_start();
    j["forced_bos_token_id"] = id_or_null(forced_bos_token_id);
    if (extra_forced_eos_token_ids.empty()) {
      j["forced_eos_token_id"] = id_or_null(forced_eos_token_id);
    } else {
      auto forced = nlohmann::json::array({*forced_eos_token_id});
      for (const int64_t id : extra_forced_eos_token_ids) forced.push_back(id);
      j["forced_eos_token_id"] = forced;
    }
  }
  if (arch == Architecture::kBart) {
    j["encoder_attention_heads"] = num_heads;
    j["decoder_attention_heads"] = num_heads;
    j["encoder_ffn_dim"] = d_ff;
    j["decoder_ffn_dim"] = d_ff;
    j["encoder_layers"] = encoder_layers;
    j["decoder_layers"] = decoder_layers;
    j["max_position_embeddings"] = max_position_embeddings;
    j["scale_embedding"] = scale_embedding;
    j["activation_function"] = activation;
    j["dropout"] = dropout.hidden;
    j["attention_dropout"] = dropout.attention;
    j["activation_dropout"] = dropout.activation;
  } else {
    j["num_heads"] = num_heads;
    j["d_kv"] = head_dim;
    j["d_ff"] = d_ff;
    j["num_layers"] = encoder_layers;
    j["num_decoder_layers"] = decoder_layers;
    j["layer_norm_epsilon"] = layer_norm_eps;
    j["relative_attention_num_buckets"] = relative_attention_num_buckets;
    j["relative_attention_max_distance"] = relative_attention_max_distance;
    j["dropout_rate"] = dropout.hidden;
    // dense_act_fn and is_gated_act as newer transformers write them: they say what feed_forward_proj
    // cannot ("gated-gelu" reads as gelu_new).
    j["feed_forward_proj"] =
        gated_ffn && activation == "gelu_new" ? "gated-gelu" : (gated_ffn ? "gated-" : "") + activation;
    j["dense_act_fn"] = activation;
    j["is_gated_act"] = gated_ffn;
    if (scale_decoder_outputs) {
      j["scale_decoder_outputs"] = *scale_decoder_outputs;
    } else {
      j.erase("scale_decoder_outputs");
    }
  }
  if (srformer.cross_attention != CrossAttentionKind::kFull ||
      (original != nullptr && original->contains("srformer"))) {
    nlohmann::json s;
    s["cross_attention"] = to_string(srformer.cross_attention);
    s["segment_size"] = srformer.segmented() ? nlohmann::json(srformer.segment_size) : nlohmann::json(nullptr);
    s["kv_clamp"] = srformer.kv_clamp ? nlohmann::json(*srformer.kv_clamp) : nlohmann::json(nullptr);
    s["raf_init"] = {{"threshold", srformer.raf_init_threshold}, {"leak", srformer.raf_init_leak}};
    if (srformer.raf_init_weight_scale != 1.0) s["raf_init"]["weight_scale"] = srformer.raf_init_weight_scale;
    if (srformer.expected_length) s["expected_length"] = *srformer.expected_length;
    j["srformer"] = s;
  }
  return j;
}

}  // namespace srformer
