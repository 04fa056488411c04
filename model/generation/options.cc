#include "model/generation/options.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace srformer {
namespace {

[[noreturn]] void reject(const std::string& what) {
  throw std::invalid_argument("invalid generation options: " + what);
}

// Doubles as a person writes them (1e-38, 0.7, nan), where std::to_string prints 0.000000 for 1e-38.
std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// A given value as it was sent: a float32 field's (or a flag read as one) shortest form, 0.7 rather than
// 0.699999988; other doubles likewise.
std::string given_number(double x) {
  const auto f = static_cast<float>(x);
  return static_cast<double>(f) == x ? fmt::format("{}", f) : fmt::format("{}", x);
}

}  // namespace

std::vector<int64_t> eos_token_ids(const GenerationOptions& o) {
  std::vector<int64_t> ids{o.eos_token_id};
  ids.insert(ids.end(), o.extra_eos_token_ids.begin(), o.extra_eos_token_ids.end());
  return ids;
}

std::vector<int64_t> forced_eos_token_ids(const GenerationOptions& o) {
  if (!o.forced_eos_token_id) return {};
  std::vector<int64_t> ids{*o.forced_eos_token_id};
  ids.insert(ids.end(), o.extra_forced_eos_token_ids.begin(), o.extra_forced_eos_token_ids.end());
  return ids;
}

GenerationOptions with_encoder_input(GenerationOptions options, const std::vector<int64_t>& input_ids) {
  if (reads_encoder_input(options)) options.encoder_input_ids = input_ids;
  return options;
}

