// The status a call ends with around a shutdown: what the server's drain did is UNAVAILABLE (retry
// elsewhere), what the client did is its own (CANCELLED), as docs/API.md's error table says; and past its
// deadline: DEADLINE_EXCEEDED, as the client has it.
#include <grpc/support/time.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/call_deadline.h"
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

// srformer_requests_total{model="fake", method, code} (0 before the first such call).
double counted(server::Metrics& metrics, const std::string& method, const std::string& code) {
  return server::testing::sample(metrics.scrape_text(), "srformer_requests_total",
                                 {{"model", "fake"}, {"method", method}, {"code", code}})
      .value_or(0.0);
}

// A request the fake model decodes in one step.
v1::SummarizeRequest one_step_request() {
  auto request = make_request("a document decoded in one long step");
  request.mutable_options()->set_max_new_tokens(1);
  return request;
}

FakeServerOptions slow_server() {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}};
  so.config.max_new_tokens_cap = 1000;
  return so;
}

// A partial_results batch whose items the shutdown cancels at the end of its grace is UNAVAILABLE as a
// call (the API: a partial batch fails whole for a server shutting down), not OK with every item failed,
// which gRPC's retry policy would not retry.
TEST(ShutdownStatus, APartialBatchStillRunningWhenTheGraceEndsIsUnavailable) {
  TestServer server(slow_server());
  v1::SummarizeBatchRequest batch;
  batch.set_partial_results(true);
  for (int i = 0; i < 2; ++i) *batch.add_requests() = long_request(i);
  grpc::ClientContext ctx;
  v1::SummarizeBatchResponse resp;
  auto call = std::async(std::launch::async, [&] { return server.stub().SummarizeBatch(&ctx, batch, &resp); });
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 2; }));
  server.server().shutdown(100ms);
  const grpc::Status status = call.get();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message() << " (" << resp.errors_size() << " item errors)";
}

// The same where the engine refuses an item (it stopped accepting before the service did, as it does in
// the moment between the two): the call is UNAVAILABLE, and the item queued before it is cancelled.
TEST(ShutdownStatus, APartialBatchAnEngineRefusesForShuttingDownIsUnavailable) {
  v1::SummarizeBatchRequest batch;
  batch.set_partial_results(true);
  *batch.add_requests() = long_request(0);
  *batch.add_requests() = long_request(1);
  batch.mutable_requests(1)->set_model("second");
  FakeServerOptions so = slow_server();
  so.models.emplace_back("second", FakeModelOptions{256, 4, 20ms});
  TestServer two(so);
  two.engine("second").stop_accepting();
  grpc::ClientContext ctx;
  v1::SummarizeBatchResponse resp;
  const grpc::Status status = two.stub().SummarizeBatch(&ctx, batch, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message() << " (" << resp.errors_size() << " item errors)";
  EXPECT_TRUE(two.wait_for([](const server::EngineStats& s) { return s.live_requests == 0 && s.queued == 0; }));
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
  const auto calls = [&](const std::string& code) { return counted(metrics, "Summarize", code); };
  EXPECT_EQ(calls("CANCELLED"), 1.0) << metrics.scrape_text();
  EXPECT_EQ(calls("UNAVAILABLE"), 0.0);
}

// Requests still queued when the grace ends are dropped unserved, UNAVAILABLE as the running one, and
// counted with the refusals of a server shutting down (docs/OPERATIONS.md: srformer_requests_rejected_total
// said "refused before queueing", which these were not; the running one is in rows_left{cancelled}).
TEST(ShutdownStatus, QueuedRequestsTheShutdownDropsCountAsShuttingDown) {
  server::Metrics metrics("");
  FakeServerOptions so = slow_server();
  so.metrics = &metrics;
  so.config.max_batch_rows = 1;  // one decodes, the others wait in the queue
  so.config.max_beams = 1;
  TestServer server(so);
  constexpr int kCalls = 3;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<v1::SummarizeResponse> responses(kCalls);
  std::vector<std::future<grpc::Status>> calls;
  for (int i = 0; i < kCalls; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    calls.push_back(std::async(std::launch::async, [&, i] {
      return server.stub().Summarize(contexts[i].get(), long_request(i), &responses[i]);
    }));
  }
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1 && s.queued == 2; }));
  server.server().shutdown(100ms);
  for (auto& call : calls) EXPECT_EQ(call.get().error_code(), grpc::StatusCode::UNAVAILABLE);
  using server::testing::sample;
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_requests_rejected_total", {{"model", "fake"}, {"reason", "shutting_down"}}), 2.0)
      << text;
  EXPECT_EQ(sample(text, "srformer_rows_left_total", {{"model", "fake"}, {"reason", "cancelled"}}), 1.0) << text;
  EXPECT_EQ(
      sample(text, "srformer_requests_total", {{"model", "fake"}, {"method", "Summarize"}, {"code", "UNAVAILABLE"}}),
      static_cast<double>(kCalls));
}

