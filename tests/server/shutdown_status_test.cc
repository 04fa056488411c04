// The status a call ends with around a shutdown: what the server's drain did is UNAVAILABLE (retry
// elsewhere), what the client did is its own (CANCELLED), as docs/API.md's error table says.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "server/metrics/metrics.h"
#include "tests/metrics/scrape.h"
#include "tests/server/test_server.h"

namespace srformer::testing {
namespace {

using namespace std::chrono_literals;

v1::SummarizeRequest long_request(int i) {
  auto r = make_request("document " + std::to_string(i) + " that decodes for a long time");
  r.mutable_options()->set_max_new_tokens(1000);
  r.mutable_options()->set_min_new_tokens(1000);
  return r;
}

FakeServerOptions slow_server() {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}};
  so.config.max_new_tokens_cap = 1000;
  return so;
}

// A client that cancels its call while the server drains (accepting nothing new, not yet cancelling)
// cancelled it: the call counts and logs CANCELLED, not the UNAVAILABLE of a request the shutdown ended.
TEST(ShutdownStatus, AClientCancelDuringTheDrainIsCancelledNotUnavailable) {
  server::Metrics metrics("");
  FakeServerOptions so = slow_server();
  so.metrics = &metrics;
  TestServer server(so);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  auto call = std::async(std::launch::async, [&] { return server.stub().Summarize(&ctx, long_request(0), &resp); });
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
  std::thread stopper([&] { server.server().shutdown(20s); });
  ASSERT_TRUE(server.wait_for([&](const server::EngineStats&) { return server.server().service().shutting_down(); }));
  ctx.TryCancel();
  EXPECT_EQ(call.get().error_code(), grpc::StatusCode::CANCELLED);
  stopper.join();  // drained: the request has ended on the server's side too
  using server::testing::sample;
  const auto calls = [&](const std::string& code) {
    return sample(metrics.scrape_text(), "srformer_requests_total",
                  {{"model", "fake"}, {"method", "Summarize"}, {"code", code}})
        .value_or(0.0);
  };
  EXPECT_EQ(calls("CANCELLED"), 1.0) << metrics.scrape_text();
  EXPECT_EQ(calls("UNAVAILABLE"), 0.0);
}

}  // namespace
}  // namespace srformer::testing
