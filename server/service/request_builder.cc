#include "server/service/request_builder.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "common/byte_gate.h"
#include "model/data/encode.h"
#include "model/generation/bad_words.h"
#include "model/generation/generate.h"
#include "model/limits.h"
#include "model/tokenizer/document_check.h"
#include "model/tokenizer/utf8.h"

namespace srformer::server {

namespace {

// A tokenizer holds some 70 bytes per input byte while it runs (measured: a 4 MB document took 290 MB
// with a T5's SentencePiece model): documents of kLongDocumentBytes and more share a budget of 16 MiB of
// text being tokenized at once (about 1.2 GB). Smaller ones, a few MB each at most, never wait behind a
// long one.
constexpr int64_t kTokenizingBudgetBytes = int64_t{16} << 20;

ByteGate& tokenizing_gate() {
  static ByteGate gate(kTokenizingBudgetBytes);
  return gate;
}

[[noreturn]] void invalid(const std::string& message) {
  throw RequestError(grpc::StatusCode::INVALID_ARGUMENT, message);
}

// The request's early_stopping_mode, or its early_stopping, or the default; the two fields must agree.
EarlyStopping early_stopping_of(const v1::GenerationOptions& p, EarlyStopping fallback) {
  const auto mode = p.early_stopping_mode();
  if (mode == v1::EARLY_STOPPING_MODE_UNSPECIFIED) {
    return p.has_early_stopping() ? early_stopping_from_bool(p.early_stopping()) : fallback;
  }
  if (mode != v1::EARLY_STOPPING_MODE_HEURISTIC && mode != v1::EARLY_STOPPING_MODE_WHEN_FULL &&
      mode != v1::EARLY_STOPPING_MODE_NEVER) {
    invalid("early_stopping_mode " + std::to_string(mode) +
            " is not one of HEURISTIC (1), WHEN_FULL (2) or NEVER (3); leave it unset for the model's default");
  }
  const EarlyStopping e = mode == v1::EARLY_STOPPING_MODE_WHEN_FULL ? EarlyStopping::kWhenFull
                          : mode == v1::EARLY_STOPPING_MODE_NEVER   ? EarlyStopping::kNever
                                                                    : EarlyStopping::kHeuristic;
  if (p.has_early_stopping() && p.early_stopping() != (e == EarlyStopping::kWhenFull)) {
    invalid(std::string("early_stopping is ") + (p.early_stopping() ? "true" : "false") +
            " but early_stopping_mode is " + v1::EarlyStoppingMode_Name(mode) +
            "; set one of them (early_stopping true is WHEN_FULL)");
  }
  return e;
}

v1::EarlyStoppingMode mode_of(EarlyStopping e) {
  switch (e) {
    case EarlyStopping::kWhenFull:
      return v1::EARLY_STOPPING_MODE_WHEN_FULL;
    case EarlyStopping::kNever:
      return v1::EARLY_STOPPING_MODE_NEVER;
    case EarlyStopping::kHeuristic:
      break;
  }
  return v1::EARLY_STOPPING_MODE_HEURISTIC;
}

// Numbers as a person writes them: 1e-38, 0.7, nan (std::to_string gives 0.000000 for 1e-38).
template <typename T>
std::string str(T v) {
  return fmt::format("{}", v);
}

// A default as ListModels advertises it: as it is where it acts (`acts`: validate() took it there), else,
// where a request may not send it (check_given_options), the value that turns it off. A checkpoint's top_p 1.5
// or top_k -1 for greedy search, or length_penalty 40 without beams, acts nowhere, and a request that sends
// the defaults back must not be refused for it.
template <typename T>
T advertised(bool acts, std::optional<T> GivenOptions::*field, T value, T off) {
  if (acts) return value;
  GivenOptions given;
  given.*field = value;
  try {
    check_given_options(given);
  } catch (const std::invalid_argument&) {
    return off;
  }
  return value;
}

}  // namespace

void validate_document(std::string_view document) {
  const auto fault = find_document_fault(document);
  if (!fault) return;
  switch (fault->kind) {
    case DocumentFault::Kind::kEmpty:
      invalid("document " + fault->what + "; send the text to summarize in the 'document' field");
    case DocumentFault::Kind::kBlank:
      invalid("document " + fault->what + "; send the text to summarize");
    case DocumentFault::Kind::kNotUtf8:
    case DocumentFault::Kind::kNul:
      invalid("document " + fault->what + "; re-encode the text as UTF-8");
  }
}

int64_t effective_max_input_tokens(const ModelConfig& config, const ServiceLimits& limits) {
  if (config.max_input_tokens_is_fallback) {
    // No limit of the checkpoint's own: the operator's, else kUnboundedModelInputTokens.
    return limits.max_input_tokens > 0 ? limits.max_input_tokens : kUnboundedModelInputTokens;
  }
  // An advisory limit (T5's n_positions): the operator's, above or below it.
  if (limits.max_input_tokens > 0 && input_limit_can_be_raised(config)) return limits.max_input_tokens;
  int64_t limit = config.max_input_tokens > 0 ? config.max_input_tokens : limits.max_input_tokens;
  if (limits.max_input_tokens > 0) limit = std::min(limit, limits.max_input_tokens);
  return limit;
}

int64_t max_new_tokens_limit(const ModelConfig& config, const ServiceLimits& limits) {
  const int64_t positions = decoder_positions(config);
  return positions > 0 ? std::min(limits.max_new_tokens_cap, positions) : limits.max_new_tokens_cap;
}

int64_t default_max_new_tokens(const ModelConfig& config, const ServiceLimits& limits) {
  return std::min(model_generation_defaults(config).max_new_tokens, max_new_tokens_limit(config, limits));
}

ResolvedOptions resolve_options(const v1::GenerationOptions& p, const ModelConfig& config,
                                const ServiceLimits& limits) {
  // The request's own values in their ranges, sampling or not (the model's defaults are checked by validate()
  // where they act), as `srformer summarize` checks its flags.
  GivenOptions given;
  const auto set = [](bool has, auto value, auto& out) {
    if (has) out = value;
  };
  set(p.has_length_penalty(), p.length_penalty(), given.length_penalty);
  set(p.has_temperature(), p.temperature(), given.temperature);
  set(p.has_top_k(), p.top_k(), given.top_k);
  set(p.has_top_p(), p.top_p(), given.top_p);
  set(p.has_min_p(), p.min_p(), given.min_p);
  set(p.has_typical_p(), p.typical_p(), given.typical_p);
  set(p.has_epsilon_cutoff(), p.epsilon_cutoff(), given.epsilon_cutoff);
  set(p.has_eta_cutoff(), p.eta_cutoff(), given.eta_cutoff);
  set(p.has_no_repeat_ngram_size(), p.no_repeat_ngram_size(), given.no_repeat_ngram_size);
  set(p.has_encoder_no_repeat_ngram_size(), p.encoder_no_repeat_ngram_size(), given.encoder_no_repeat_ngram_size);
  set(p.has_num_beam_groups(), p.num_beam_groups(), given.num_beam_groups);
  set(p.has_diversity_penalty(), p.diversity_penalty(), given.diversity_penalty);
  try {
    check_given_options(given);
  } catch (const std::invalid_argument& e) {
    invalid(e.what());
  }
  ResolvedOptions r;
  const GenerationOptions d = model_generation_defaults(config);
  GenerationOptions& o = r.options;
  o = d;
  const int64_t default_max_new = default_max_new_tokens(config, limits);
  if (p.has_max_new_tokens()) {
    if (p.max_new_tokens() < 1) {
      invalid("max_new_tokens must be at least 1 (got " + str(p.max_new_tokens()) +
              "); leave it unset for the model default (" + str(default_max_new) + ")");
    }
    if (p.max_new_tokens() > limits.max_new_tokens_cap) {
      invalid("max_new_tokens " + str(p.max_new_tokens()) + " is over the server cap of " +
              str(limits.max_new_tokens_cap) + "; ask for at most " + str(limits.max_new_tokens_cap));
    }
    if (const int64_t most = max_new_tokens_limit(config, limits); p.max_new_tokens() > most) {
      invalid("max_new_tokens " + str(p.max_new_tokens()) + " is more than this model can write: its decoder has " +
              str(most) + " positions (config.json's max_position_embeddings); ask for at most " + str(most));
    }
    o.max_new_tokens = p.max_new_tokens();
  } else {
    o.max_new_tokens = default_max_new;
  }
  if (p.has_min_new_tokens()) {
    if (p.min_new_tokens() < 0 || p.min_new_tokens() > o.max_new_tokens) {
      invalid("min_new_tokens must be between 0 and max_new_tokens (" + str(o.max_new_tokens) + "), got " +
              str(p.min_new_tokens()));
    }
    o.min_new_tokens = p.min_new_tokens();
  } else {
    o.min_new_tokens = std::min(o.max_new_tokens, d.min_new_tokens);
  }
  o.do_sample = p.has_do_sample() ? p.do_sample() : d.do_sample;
  if (p.has_num_beams()) {
    if (p.num_beams() < 1 || p.num_beams() > limits.max_beams) {
      invalid("num_beams must be between 1 and " + str(limits.max_beams) + " (the server cap), got " +
              str(p.num_beams()));
    }
    o.num_beams = p.num_beams();
  } else {
    o.num_beams = std::clamp<int64_t>(d.num_beams, 1, limits.max_beams);  // with do_sample: beam sampling
    // Capped, the model's beams stay a multiple of its groups (or the request's), which must divide them: a
    // checkpoint's 12 beams in 3 groups under --max-beams 8 search 6, where 8 refused every such request.
    const int64_t groups = p.has_num_beam_groups() ? p.num_beam_groups() : d.num_beam_groups;
    if (o.num_beams < d.num_beams && groups > 1 && o.num_beams >= groups) o.num_beams -= o.num_beams % groups;
  }
  // Group beam search: validate() refuses groups that do not divide num_beams, sampling with groups, and a
  // penalty without them, naming both settings (either may be the model's default).
  if (p.has_num_beam_groups()) o.num_beam_groups = p.num_beam_groups();
  if (p.has_diversity_penalty()) o.diversity_penalty = p.diversity_penalty();
  // Sampling with one beam draws each sequence in a batch row of its own, as many as a beam search may
  // have beams; beams (searched or sampled) return at most one sequence each.
  const bool samples = draws_independent_samples(o);
  const int64_t most_returned = samples ? limits.max_beams : o.num_beams;
  if (p.has_num_return_sequences()) {
    if (p.num_return_sequences() < 1 || p.num_return_sequences() > most_returned) {
      invalid(samples
                  ? "num_return_sequences must be between 1 and " + str(most_returned) +
                        " when sampling (the server cap, --max-beams: each sample takes a batch row), got " +
                        str(p.num_return_sequences())
                  : "num_return_sequences must be between 1 and num_beams (" + str(o.num_beams) + "), got " +
                        str(p.num_return_sequences()) +
                        (o.num_beams == 1 ? "; greedy search returns one: ask for num_beams >= num_return_sequences, "
                                            "or do_sample=true for several samples"
                                          : ""));
    }
    o.num_return_sequences = p.num_return_sequences();
  } else {
    o.num_return_sequences = std::min(default_num_return_sequences(d, o), most_returned);
  }
  o.length_penalty = p.has_length_penalty() ? p.length_penalty() : d.length_penalty;
  o.early_stopping = early_stopping_of(p, d.early_stopping);
  // When sampling, validate() refuses a temperature below 1e-4, and says so (a check here said "> 0", and a
  // client that sent 1e-5 next met another bound).
  if (p.has_temperature()) o.temperature = p.temperature();
  if (p.has_top_k()) o.top_k = p.top_k();
  if (p.has_top_p()) o.top_p = p.top_p();
  if (p.has_min_p()) o.min_p = p.min_p();
  if (p.has_typical_p()) o.typical_p = p.typical_p();
  if (p.has_epsilon_cutoff()) o.epsilon_cutoff = p.epsilon_cutoff();
  if (p.has_eta_cutoff()) o.eta_cutoff = p.eta_cutoff();
  if (p.has_seed()) o.seed = p.seed();
  o.no_repeat_ngram_size = p.has_no_repeat_ngram_size() ? p.no_repeat_ngram_size() : d.no_repeat_ngram_size;
  if (p.has_repetition_penalty()) {
    // validate() refuses it below 1e-4 or not finite, and says so (as the temperature above).
    o.repetition_penalty = p.repetition_penalty();
  }
  if (p.has_encoder_repetition_penalty()) {
    // As repetition_penalty: validate() refuses it below 1e-4 or not finite.
    o.encoder_repetition_penalty = p.encoder_repetition_penalty();
  }
  if (p.has_encoder_no_repeat_ngram_size()) o.encoder_no_repeat_ngram_size = p.encoder_no_repeat_ngram_size();
  // The model's own L (srformer.expected_length), which ListModels advertises, is always a valid choice.
  const int64_t model_l = config.srformer.expected_length.value_or(0);
  const int64_t max_l = limits.max_expected_length > 0 ? limits.max_expected_length
                                                       : max_expected_length(config, limits.max_new_tokens_cap);
  if (p.has_expected_length()) {
    if (p.expected_length() < 1 || p.expected_length() > max_l) {
      invalid("expected_length must be between 1 and " + str(max_l) + ", got " + str(p.expected_length()) +
              "; leave it unset for " + (model_l > 0 ? "the model's " + str(model_l) : std::string("max_new_tokens")));
    }
    r.expected_length = p.expected_length();
  } else {
    r.expected_length = default_expected_length(config, o.max_new_tokens);
  }
  try {
    validate(o);
  } catch (const std::invalid_argument& e) {
    invalid(e.what());
  }
  return r;
}

v1::GenerationOptions to_proto(const ResolvedOptions& resolved) {
  const GenerationOptions& o = resolved.options;
  v1::GenerationOptions p;
  p.set_max_new_tokens(static_cast<int32_t>(o.max_new_tokens));
  p.set_min_new_tokens(static_cast<int32_t>(o.min_new_tokens));
  p.set_num_beams(static_cast<int32_t>(o.num_beams));
  p.set_length_penalty(
      static_cast<float>(advertised(o.num_beams > 1, &GivenOptions::length_penalty, o.length_penalty, 1.0)));
  p.set_early_stopping(o.early_stopping == EarlyStopping::kWhenFull);
  p.set_early_stopping_mode(mode_of(o.early_stopping));
  p.set_do_sample(o.do_sample);
  p.set_temperature(static_cast<float>(advertised(o.do_sample, &GivenOptions::temperature, o.temperature, 1.0)));
  p.set_top_k(static_cast<int32_t>(advertised(o.do_sample, &GivenOptions::top_k, o.top_k, int64_t{0})));
  p.set_top_p(static_cast<float>(advertised(o.do_sample, &GivenOptions::top_p, o.top_p, 1.0)));
  p.set_seed(o.seed);
  p.set_no_repeat_ngram_size(static_cast<int32_t>(o.no_repeat_ngram_size));
  p.set_repetition_penalty(static_cast<float>(o.repetition_penalty));
  p.set_expected_length(static_cast<int32_t>(resolved.expected_length));
  p.set_num_return_sequences(static_cast<int32_t>(o.num_return_sequences));
  // A config's typical_p of 1 or more and cutoffs outside (0, 1) are off, as in Hugging Face: sent as the
  // values that say so, which a request may send back.
  p.set_min_p(static_cast<float>(advertised(o.do_sample, &GivenOptions::min_p, o.min_p, 0.0)));
  const double typical_p = advertised(o.do_sample, &GivenOptions::typical_p, o.typical_p, 1.0);
  p.set_typical_p(typical_p < 1.0 ? static_cast<float>(typical_p) : 1.0f);
  p.set_epsilon_cutoff(o.epsilon_cutoff > 0.0 && o.epsilon_cutoff < 1.0 ? static_cast<float>(o.epsilon_cutoff) : 0.0f);
  p.set_eta_cutoff(o.eta_cutoff > 0.0 && o.eta_cutoff < 1.0 ? static_cast<float>(o.eta_cutoff) : 0.0f);
  p.set_encoder_repetition_penalty(static_cast<float>(o.encoder_repetition_penalty));
  p.set_encoder_no_repeat_ngram_size(static_cast<int32_t>(o.encoder_no_repeat_ngram_size));
  p.set_num_beam_groups(static_cast<int32_t>(o.num_beam_groups));
  p.set_diversity_penalty(static_cast<float>(o.diversity_penalty));
  return p;
}

void add_request_bad_words(const v1::GenerationOptions& p, const Tokenizer& tokenizer, const ModelConfig& config,
                           GenerationOptions& options) {
  if (p.bad_words().empty()) return;
  try {
    add_bad_words(options, std::vector<std::string>(p.bad_words().begin(), p.bad_words().end()), tokenizer,
                  config.vocab_size > 0 ? config.vocab_size : tokenizer.vocab_size(), "bad_words",
                  [](size_t i) { return "bad_words[" + str(i) + "]"; });
  } catch (const std::invalid_argument& e) {
    invalid(e.what());
  }
}

std::string request_id_problem(std::string_view id) {
  if (id.size() > kMaxRequestIdBytes) {
    return "request_id is " + str(id.size()) + " bytes; at most " + str(kMaxRequestIdBytes);
  }
  if (!utf8::is_valid(id)) return "request_id is not valid UTF-8";  // a JSON log line would not be either
  return {};
}

std::shared_ptr<Request> build_request(const v1::SummarizeRequest& in, const Engine& engine,
                                       const ServiceLimits& limits, std::optional<Clock::time_point> deadline) {
  validate_document(in.document());
  if (!v1::TruncationPolicy_IsValid(in.truncation())) {
    // A newer client's value, or a wrong number: refused rather than read as the default.
    invalid("truncation " + str(static_cast<int>(in.truncation())) +
            " is not a TruncationPolicy; use TRUNCATION_POLICY_ERROR (1) or TRUNCATION_POLICY_TRUNCATE (2)");
  }
  const ModelConfig& config = engine.config();
  ResolvedOptions resolved = resolve_options(in.options(), config, limits);
  add_request_bad_words(in.options(), engine.tokenizer(), config, resolved.options);

  if (const std::string problem = request_id_problem(in.request_id()); !problem.empty()) invalid(problem);
  auto req = std::make_shared<Request>();
  req->id = in.request_id();
  req->options = resolved.options;
  req->expected_length = resolved.expected_length;
  req->deadline = deadline;
  const std::string text = config.summarization_prefix ? *config.summarization_prefix + in.document() : in.document();
  {
    std::optional<ByteGate::Pass> pass;
    if (static_cast<int64_t>(text.size()) >= kLongDocumentBytes) pass.emplace(tokenizing_gate().enter(text.size()));
    req->input_ids = engine.tokenizer().encode(text);
  }
  req->options.vocab_limit = engine.tokenizer().vocab_size();
  const int64_t limit = effective_max_input_tokens(config, limits);
  const int64_t n = static_cast<int64_t>(req->input_ids.size());
  req->usage.original_input_tokens = n;
  if (n > limit) {
    if (in.truncation() == v1::TRUNCATION_POLICY_TRUNCATE) {
      // Keep the leading tokens and the closing special token (EOS / </s>) the model expects.
      const int64_t last = req->input_ids.back();
      const bool keep_last = engine.tokenizer().is_special(last) && limit > 1;
      req->input_ids.resize(static_cast<size_t>(keep_last ? limit - 1 : limit));
      if (keep_last) req->input_ids.push_back(last);
      // resize() keeps the whole document's capacity, which the request held while queued, decoding and
      // waiting for its client to take its answer: 8 bytes a token of a 4 MiB document, not of the limit.
      req->input_ids.shrink_to_fit();
      req->usage.truncated = true;
    } else {
      throw RequestError(grpc::StatusCode::INVALID_ARGUMENT,
                         "document is " + str(n) + " tokens, over the limit of " + str(limit) + " for model '" +
                             engine.name() +
                             "'; shorten it, or set truncation=TRUNCATION_POLICY_TRUNCATE to keep the first " +
                             str(limit) + " tokens");
    }
  }
  // A tokenizer with more tokens than the model's embedding has rows (files that do not belong to the
  // checkpoint, or tokens added to one and not the other; the server warns at start) makes ids the model
  // cannot read: this request is refused here, where it would fail its whole encode batch in the engine.
  if (const auto at = data::first_past_embedding(req->input_ids, config.vocab_size)) {
    const int64_t past = req->input_ids[*at];
    throw RequestError(grpc::StatusCode::FAILED_PRECONDITION,
                       "the document holds the token '" + utf8::to_valid(engine.tokenizer().id_to_token(past)) +
                           "' (id " + str(past) + "), past the " + str(config.vocab_size) + " rows of model '" +
                           engine.name() + "''s embedding: its tokenizer has " + str(engine.tokenizer().vocab_size()) +
                           " tokens; the server's operator should serve the checkpoint with its own tokenizer files");
  }
  req->usage.input_tokens = static_cast<int64_t>(req->input_ids.size());
  return req;
}

}  // namespace srformer::server
