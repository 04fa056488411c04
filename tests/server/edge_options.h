#pragma once
// Requests whose options take edge values (0, ±1, huge, NaN, ±inf, denormals) in random combinations
// (fixed seed): each must be served or refused with INVALID_ARGUMENT, never fail on the server's side.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "srformer/v1/summarizer.grpc.pb.h"

namespace srformer::testing {

// Sends `count` such requests one after another (the server's max_new_tokens cap is best kept small);
// returns how many ended with each code.
inline std::map<grpc::StatusCode, int> send_edge_option_requests(v1::Summarizer::Stub& stub, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto pick = [&rng](const auto& values) { return values[rng() % values.size()]; };
  const std::vector<int32_t> ints{
      0, 1, 2, 3, 8, 64, 65, -1, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  const std::vector<float> floats{0.0F,
                                  1e-45F,
                                  1e-5F,
                                  0.5F,
                                  1.0F,
                                  2.0F,
                                  -1.0F,
                                  1e30F,
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN()};
  std::map<grpc::StatusCode, int> seen;
  for (int i = 0; i < count; ++i) {
    v1::SummarizeRequest r;
    r.set_document("the cat sat on the mat " + std::to_string(i));
    auto* o = r.mutable_options();
    if (rng() % 2) o->set_max_new_tokens(pick(ints));
    if (rng() % 2) o->set_min_new_tokens(pick(ints));
    if (rng() % 3 == 0) o->set_num_beams(pick(ints));
    if (rng() % 2) o->set_length_penalty(pick(floats));
    if (rng() % 2) o->set_early_stopping(rng() % 2);
    if (rng() % 4 == 0) o->set_early_stopping_mode(static_cast<v1::EarlyStoppingMode>(rng() % 5));  // 4: none
    if (rng() % 2) o->set_do_sample(rng() % 2);
    if (rng() % 2) o->set_temperature(pick(floats));
    if (rng() % 2) o->set_top_k(pick(ints));
    if (rng() % 2) o->set_top_p(pick(floats));
    if (rng() % 2) o->set_seed(rng());
    if (rng() % 2) o->set_no_repeat_ngram_size(pick(ints));
    if (rng() % 2) o->set_repetition_penalty(pick(floats));
    if (rng() % 2) o->set_expected_length(pick(ints));
    if (rng() % 4 == 0) o->set_min_p(pick(floats));
    if (rng() % 4 == 0) o->set_typical_p(pick(floats));
    if (rng() % 4 == 0) o->set_epsilon_cutoff(pick(floats));
    if (rng() % 4 == 0) o->set_eta_cutoff(pick(floats));
    if (rng() % 4 == 0) o->set_encoder_repetition_penalty(pick(floats));
    if (rng() % 4 == 0) o->set_encoder_no_repeat_ngram_size(pick(ints));
    if (rng() % 4 == 0) o->set_num_beam_groups(pick(ints));
    if (rng() % 4 == 0) o->set_diversity_penalty(pick(floats));
    if (rng() % 4 == 0) o->set_num_return_sequences(pick(ints));
    if (rng() % 4 == 0) r.set_truncation(static_cast<v1::TruncationPolicy>(pick(ints)));
    if (rng() % 4 == 0) {
      // Banned words at theirs: blank, over the byte and token caps, the EOS written out, or fine.
      const std::vector<std::string> words{"",        " ",    "\xE2\x80\x8B",        "the",
                                           "cat sat", "</s>", std::string(300, 'x'), std::string(40, 'y')};
      for (uint32_t k = 1 + rng() % 3; k > 0; --k) o->add_bad_words(pick(words));
    }
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const grpc::Status status = stub.Summarize(&ctx, r, &resp);
    ++seen[status.error_code()];
    EXPECT_TRUE(status.ok() || status.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
        << "request #" << i << " " << r.options().ShortDebugString() << ": code " << status.error_code() << ": "
        << status.error_message();
  }
  return seen;
}

}  // namespace srformer::testing