void validate(const GenerationOptions& o) {
  using std::to_string;
  if (o.max_new_tokens < 1 || o.max_new_tokens > kMaxNewTokensLimit) {
    reject("max_new_tokens is " + to_string(o.max_new_tokens) + "; set it between 1 and " +
           to_string(kMaxNewTokensLimit));
  }
  if (o.decoder_positions < 0) reject("decoder_positions is " + to_string(o.decoder_positions) + "; it must be >= 0");
  if (o.decoder_positions > 0 && o.max_new_tokens > o.decoder_positions) {
    reject("max_new_tokens is " + to_string(o.max_new_tokens) + " but this model has " +
           to_string(o.decoder_positions) + " decoder positions (max_position_embeddings); set it to at most " +
           to_string(o.decoder_positions));
  }
  // The tokenizer must have an EOS id (one of a list may lie past it: it is never generated, as no id there is).
  const auto eos = eos_token_ids(o);
  if (o.vocab_limit < 0 ||
      (o.vocab_limit > 0 && std::none_of(eos.begin(), eos.end(), [&o](int64_t id) { return id < o.vocab_limit; }))) {
    std::string ids;
    for (const int64_t id : eos) ids += (ids.empty() ? "" : ", ") + to_string(id);
    reject("vocab_limit is " + to_string(o.vocab_limit) +
           (eos.size() > 1 ? " but the EOS ids are " : " but EOS is id ") + ids +
           "; the tokenizer does not match the model");
  }
  if (o.min_new_tokens < 0 || o.min_new_tokens > o.max_new_tokens) {
    reject("min_new_tokens is " + to_string(o.min_new_tokens) + "; set it between 0 and max_new_tokens (" +
           to_string(o.max_new_tokens) + ")");
  }
  if (o.num_beams < 1 || o.num_beams > kMaxNumBeams) {
    reject("num_beams is " + to_string(o.num_beams) + "; set it between 1 and " + to_string(kMaxNumBeams));
  }
  if (draws_independent_samples(o)) {  // one row per sample, as many as beam search may have beams
    if (o.num_return_sequences < 1 || o.num_return_sequences > kMaxNumBeams) {
      reject("num_return_sequences is " + to_string(o.num_return_sequences) + "; sampling draws between 1 and " +
             to_string(kMaxNumBeams) + " sequences");
    }
  } else if (o.num_return_sequences < 1 || o.num_return_sequences > o.num_beams) {
    reject("num_return_sequences is " + to_string(o.num_return_sequences) + "; set it between 1 and num_beams (" +
           to_string(o.num_beams) + ")" +
           (o.num_beams == 1 ? "; greedy search returns one sequence (do_sample=true draws several)" : ""));
  }
  // Group beam search, with Hugging Face's rules; with one beam (greedy search, sampling) HF's generate() runs
  // no group search, and a checkpoint's groups must not refuse those requests.
  if (!(o.diversity_penalty >= 0.0 && std::isfinite(o.diversity_penalty))) {
    reject("diversity_penalty is " + number(o.diversity_penalty) + "; set it >= 0 (and finite; 0 disables it)");
  }
  if (o.num_beam_groups < 1) {
    reject("num_beam_groups is " + to_string(o.num_beam_groups) + "; set it between 1 and num_beams (1 is " +
           "ordinary beam search)");
  }
  if (o.num_beams > 1) {
    if (o.num_beam_groups > o.num_beams || o.num_beams % o.num_beam_groups != 0) {
      reject("num_beam_groups is " + to_string(o.num_beam_groups) + " but num_beams (" + to_string(o.num_beams) +
             ") must be a multiple of it; set num_beams to a multiple of num_beam_groups, or num_beam_groups to 1");
    }
    if (o.num_beam_groups > 1 && o.do_sample) {
      reject("num_beam_groups is " + to_string(o.num_beam_groups) +
             " with do_sample true; group beam search does not sample: set do_sample to false, or num_beam_groups "
             "to 1");
    }
    if (o.diversity_penalty > 0.0 && o.num_beam_groups == 1) {
      reject("diversity_penalty is " + number(o.diversity_penalty) +
             " with num_beam_groups 1; it acts between groups of beams: set num_beam_groups > 1 (dividing " +
             "num_beams), or diversity_penalty to 0");
    }
  }
  // Only beams are scored with length_penalty; greedy search and sampling ignore it, as Hugging Face does
  // (a checkpoint's length_penalty 40 must not refuse the requests without beams).
  if (o.num_beams > 1 && !(std::abs(o.length_penalty) <= kMaxLengthPenalty)) {
    reject("length_penalty is " + number(o.length_penalty) + "; set it between -" + number(kMaxLengthPenalty) +
           " and " + number(kMaxLengthPenalty) + " when num_beams > 1");
  }
  // Logits are divided by the temperature (and a repeated token's by the penalty): at 1e-38 any logit
  // over ~3.4 overflows fp32 and sampling finds no finite probability; from 1e-4 logits stay finite up
  // to ~1e34, and sampling at 1e-4 is already greedy in effect.
  // As float32 rounds it (the API's fields are float: 1e-4 arrives as 9.99999975e-5, and must pass).
  constexpr double kMinDivisor = static_cast<double>(1e-4f);
  if (o.do_sample && !(o.temperature >= kMinDivisor && std::isfinite(o.temperature))) {
    reject("temperature is " + number(o.temperature) +
           "; it must be at least 1e-4 (and finite) when do_sample is true (do_sample=false decodes greedily)");
  }
  // Like the temperature, top_p and top_k only act when sampling: greedy and beam search ignore them, as
  // Hugging Face does (a checkpoint's top_p 1.5 must not refuse the requests that do not sample). Its
  // TopPLogitsWarper takes 0: every token whose ascending cumulative probability is at most 1 goes, which
  // leaves the min_tokens_to_keep likeliest (apply_top_p does the same).
  if (o.do_sample && !(o.top_p >= 0.0 && o.top_p <= 1.0)) {
    reject("top_p is " + number(o.top_p) +
           "; set it in [0, 1] (1 disables nucleus filtering, 0 keeps only the likeliest token) when do_sample is "
           "true");
  }
  // Hugging Face's warpers refuse these (min_p outside [0, 1], typical_p <= 0); typical_p >= 1 and cutoffs
  // outside (0, 1) it leaves off.
  if (o.do_sample && !(o.min_p >= 0.0 && o.min_p <= 1.0)) {
    reject("min_p is " + number(o.min_p) + "; set it in [0, 1] (0 disables it) when do_sample is true");
  }
  if (o.do_sample && !(o.typical_p > 0.0)) {
    reject("typical_p is " + number(o.typical_p) + "; set it in (0, 1] (1 disables it) when do_sample is true");
  }
  if (o.do_sample && (std::isnan(o.epsilon_cutoff) || std::isnan(o.eta_cutoff))) {
    reject("epsilon_cutoff and eta_cutoff must be numbers (0 disables them)");
  }
  if (o.do_sample && o.top_k < 0) {
    reject("top_k is " + to_string(o.top_k) + "; set it >= 0 (0 disables top-k filtering) when do_sample is true");
  }
  if (!(o.repetition_penalty >= kMinDivisor && std::isfinite(o.repetition_penalty))) {
    reject("repetition_penalty is " + number(o.repetition_penalty) + "; set it between 1e-4 and a finite number " +
           "(1 disables it)");
  }
  if (o.no_repeat_ngram_size < 0) {
    reject("no_repeat_ngram_size is " + to_string(o.no_repeat_ngram_size) + "; set it >= 0 (0 disables it)");
  }
  if (!(o.encoder_repetition_penalty >= kMinDivisor && std::isfinite(o.encoder_repetition_penalty))) {
    reject("encoder_repetition_penalty is " + number(o.encoder_repetition_penalty) +
           "; set it between 1e-4 and a finite number (1 disables it)");
  }
  if (o.encoder_no_repeat_ngram_size < 0) {
    reject("encoder_no_repeat_ngram_size is " + to_string(o.encoder_no_repeat_ngram_size) +
           "; set it >= 0 (0 disables it)");
  }
  for (size_t i = 0; i < o.bad_words_ids.size(); ++i) {
    const auto& words = o.bad_words_ids[i];
    if (words.empty()) reject("bad_words_ids[" + to_string(i) + "] is empty; each entry must name at least one token");
    for (const int64_t id : words) {
      if (id < 0) reject("bad_words_ids[" + to_string(i) + "] holds " + to_string(id) + "; token ids must be >= 0");
    }
  }
  if (o.exponential_decay_length_penalty && !std::isfinite(o.exponential_decay_length_penalty->second)) {
    reject("exponential_decay_length_penalty's factor is " + number(o.exponential_decay_length_penalty->second) +
           "; it must be a finite number (1 leaves EOS as it is)");
  }
  for (size_t i = 0; i < o.sequence_bias.size(); ++i) {
    const auto& [sequence, bias] = o.sequence_bias[i];
    // As Hugging Face's SequenceBiasLogitsProcessor checks its list form: ids > 0, a float bias.
    if (sequence.empty()) reject("sequence_bias[" + to_string(i) + "] has no tokens; name at least one");
    for (const int64_t id : sequence) {
      if (id <= 0) reject("sequence_bias[" + to_string(i) + "] holds " + to_string(id) + "; token ids must be > 0");
    }
    if (std::isnan(bias)) reject("sequence_bias[" + to_string(i) + "]'s bias is not a number");
  }
  for (const auto& [index, token] : o.forced_decoder_ids) {
    if (token && *token < 0) {
      reject("forced_decoder_ids force " + to_string(*token) + " at " + to_string(index) + "; token ids must be >= 0");
    }
  }
  for (const auto* list : {&o.suppress_tokens, &o.begin_suppress_tokens}) {
    for (const int64_t id : *list) {
      if (id < 0) {
        reject(std::string(list == &o.suppress_tokens ? "suppress_tokens" : "begin_suppress_tokens") + " hold " +
               to_string(id) + "; token ids must be >= 0");
      }
    }
  }
  for (const int64_t id : o.encoder_input_ids) {
    if (id < 0) reject("encoder_input_ids hold " + to_string(id) + "; token ids must be >= 0");
  }
  const auto check_token = [](const char* name, int64_t id) {
    if (id < 0) reject(std::string(name) + " is " + to_string(id) + "; token ids must be >= 0");
  };
  check_token("decoder_start_token_id", o.decoder_start_token_id);
  for (const int64_t eos : eos_token_ids(o)) check_token("eos_token_id", eos);
  check_token("pad_token_id", o.pad_token_id);
  if (o.forced_bos_token_id) check_token("forced_bos_token_id", *o.forced_bos_token_id);
  if (!o.forced_eos_token_id && !o.extra_forced_eos_token_ids.empty()) {
    reject("extra_forced_eos_token_ids are set without forced_eos_token_id");
  }
  for (const int64_t forced : forced_eos_token_ids(o)) check_token("forced_eos_token_id", forced);
}