// A long document's call that arrived before the shutdown, whose document is still being tokenized (on
// the service's start threads) when the drain begins, is queued and answered within the grace, as the
// requests already queued are (docs/OPERATIONS.md: requests already accepted finish). It got UNAVAILABLE:
// the engines had stopped accepting by the time its tokens were ready. A call arriving after the signal is
// still refused at once.
TEST(ShutdownStatus, ACallBeingTokenizedWhenTheDrainBeginsIsServedWithinTheGrace) {
  FakeServerOptions so;
  so.long_document_tokenize_delay = 800ms;
  TestServer server(so);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  const auto request = long_document_request();
  auto call = std::async(std::launch::async, [&] { return server.stub().Summarize(&ctx, request, &resp); });
  std::this_thread::sleep_for(300ms);  // the call has reached the server: its document is being tokenized
  std::thread stopper([&] { server.server().shutdown(20s); });
  ASSERT_TRUE(server.wait_for([&](const server::EngineStats&) { return server.server().service().shutting_down(); }));
  grpc::ClientContext late_ctx;
  v1::SummarizeResponse late;
  const grpc::Status refused = server.stub().Summarize(&late_ctx, make_request("a document after the signal"), &late);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  const grpc::Status status = call.get();
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_TRUE(resp.usage().truncated());
  stopper.join();
}

// One whose tokens are ready only after the grace is refused then, UNAVAILABLE as the requests the grace's
// end cancels are; the drain waits for it no longer than for them.
TEST(ShutdownStatus, ACallStillBeingTokenizedWhenTheGraceEndsIsUnavailable) {
  FakeServerOptions so;
  so.long_document_tokenize_delay = 1000ms;
  TestServer server(so);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  const auto request = long_document_request();
  auto call = std::async(std::launch::async, [&] { return server.stub().Summarize(&ctx, request, &resp); });
  std::this_thread::sleep_for(300ms);  // being tokenized
  const auto t0 = std::chrono::steady_clock::now();
  server.server().shutdown(100ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);  // the grace, then gRPC's 2 s for calls still open
  const grpc::Status status = call.get();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

// A second stop signal (Server::cancel_now) during the drain does not wait for such a call: it is refused
// when its tokens are ready, as the requests in flight are cancelled, rather than served within the grace.
TEST(ShutdownStatus, ASecondSignalRefusesACallStillBeingTokenized) {
  FakeServerOptions so;
  so.long_document_tokenize_delay = 1000ms;
  TestServer server(so);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  const auto request = long_document_request();
  auto call = std::async(std::launch::async, [&] { return server.stub().Summarize(&ctx, request, &resp); });
  std::this_thread::sleep_for(300ms);  // being tokenized
  std::thread stopper([&] { server.server().shutdown(20s); });
  ASSERT_TRUE(server.wait_for([&](const server::EngineStats&) { return server.server().service().shutting_down(); }));
  server.server().cancel_now();
  const grpc::Status status = call.get();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  stopper.join();
}

// A summary that its last step completes after the call's deadline reaches no client: gRPC has ended the
// call DEADLINE_EXCEEDED on its side, and the server counts and logs that, not the OK of an answer nobody
// receives (it counted OK, so SrformerHighErrorRate missed such failures), unary and streamed alike.
TEST(DeadlineStatus, ASummaryCompletedPastTheDeadlineCountsAsDeadlineExceeded) {
  server::Metrics metrics("");
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 400ms}}};  // one step outlasts the deadline
  so.metrics = &metrics;
  TestServer server(so);
  const auto request = one_step_request();
  const auto calls = [&](const std::string& method, const std::string& code) { return counted(metrics, method, code); };
  // The server ends the call once its step is done, after the client has given up; then the next call.
  const auto ended = [&](const std::string& method) {
    return server.wait_for([&](const server::EngineStats& s) {
      return s.live_requests == 0 && calls(method, "OK") + calls(method, "DEADLINE_EXCEEDED") == 1;
    });
  };
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 150ms);
    v1::SummarizeResponse resp;
    EXPECT_EQ(server.stub().Summarize(&ctx, request, &resp).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    ASSERT_TRUE(ended("Summarize"));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 150ms);
    auto reader = server.stub().SummarizeStream(&ctx, request);
    v1::SummarizeStreamResponse msg;
    while (reader->Read(&msg)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    ASSERT_TRUE(ended("SummarizeStream"));
  }
  for (const std::string method : {"Summarize", "SummarizeStream"}) {
    EXPECT_EQ(calls(method, "DEADLINE_EXCEEDED"), 1.0) << method << "\n" << metrics.scrape_text();
    EXPECT_EQ(calls(method, "OK"), 0.0) << method;
  }
}

