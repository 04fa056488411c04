#include "model/generation/options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "model/generation/searcher.h"

namespace srformer {
namespace {

using ::testing::HasSubstr;

// Expects validate() to reject the options with a message naming `field`.
void expect_rejected(const std::function<void(GenerationOptions&)>& edit, const std::string& field) {
  GenerationOptions options;
  edit(options);
  try {
    validate(options);
    ADD_FAILURE() << "validate() accepted a bad " << field;
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr(field));
  }
  EXPECT_THROW(make_searcher(options), std::invalid_argument) << field;
}

TEST(ValidateTest, AcceptsDefaultsAndTypicalSettings) {
  EXPECT_NO_THROW(validate(GenerationOptions{}));
  GenerationOptions beam;
  beam.num_beams = 4;
  beam.num_return_sequences = 4;
  beam.length_penalty = 2.0;
  beam.early_stopping = EarlyStopping::kWhenFull;
  beam.no_repeat_ngram_size = 3;
  beam.min_new_tokens = 128;
  EXPECT_NO_THROW(validate(beam));
  GenerationOptions sample;
  sample.do_sample = true;
  sample.temperature = 0.7;
  sample.top_k = 50;
  sample.top_p = 0.9;
  sample.repetition_penalty = 1.2;
  EXPECT_NO_THROW(validate(sample));
  sample.num_return_sequences = kMaxNumBeams;  // one row per sample, however many beams there are
  EXPECT_NO_THROW(validate(sample));
  EXPECT_EQ(make_searcher(sample)->num_rows(), kMaxNumBeams);
}

TEST(ValidateTest, RejectsEachBadOptionWithItsName) {
  expect_rejected([](auto& o) { o.max_new_tokens = 0; }, "max_new_tokens");
  expect_rejected([](auto& o) { o.vocab_limit = -1; }, "vocab_limit");
  expect_rejected([](auto& o) { o.vocab_limit = 1; }, "vocab_limit");  // EOS (id 1) would be banned
  expect_rejected([](auto& o) { o.max_new_tokens = kMaxNewTokensLimit + 1; }, "max_new_tokens");
  expect_rejected([](auto& o) { o.min_new_tokens = -1; }, "min_new_tokens");
  expect_rejected([](auto& o) { o.min_new_tokens = o.max_new_tokens + 1; }, "min_new_tokens");
  expect_rejected([](auto& o) { o.num_beams = 0; }, "num_beams");
  expect_rejected([](auto& o) { o.num_beams = kMaxNumBeams + 1; }, "num_beams");
  expect_rejected([](auto& o) { o.num_return_sequences = 0; }, "num_return_sequences");
  expect_rejected([](auto& o) { o.num_return_sequences = 2; }, "num_return_sequences");
  expect_rejected(
      [](auto& o) {
        o.num_beams = 3;
        o.num_return_sequences = 4;
      },
      "num_return_sequences");
  expect_rejected(
      [](auto& o) {
        o.do_sample = true;
        o.num_return_sequences = kMaxNumBeams + 1;
      },
      "num_return_sequences");
  expect_rejected(
      [](auto& o) {
        o.do_sample = true;
        o.temperature = 0.0;
      },
      "temperature");
  expect_rejected(
      [](auto& o) {
        o.do_sample = true;
        o.temperature = -1.0;
      },
      "temperature");
  for (const double top_p : {-0.5, 1.5}) {
    expect_rejected(
        [top_p](auto& o) {
          o.do_sample = true;
          o.top_p = top_p;
        },
        "top_p");
  }
  expect_rejected(
      [](auto& o) {
        o.do_sample = true;
        o.top_k = -1;
      },
      "top_k");
  expect_rejected([](auto& o) { o.repetition_penalty = 0.0; }, "repetition_penalty");
  // Tiny divisors overflow the scaled logits (sampling would find no finite probability): refused.
  expect_rejected(
      [](auto& o) {
        o.do_sample = true;
        o.temperature = 1e-38;
      },
      "at least 1e-4");
  expect_rejected([](auto& o) { o.repetition_penalty = 1e-38; }, "between 1e-4");
  for (const double penalty : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    expect_rejected(
        [penalty](auto& o) {
          o.num_beams = 2;
          o.length_penalty = penalty;
        },
        "length_penalty");
  }
  expect_rejected(
      [](auto& o) {
        o.num_beams = 2;
        o.length_penalty = 40;
      },
      "length_penalty is 40; set it between -10 and 10");
  expect_rejected([](auto& o) { o.no_repeat_ngram_size = -2; }, "no_repeat_ngram_size");
  expect_rejected([](auto& o) { o.eos_token_id = -1; }, "eos_token_id");
  expect_rejected([](auto& o) { o.forced_bos_token_id = -3; }, "forced_bos_token_id");
  expect_rejected([](auto& o) { o.extra_eos_token_ids = {4, -2}; }, "eos_token_id is -2");
  expect_rejected(
      [](auto& o) {
        o.forced_eos_token_id = 1;
        o.extra_forced_eos_token_ids = {-1};
      },
      "forced_eos_token_id is -1");
  expect_rejected([](auto& o) { o.extra_forced_eos_token_ids = {1}; }, "without forced_eos_token_id");
}

// Of a list of EOS ids, one inside the tokenizer's vocabulary is enough (an id past it is never generated,
// as none there is); none inside leaves the search nothing to stop at.
TEST(ValidateTest, AListOfEosIdsNeedsOneInsideTheTokenizer) {
  GenerationOptions o;
  o.eos_token_id = 1;
  o.extra_eos_token_ids = {40};
  o.vocab_limit = 30;
  EXPECT_NO_THROW(validate(o));
  o.eos_token_id = 35;
  try {
    validate(o);
    ADD_FAILURE() << "EOS ids 35 and 40 past a vocabulary of 30 were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_limit is 30 but the EOS ids are 35, 40"), std::string::npos)
        << e.what();
  }
}

