#include "tools/generation_flags.h"

#include <algorithm>

#include "model/generation/bad_words.h"
#include "model/generation/generate.h"
#include "tools/expected_length_flag.h"

namespace srformer::tools {

bool GenerationFlags::read(ArgReader& r) {
  const auto& a = r.arg();
  // The counts' least values are refused here, before the model loads, in the words eval used for them
  // (validate() named the field: "max_new_tokens is 0"); their upper bounds depend on the model.
  if (a == "--max-new-tokens") {
    max_new = r.int32_value(1);
  } else if (a == "--min-new-tokens") {
    min_new = r.int32_value(0);
  } else if (a == "--num-beams") {
    beams = r.int32_value(1);
  } else if (a == "--num-beam-groups") {
    groups = r.int32_value();
  } else if (a == "--diversity-penalty") {
    diversity = r.float32_value();
  } else if (a == "--num-return-sequences") {
    returned = r.int32_value(1);
  } else if (a == "--length-penalty") {
    length_penalty = r.float32_value();
  } else if (a == "--early-stopping") {
    early = EarlyStopping::kWhenFull;
  } else if (a == "--no-early-stopping") {
    early = EarlyStopping::kHeuristic;
  } else if (a == "--early-stopping-never") {
    early = EarlyStopping::kNever;
  } else if (a == "--do-sample") {
    sample = true;
  } else if (a == "--no-sample") {
    sample = false;
  } else if (a == "--temperature") {
    temperature = r.float32_value();
  } else if (a == "--top-k") {
    top_k = r.int32_value();
  } else if (a == "--top-p") {
    top_p = r.float32_value();
  } else if (a == "--no-repeat-ngram-size") {
    no_repeat = r.int32_value();
  } else if (a == "--repetition-penalty") {
    rep = r.float32_value();
  } else if (a == "--min-p") {
    min_p = r.float32_value();
  } else if (a == "--typical-p") {
    typical_p = r.float32_value();
  } else if (a == "--epsilon-cutoff") {
    epsilon = r.float32_value();
  } else if (a == "--eta-cutoff") {
    eta = r.float32_value();
  } else if (a == "--encoder-repetition-penalty") {
    encoder_rep = r.float32_value();
  } else if (a == "--encoder-no-repeat-ngram-size") {
    encoder_no_repeat = r.int32_value();
  } else if (a == "--bad-word") {
    bad_words.push_back(r.value());
  } else if (a == "--expected-length") {
    expected = r.integer_value();  // check_expected_length_flag says its range
  } else {
    return false;
  }
  return true;
}

GenerationOptions GenerationFlags::over(const GenerationOptions& d, const ModelConfig& c,
                                        const Tokenizer& tokenizer) const {
  // Refused as the server refuses a request's own values, sampling or not, in the same words (validate()
  // checks top-p, top-k and the warpers only when sampling, where a checkpoint's matter).
  GivenOptions given;
  given.length_penalty = length_penalty;
  given.temperature = temperature;
  given.top_k = top_k;
  given.top_p = top_p;
  given.min_p = min_p;
  given.typical_p = typical_p;
  given.epsilon_cutoff = epsilon;
  given.eta_cutoff = eta;
  given.no_repeat_ngram_size = no_repeat;
  given.encoder_no_repeat_ngram_size = encoder_no_repeat;
  given.num_beam_groups = groups;
  given.diversity_penalty = diversity;
  check_given_options(given, flag_name);
  GenerationOptions o = d;
  o.max_new_tokens = max_new.value_or(d.max_new_tokens);
  o.min_new_tokens = min_new.value_or(std::min(o.max_new_tokens, d.min_new_tokens));
  o.do_sample = sample.value_or(d.do_sample);
  o.num_beams = beams.value_or(d.num_beams);  // with do_sample and several beams: beam sampling
  o.num_beam_groups = groups.value_or(d.num_beam_groups);
  o.diversity_penalty = diversity.value_or(d.diversity_penalty);
  o.length_penalty = length_penalty.value_or(d.length_penalty);
  o.early_stopping = early.value_or(d.early_stopping);
  o.no_repeat_ngram_size = no_repeat.value_or(d.no_repeat_ngram_size);
  o.temperature = temperature.value_or(d.temperature);
  o.top_k = top_k.value_or(d.top_k);
  o.top_p = top_p.value_or(d.top_p);
  o.repetition_penalty = rep.value_or(d.repetition_penalty);
  o.min_p = min_p.value_or(d.min_p);
  o.typical_p = typical_p.value_or(d.typical_p);
  o.epsilon_cutoff = epsilon.value_or(d.epsilon_cutoff);
  o.eta_cutoff = eta.value_or(d.eta_cutoff);
  o.encoder_repetition_penalty = encoder_rep.value_or(d.encoder_repetition_penalty);
  o.encoder_no_repeat_ngram_size = encoder_no_repeat.value_or(d.encoder_no_repeat_ngram_size);
  o.num_return_sequences = returned.value_or(default_num_return_sequences(d, o));
  o.vocab_limit = tokenizer.vocab_size();
  // As the server adds a request's bad_words, with its limits and refusals.
  add_bad_words(o, bad_words, tokenizer, c.vocab_size > 0 ? c.vocab_size : tokenizer.vocab_size(), "--bad-word's list",
                [](size_t) { return std::string("--bad-word"); });
  validate(o);
  if (expected) check_expected_length_flag(c, *expected);
  return o;
}

}  // namespace srformer::tools