// A deadline past the year 2262 (grpc-timeout takes up to 99999999H, some 11,000 years; a Go client's
// longest timeout is 292 years) overflowed ServerContext::deadline()'s system_clock nanoseconds into the
// past, and every such call was refused with DEADLINE_EXCEEDED before it was queued (curl with
// 'grpc-timeout: 2628000H', 300 years; gRPC's C++ client does not send one so far). The server reads the
// raw deadline: one over a century away is none, a nearer one is the time it leaves.
TEST(DeadlineStatus, ADeadlineCenturiesAwayIsNoneNotOnePast) {
  using server::time_left;
  constexpr int64_t kYear = int64_t{365} * 24 * 3600;
  for (const gpr_clock_type clock : {GPR_CLOCK_REALTIME, GPR_CLOCK_MONOTONIC}) {
    SCOPED_TRACE(clock);
    const auto in = [clock](int64_t seconds) {
      return gpr_time_add(gpr_now(clock), gpr_time_from_seconds(seconds, GPR_TIMESPAN));
    };
    EXPECT_FALSE(time_left(gpr_inf_future(clock)));
    for (const int64_t years : {300, 11000}) EXPECT_FALSE(time_left(in(years * kYear))) << years;
    const auto soon = time_left(in(10));
    ASSERT_TRUE(soon);
    EXPECT_GT(*soon, 9s);
    EXPECT_LE(*soon, 10s);
    const auto past = time_left(in(-5));
    ASSERT_TRUE(past);
    EXPECT_LT(*past, -4s);
    const auto decades = time_left(in(50 * kYear));
    ASSERT_TRUE(decades);
    EXPECT_GT(*decades, std::chrono::seconds(50 * kYear - 1));
  }
}