// Beam sampling (do_sample with beams) returns at most one sequence per beam, as beam search does;
// sampling with one beam draws up to kMaxNumBeams.
TEST(ValidateTest, BeamSamplingReturnsAtMostOneSequencePerBeam) {
  GenerationOptions options;
  options.do_sample = true;
  options.num_beams = 4;
  options.num_return_sequences = 4;
  EXPECT_NO_THROW(validate(options));
  options.num_return_sequences = 5;
  try {
    validate(options);
    FAIL() << "5 sequences from 4 sampled beams accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("between 1 and num_beams (4)"));
  }
  options.num_beams = 1;
  EXPECT_NO_THROW(validate(options)) << "5 samples of one beam each";
}

// The API's float fields: 1e-4 arrives as float32's 9.99999975e-5, and is the smallest temperature and
// repetition penalty accepted, not refused as below 1e-4.
TEST(ValidateTest, TheSmallestDivisorsPassAsFloat32RoundsThem) {
  GenerationOptions options;
  options.do_sample = true;
  options.temperature = static_cast<double>(1e-4f);
  options.repetition_penalty = static_cast<double>(1e-4f);
  EXPECT_NO_THROW(validate(options));
  options.temperature = static_cast<double>(std::nextafter(1e-4f, 0.0f));
  EXPECT_THROW(validate(options), std::invalid_argument);
}

TEST(ValidateTest, TemperatureOnlyMattersWhenSampling) {
  GenerationOptions options;
  options.temperature = 0.0;  // ignored by greedy search, as in HF
  EXPECT_NO_THROW(validate(options));
}

// top_k and top_p are sampling's too: greedy and beam search ignore them, as Hugging Face does, so a
// checkpoint's top_p 1.5 or top_k -1 refuses no request that does not sample. Such requests were refused.
TEST(ValidateTest, TopKAndTopPOnlyMatterWhenSampling) {
  GenerationOptions options;
  options.top_p = 1.5;
  options.top_k = -1;
  EXPECT_NO_THROW(validate(options));
  options.num_beams = 2;
  EXPECT_NO_THROW(make_searcher(options));
  options.do_sample = true;
  EXPECT_THROW(validate(options), std::invalid_argument) << "beam sampling uses them";
}

