// --warm-up: one short request on every model before the server listens (server/service/warm_up.h).
#include "server/service/warm_up.h"

#include <gtest/gtest.h>

#include "tests/server/test_server.h"

namespace srformer::testing {
namespace {

TEST(WarmUp, RunsAShortRequestOnEveryModelAcrossSegments) {
  FakeServerOptions so;
  FakeModelOptions small{20, 4};  // a 20-token input limit: the warm-up's document is truncated to it
  so.models = {{"alpha", FakeModelOptions{}}, {"small", small}};
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

}  // namespace
}  // namespace srformer::testing
