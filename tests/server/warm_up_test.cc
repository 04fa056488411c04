// --warm-up: one short request on every model before the server listens (server/service/warm_up.h).
#include "server/service/warm_up.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "server/metrics/metrics.h"
#include "tests/metrics/scrape.h"
#include "tests/server/test_server.h"

namespace srformer::testing {
namespace {

TEST(WarmUp, RunsAShortRequestOnEveryModelAcrossSegments) {
  server::Metrics metrics("");
  FakeServerOptions so;
  FakeModelOptions small{20, 4};  // a 20-token input limit: the warm-up's document is truncated to it
  so.models = {{"alpha", FakeModelOptions{}}, {"small", small}};
  so.metrics = &metrics;
  TestServer server(so);
  server::ServiceLimits limits;
  const auto reports = server::warm_up(server.server().models(), limits);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].model, "alpha");
  EXPECT_EQ(reports[1].model, "small");
  for (const auto& r : reports) {
    EXPECT_EQ(r.output_tokens, 4) << r.model;
    EXPECT_GE(r.segments, 2) << r.model << ": the steps cross a segment boundary";
    EXPECT_GT(r.milliseconds, 0) << r.model;
  }
  EXPECT_GT(reports[0].input_tokens, 4) << "more than one segment of 4";
  EXPECT_EQ(reports[1].input_tokens, 20);
  for (const char* model : {"alpha", "small"}) {
    EXPECT_EQ(server.engine(model).stats().steps, 4) << model;
    EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0 && s.state_bytes == 0; },
                                std::chrono::seconds(10), model))
        << model << ": the warm-up leaves no state behind";
  }

  // No client asked for it: no series counts it, and the engines report again afterwards.
  const auto alpha = [&](const std::string& name) {
    return server::testing::sample(metrics.scrape_text(), name, {{"model", "alpha"}}).value_or(-1);
  };
  for (const char* name :
       {"srformer_rows_joined_total", "srformer_decode_steps_total", "srformer_generated_tokens_total",
        "srformer_input_tokens_count", "srformer_time_to_first_token_seconds_count", "srformer_encode_seconds_count"}) {
    EXPECT_EQ(alpha(name), 0.0) << name;
  }
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  ASSERT_TRUE(server.stub().Summarize(&ctx, make_request("some text", "alpha"), &resp).ok());
  // The answer goes out before the engine counts its last step: wait for the iteration to end.
  ASSERT_TRUE(server.engine("alpha").wait_idle(server::Clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(alpha("srformer_rows_joined_total"), 1.0);
  EXPECT_EQ(alpha("srformer_generated_tokens_total"), static_cast<double>(resp.usage().output_tokens()));

  // A cap under four new tokens is kept to.
  limits.max_new_tokens_cap = 2;
  EXPECT_EQ(server::warm_up(server.server().models(), limits).at(0).output_tokens, 2);
}

// A model that cannot summarize a sentence stops the start, named, instead of failing its first requests.
TEST(WarmUp, AModelWhoseRequestFailsIsNamed) {
  FakeServerOptions so;
  FakeModelOptions broken;
  broken.fail_step_call = 2;
  so.models = {{"fine", FakeModelOptions{}}, {"broken", broken}};
  TestServer server(so);
  try {
    server::warm_up(server.server().models(), server::ServiceLimits{});
    FAIL() << "the broken model's warm-up passed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("model 'broken' failed its warm-up request"), std::string::npos) << e.what();
  }
  // The server itself still serves the model that works.
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  EXPECT_TRUE(server.stub().Summarize(&ctx, make_request("some text", "fine"), &resp).ok());
}

// A checkpoint whose generation defaults no request can use as they are (repetition_penalty 0, or
// encoder_repetition_penalty 0, which a greedy request reads too) is served, with a warning, to the requests
// that set the option. The warm-up's own request left it unset and was refused, so with --warm-up (the
// default) the server did not start ("its warm-up request was refused"). `unusable` has such a default, named
// `option` in the refusal; `set` gives a request a usable value for it.
void expect_warmed_up_and_served_when_set(const FakeModelOptions& unusable, const std::string& option,
                                          const std::function<void(v1::GenerationOptions&)>& set) {
  FakeServerOptions so;
  so.models = {{"unusable", unusable}};
  TestServer server(so);
  const auto reports = server::warm_up(server.server().models(), server::ServiceLimits{});
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].output_tokens, 4);
  // As the warning says: a request that leaves it unset is refused, one that sets it is served.
  grpc::ClientContext unset_ctx;
  v1::SummarizeResponse unset;
  const grpc::Status refused = server.stub().Summarize(&unset_ctx, make_request("some text"), &unset);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find(option + " is 0"), std::string::npos) << refused.error_message();
  auto request = make_request("some text");
  set(*request.mutable_options());
  grpc::ClientContext set_ctx;
  v1::SummarizeResponse served_response;
  const grpc::Status served = server.stub().Summarize(&set_ctx, request, &served_response);
  EXPECT_TRUE(served.ok()) << served.error_message();
}

TEST(WarmUp, AModelWhoseDefaultsRequestsMustOverrideIsWarmedUp) {
  FakeModelOptions unusable;
  unusable.repetition_penalty = 0.0;
  expect_warmed_up_and_served_when_set(unusable, "repetition_penalty",
                                       [](v1::GenerationOptions& o) { o.set_repetition_penalty(1.0f); });
}

TEST(WarmUp, AModelWhoseEncoderRepetitionPenaltyRequestsMustOverrideIsWarmedUp) {
  FakeModelOptions unusable;
  unusable.encoder_repetition_penalty = 0.0;
  expect_warmed_up_and_served_when_set(unusable, "encoder_repetition_penalty",
                                       [](v1::GenerationOptions& o) { o.set_encoder_repetition_penalty(1.0f); });
}

}  // namespace
}  // namespace srformer::testing