// The same for a client that cancels while the step that completes its summary runs: CANCELLED, as it has
// it, not OK.
TEST(DeadlineStatus, ASummaryCompletedAfterTheClientCancelledCountsAsCancelled) {
  server::Metrics metrics("");
  FakeModelOptions model{256, 4, 400ms};
  const auto log = model.call_log;
  FakeServerOptions so;
  so.models = {{"fake", model}};
  so.metrics = &metrics;
  TestServer server(so);
  const auto request = one_step_request();
  const auto calls = [&](const std::string& method, const std::string& code) { return counted(metrics, method, code); };
  // Cancels once the request's encode has run: its one step is running (or starts before the cancel is seen).
  const auto cancel_in_the_step = [&](grpc::ClientContext& ctx, size_t encodes) {
    ASSERT_TRUE(server.wait_for([&](const server::EngineStats&) {
      const std::string calls = log->get();
      return static_cast<size_t>(std::count(calls.begin(), calls.end(), 'e')) == encodes;
    }));
    std::this_thread::sleep_for(100ms);
    ctx.TryCancel();
  };
  const auto ended = [&](const std::string& method) {
    return server.wait_for([&](const server::EngineStats& s) {
      return s.live_requests == 0 && calls(method, "OK") + calls(method, "CANCELLED") == 1;
    });
  };
  {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    auto call = std::async(std::launch::async, [&] { return server.stub().Summarize(&ctx, request, &resp); });
    cancel_in_the_step(ctx, 1);
    EXPECT_EQ(call.get().error_code(), grpc::StatusCode::CANCELLED);
    ASSERT_TRUE(ended("Summarize"));
  }
  {
    grpc::ClientContext ctx;
    auto reader = server.stub().SummarizeStream(&ctx, request);
    cancel_in_the_step(ctx, 2);
    v1::SummarizeStreamResponse msg;
    while (reader->Read(&msg)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    ASSERT_TRUE(ended("SummarizeStream"));
  }
  for (const std::string method : {"Summarize", "SummarizeStream"}) {
    EXPECT_EQ(calls(method, "CANCELLED"), 1.0) << method << "\n" << metrics.scrape_text();
    EXPECT_EQ(calls(method, "OK"), 0.0) << method;
  }
}

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// A grpc.health.v1 Watch held open, as a gRPC client's own health checking (healthCheckConfig) holds one on
// each connection: what it reads, and the status it ends with.
class Watch {
 public:
  Watch(const std::shared_ptr<grpc::Channel>& channel, const std::string& service)
      : stub_(grpc::health::v1::Health::NewStub(channel)) {
    ctx_.set_deadline(std::chrono::system_clock::now() + 60s);
    HealthCheckRequest request;
    request.set_service(service);
    reader_ = stub_->Watch(&ctx_, request);
  }
  // The next status, or nullopt once the stream has ended.
  std::optional<HealthCheckResponse::ServingStatus> next() {
    HealthCheckResponse response;
    if (!reader_->Read(&response)) return std::nullopt;
    return response.status();
  }
  grpc::Status finish() { return reader_->Finish(); }

 private:
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader_;
};

// A Watch held open added 2 s to every shutdown: gRPC's own health service ends a Watch only when gRPC
// cancels the calls still open at the end of Server::Shutdown's deadline, however soon the drain was over.
// Its client sees NOT_SERVING, then the end of the stream as the server closes, promptly.
TEST(ShutdownStatus, AnOpenHealthWatchSeesNotServingAndEndsWithoutDelayingTheShutdown) {
  TestServer server;
  Watch overall(server.channel(), "");
  Watch summarizer(server.channel(), "srformer.v1.Summarizer");
  for (Watch* watch : {&overall, &summarizer}) ASSERT_EQ(watch->next(), HealthCheckResponse::SERVING);
  const auto t0 = std::chrono::steady_clock::now();
  server.server().shutdown(5s);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0) << "seconds";
  for (Watch* watch : {&overall, &summarizer}) {
    EXPECT_EQ(watch->next(), HealthCheckResponse::NOT_SERVING);
    EXPECT_EQ(watch->next(), std::nullopt);
    const grpc::Status status = watch->finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  }
}

// The watch does not cut the grace of a request in flight: it reads NOT_SERVING as the drain begins, stays
// open while the request finishes, and ends with the server.
TEST(ShutdownStatus, AHealthWatchSeesTheDrainWhileARequestFinishesInItsGrace) {
  TestServer server(slow_server());
  Watch watch(server.channel(), "");
  ASSERT_EQ(watch.next(), HealthCheckResponse::SERVING);
  auto request = make_request("a document decoded for a while");
  request.mutable_options()->set_max_new_tokens(40);
  request.mutable_options()->set_min_new_tokens(40);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  auto call = std::async(std::launch::async, [&] { return server.stub().Summarize(&ctx, request, &resp); });
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
  std::thread stopper([&] { server.server().shutdown(20s); });
  EXPECT_EQ(watch.next(), HealthCheckResponse::NOT_SERVING);
  const grpc::Status status = call.get();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(watch.next(), std::nullopt);
  EXPECT_EQ(watch.finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  stopper.join();
}

}  // namespace
}  // namespace srformer::testing