// Group beam search, with Hugging Face's rules: num_beams a multiple of num_beam_groups (so at most it), no
// sampling, a diversity_penalty only between groups; a penalty below 0 or not finite is refused always.
TEST(ValidateTest, GroupBeamSearchIsRefusedAsHuggingFaceRefusesIt) {
  const auto beams = [](int64_t beams, int64_t groups, double penalty) {
    return [=](GenerationOptions& o) {
      o.num_beams = beams;
      o.num_beam_groups = groups;
      o.diversity_penalty = penalty;
    };
  };
  expect_rejected(beams(4, 0, 0.0), "num_beam_groups is 0; set it between 1 and num_beams");
  expect_rejected(beams(4, -2, 0.0), "num_beam_groups is -2");
  expect_rejected(beams(4, 3, 0.5), "num_beam_groups is 3 but num_beams (4) must be a multiple of it");
  expect_rejected(beams(4, 8, 0.5), "num_beam_groups is 8 but num_beams (4) must be a multiple of it");
  expect_rejected(beams(4, 1, 0.5), "diversity_penalty is 0.5 with num_beam_groups 1");
  expect_rejected(beams(4, 2, -0.5), "diversity_penalty is -0.5; set it >= 0");
  expect_rejected(beams(1, 1, -0.5), "diversity_penalty is -0.5");
  for (const double penalty : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    expect_rejected(beams(4, 2, penalty), "diversity_penalty");
  }
  expect_rejected(
      [&](GenerationOptions& o) {
        beams(4, 2, 0.5)(o);
        o.do_sample = true;
      },
      "num_beam_groups is 2 with do_sample true; group beam search does not sample");
  GenerationOptions ok;
  beams(6, 3, 0.5)(ok);
  ok.num_return_sequences = 6;
  EXPECT_NO_THROW(validate(ok));
  EXPECT_EQ(make_searcher(ok)->num_rows(), 6);
  beams(6, 6, 0.0)(ok);  // groups of one beam; no penalty is allowed (every group then searches alike)
  EXPECT_NO_THROW(validate(ok));
}

// With one beam HF's generate() runs greedy search or sampling, no group search: a checkpoint's groups
// refuse none of those requests.
TEST(ValidateTest, GroupSettingsOnlyMatterWithBeams) {
  GenerationOptions options;
  options.num_beam_groups = 4;
  options.diversity_penalty = 0.5;
  EXPECT_NO_THROW(validate(options));
  EXPECT_EQ(make_searcher(options)->num_rows(), 1);
  options.do_sample = true;
  options.num_return_sequences = 3;
  EXPECT_NO_THROW(validate(options));
  options.num_beams = 4;
  options.num_return_sequences = 4;
  EXPECT_THROW(validate(options), std::invalid_argument) << "beam sampling with groups";
  options.do_sample = false;
  EXPECT_NO_THROW(validate(options));
}

// Hugging Face's TopPLogitsWarper refuses only top_p < 0 or > 1: at 0 it removes every token whose ascending
// cumulative probability is at most 1, which leaves the min_tokens_to_keep likeliest. A sampling checkpoint
// whose generation_config.json says top_p 0 could not serve its defaults, and a request could not send 0.
TEST(ValidateTest, TopPZeroIsAcceptedWhenSamplingAsHuggingFaceDoes) {
  GenerationOptions options;
  options.do_sample = true;
  options.top_p = 0.0;
  EXPECT_NO_THROW(validate(options));
  options.num_beams = 2;  // beam sampling
  EXPECT_NO_THROW(validate(options));
  options.top_p = -1e-9;
  EXPECT_THROW(validate(options), std::invalid_argument);
}

// length_penalty scores beam hypotheses only: greedy search and sampling with one beam ignore it, as
// Hugging Face does, so a checkpoint's length_penalty 40 refuses no request without beams. Such
// requests were refused.
TEST(ValidateTest, LengthPenaltyOnlyMattersWithBeams) {
  GenerationOptions options;
  options.length_penalty = 40.0;
  EXPECT_NO_THROW(validate(options));
  options.do_sample = true;
  EXPECT_NO_THROW(validate(options));
  options.num_beams = 2;
  EXPECT_THROW(validate(options), std::invalid_argument) << "beam sampling uses it";
  options.do_sample = false;
  EXPECT_THROW(validate(options), std::invalid_argument) << "beam search uses it";
}