std::string field_name(std::string_view field) { return std::string(field); }

std::string flag_name(std::string_view field) {
  std::string flag = "--" + std::string(field);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

void check_given_options(const GivenOptions& g, OptionName name) {
  const auto refuse = [name](std::string_view field, const std::string& range, const std::string& value) {
    throw std::invalid_argument(name(field) + " must be " + range + ", got " + value);
  };
  const auto in_unit = [&refuse](std::string_view field, const std::optional<double>& v, bool low_closed,
                                 bool high_closed, const char* off) {
    if (v && !((low_closed ? *v >= 0.0 : *v > 0.0) && (high_closed ? *v <= 1.0 : *v < 1.0))) {
      refuse(field,
             std::string("in ") + (low_closed ? "[" : "(") + "0, 1" + (high_closed ? "]" : ")") + " (" + off + ")",
             given_number(*v));
    }
  };
  const auto count = [&refuse](std::string_view field, const std::optional<int64_t>& v, const char* off) {
    if (v && *v < 0) refuse(field, std::string(">= 0 (") + off + ")", std::to_string(*v));
  };
  if (const auto& v = g.length_penalty; v && !(std::abs(*v) <= kMaxLengthPenalty)) {
    // A hypothesis scores sum(logprob) / length^penalty: at 40 every score rounds to -0, at -1e38 to -inf.
    refuse("length_penalty",
           "between -" + given_number(kMaxLengthPenalty) + " and " + given_number(kMaxLengthPenalty) +
               " (1 scores by mean log-probability, > 1 favours longer summaries)",
           given_number(*v));
  }
  // Its lower bound when sampling (1e-4) is validate()'s.
  if (g.temperature && !std::isfinite(*g.temperature)) {
    refuse("temperature", "a finite number", given_number(*g.temperature));
  }
  count("top_k", g.top_k, "0 disables it");
  in_unit("top_p", g.top_p, true, true, "1 disables it; 0 keeps only the likeliest token");  // as Hugging Face
  // Hugging Face's further warpers: its own refuse min_p outside [0, 1] and typical_p <= 0, and leave
  // typical_p >= 1 and cutoffs outside (0, 1) off; a value given out of these ranges is a mistake.
  in_unit("min_p", g.min_p, true, true, "0 disables it");
  in_unit("typical_p", g.typical_p, false, true, "1 disables it");
  in_unit("epsilon_cutoff", g.epsilon_cutoff, true, false, "0 disables it; Hugging Face suggests 3e-4 to 9e-4");
  in_unit("eta_cutoff", g.eta_cutoff, true, false, "0 disables it; Hugging Face suggests 3e-4 to 2e-3");
  count("no_repeat_ngram_size", g.no_repeat_ngram_size, "0 disables it");
  count("encoder_no_repeat_ngram_size", g.encoder_no_repeat_ngram_size, "0 disables it");
  // How groups and beams fit together (and sampling) is validate()'s: a request may take num_beams from the model.
  if (const auto& v = g.num_beam_groups; v && *v < 1) {
    refuse("num_beam_groups", ">= 1 (1 is ordinary beam search)", std::to_string(*v));
  }
  if (const auto& v = g.diversity_penalty; v && !(std::isfinite(*v) && *v >= 0.0)) {
    refuse("diversity_penalty", "a finite number >= 0 (0 disables it)", given_number(*v));
  }
}

}  // namespace srformer