// A request's own values and a tool's flags are checked by one function, sampling or not: the message
// names the option as the caller's user writes it, its range, the value that turns it off and the value
// given, as float32 carries it (1.1, not 1.10000002).
TEST(GivenOptionsTest, AValueOutOfRangeIsRefusedNamingTheRangeAndTheValueGiven) {
  const auto message = [](const std::function<void(GivenOptions&)>& edit, OptionName name) -> std::string {
    GivenOptions given;
    edit(given);
    try {
      check_given_options(given, name);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::tuple<std::function<void(GivenOptions&)>, std::string, std::string>> cases = {
      {[](auto& g) { g.top_p = -0.5; },
       "top_p must be in [0, 1] (1 disables it; 0 keeps only the likeliest token), got -0.5",
       "--top-p must be in [0, 1] (1 disables it; 0 keeps only the likeliest token), got -0.5"},
      {[](auto& g) { g.top_p = static_cast<double>(1.1F); },
       "top_p must be in [0, 1] (1 disables it; 0 keeps only the likeliest token), got 1.1",
       "--top-p must be in [0, 1] (1 disables it; 0 keeps only the likeliest token), got 1.1"},
      {[](auto& g) { g.min_p = -0.25; }, "min_p must be in [0, 1] (0 disables it), got -0.25",
       "--min-p must be in [0, 1] (0 disables it), got -0.25"},
      {[nan](auto& g) { g.min_p = nan; }, "min_p must be in [0, 1] (0 disables it), got nan",
       "--min-p must be in [0, 1] (0 disables it), got nan"},
      {[](auto& g) { g.typical_p = 2.0; }, "typical_p must be in (0, 1] (1 disables it), got 2",
       "--typical-p must be in (0, 1] (1 disables it), got 2"},
      {[](auto& g) { g.epsilon_cutoff = 1.0; },
       "epsilon_cutoff must be in [0, 1) (0 disables it; Hugging Face suggests 3e-4 to 9e-4), got 1",
       "--epsilon-cutoff must be in [0, 1) (0 disables it; Hugging Face suggests 3e-4 to 9e-4), got 1"},
      {[](auto& g) { g.eta_cutoff = std::numeric_limits<double>::infinity(); },
       "eta_cutoff must be in [0, 1) (0 disables it; Hugging Face suggests 3e-4 to 2e-3), got inf",
       "--eta-cutoff must be in [0, 1) (0 disables it; Hugging Face suggests 3e-4 to 2e-3), got inf"},
      {[nan](auto& g) { g.temperature = nan; }, "temperature must be a finite number, got nan",
       "--temperature must be a finite number, got nan"},
      {[](auto& g) { g.top_k = -1; }, "top_k must be >= 0 (0 disables it), got -1",
       "--top-k must be >= 0 (0 disables it), got -1"},
      {[](auto& g) { g.no_repeat_ngram_size = -2; }, "no_repeat_ngram_size must be >= 0 (0 disables it), got -2",
       "--no-repeat-ngram-size must be >= 0 (0 disables it), got -2"},
      {[](auto& g) { g.encoder_no_repeat_ngram_size = -1; },
       "encoder_no_repeat_ngram_size must be >= 0 (0 disables it), got -1",
       "--encoder-no-repeat-ngram-size must be >= 0 (0 disables it), got -1"},
      {[](auto& g) { g.length_penalty = -1e38; },
       "length_penalty must be between -10 and 10 (1 scores by mean log-probability, > 1 favours longer "
       "summaries), got -1e+38",
       "--length-penalty must be between -10 and 10 (1 scores by mean log-probability, > 1 favours longer "
       "summaries), got -1e+38"},
      // The ends of the ranges pass, as does every value unset.
      {[](auto& g) {
         g.top_p = 1.0;
         g.min_p = 0.0;
         g.typical_p = 1.0;
         g.epsilon_cutoff = 0.0;
         g.eta_cutoff = 0.0;
         g.temperature = 0.0;  // its 1e-4 when sampling is validate()'s
         g.top_k = 0;
         g.length_penalty = -10.0;
       },
       "accepted", "accepted"},
      {[](auto& g) { g.top_p = 0.0; }, "accepted", "accepted"},  // Hugging Face's too: the likeliest token alone
      {[](auto&) {}, "accepted", "accepted"},
  };
  for (const auto& [edit, as_field, as_flag] : cases) {
    EXPECT_EQ(message(edit, field_name), as_field);
    EXPECT_EQ(message(edit, flag_name), as_flag);
  }
}

TEST(FinishReasonTest, Names) {
  EXPECT_STREQ(to_string(FinishReason::kEos), "eos");
  EXPECT_STREQ(to_string(FinishReason::kLength), "length");
  EXPECT_STREQ(to_string(FinishReason::kCancelled), "cancelled");
  EXPECT_STREQ(to_string(FinishReason::kNone), "none");
}

}  // namespace
}  // namespace srformer
