// The engine behind a real gRPC server (loopback) with fake deterministic models: results equal the
// offline generate() driver, stay identical under concurrency, stream incrementally, and free their
// state when cancelled; queue limits, shutdown, health and reflection behave as documented.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <optional>
#include <random>
#include <thread>

#include "client/grpc_health.h"
#include "client/retry_policy.h"
#include "model/generation/generate.h"
#include "server/metrics/metrics.h"
#include "server/service/message_body.h"
#include "server/service/request_builder.h"
#include "server/system_memory.h"
#include "tests/metrics/scrape.h"
#include "tests/server/test_server.h"
#include "tests/support/log_capture.h"

namespace srformer::testing {
namespace {

// Stores `value` into `flag` as it leaves scope: a test that hangs a fake engine or callback releases it even
// when an assertion returns early, so the server's destruction does not wait for it for good.
class StoreOnExit {
 public:
  StoreOnExit(std::shared_ptr<std::atomic<bool>> flag, bool value) : flag_(std::move(flag)), value_(value) {}
  StoreOnExit(const StoreOnExit&) = delete;
  StoreOnExit& operator=(const StoreOnExit&) = delete;
  ~StoreOnExit() { flag_->store(value_); }

 private:
  std::shared_ptr<std::atomic<bool>> flag_;
  bool value_;
};

using namespace std::chrono_literals;

// The bytes tcmalloc has handed out and not taken back, to measure what the server holds; nullopt where the
// process runs on another allocator.
class TcmallocAllocatedBytes {
 public:
  using PropertyFn = int (*)(const char*, size_t*);
  explicit TcmallocAllocatedBytes(PropertyFn property) : property_(property) {}
  double bytes() const {
    size_t value = 0;
    EXPECT_TRUE(property_("generic.current_allocated_bytes", &value));
    return static_cast<double>(value);
  }

 private:
  PropertyFn property_;
};

std::optional<TcmallocAllocatedBytes> tcmalloc_allocated_bytes() {
  const auto property =
      reinterpret_cast<TcmallocAllocatedBytes::PropertyFn>(dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty"));
  if (property == nullptr) return std::nullopt;
  return TcmallocAllocatedBytes(property);
}

// What the offline driver produces for one document on a fresh fake model: its `returned` best
// hypotheses, best first.
std::vector<Hypothesis> offline_all(const std::string& doc, int max_new, int beams, int returned,
                                    FakeModelOptions mo = {}) {
  FakeModel model(mo);
  FakeTokenizer tok;
  const auto ids = tok.encode(doc);
  const auto input = torch::tensor(ids, torch::kInt64).unsqueeze(0);
  GenerationOptions o;
  o.max_new_tokens = max_new;
  o.num_beams = beams;
  o.num_return_sequences = returned;
  o = with_model_tokens(o, model.config());
  const auto results = generate(model, input, torch::ones_like(input), o,
                                torch::full({1}, static_cast<int64_t>(max_new), torch::kInt64));
  return results.at(0).hypotheses;
}

Hypothesis offline(const std::string& doc, int max_new, int beams, FakeModelOptions mo = {}) {
  return offline_all(doc, max_new, beams, 1, mo).at(0);
}

v1::SummarizeRequest request(const std::string& doc, int max_new, int beams) {
  auto r = make_request(doc);
  r.mutable_options()->set_max_new_tokens(max_new);
  r.mutable_options()->set_num_beams(beams);
  return r;
}

std::string doc_of(int i) {
  std::string d = "document number " + std::to_string(i) + ":";
  for (int j = 0; j < i % 7; ++j) d += " more words here";
  return d;
}

std::vector<int64_t> ids_of(const v1::SummarizeResponse& r) { return {r.token_ids().begin(), r.token_ids().end()}; }

// A unary Summarize of `req` through `stub` on its own thread, within `deadline` where one is given: its
// status and response.
using SummarizeCall = std::future<std::pair<grpc::Status, v1::SummarizeResponse>>;
SummarizeCall summarize_async(v1::Summarizer::Stub& stub, v1::SummarizeRequest req,
                              std::optional<std::chrono::milliseconds> deadline = std::nullopt) {
  return std::async(std::launch::async, [&stub, req = std::move(req), deadline] {
    grpc::ClientContext ctx;
    if (deadline) ctx.set_deadline(std::chrono::system_clock::now() + *deadline);
    v1::SummarizeResponse resp;
    auto status = stub.Summarize(&ctx, req, &resp);
    return std::make_pair(status, resp);
  });
}
SummarizeCall summarize_async(TestServer& server, v1::SummarizeRequest req,
                              std::optional<std::chrono::milliseconds> deadline = std::nullopt) {
  return summarize_async(server.stub(), std::move(req), deadline);
}

// Cancels a stream, reads what it still delivers and returns its status.
grpc::Status cancel_and_finish(grpc::ClientContext& ctx, grpc::ClientReader<v1::SummarizeStreamResponse>& reader) {
  ctx.TryCancel();
  v1::SummarizeStreamResponse msg;
  while (reader.Read(&msg)) {
  }
  return reader.Finish();
}
std::vector<float> logprobs_of(const v1::SummarizeResponse& r) {
  return {r.token_logprobs().begin(), r.token_logprobs().end()};
}

TEST(EngineService, UnaryGreedyAndBeamEqualOfflineGenerate) {
  TestServer server;
  for (const int beams : {1, 3}) {
    for (const int i : {0, 3, 5}) {
      grpc::ClientContext ctx;
      v1::SummarizeResponse resp;
      const auto status = server.stub().Summarize(&ctx, request(doc_of(i), 24, beams), &resp);
      ASSERT_TRUE(status.ok()) << status.error_message();
      const Hypothesis ref = offline(doc_of(i), 24, beams);
      EXPECT_EQ(ids_of(resp), ref.tokens) << "beams=" << beams << " doc " << i;
      EXPECT_EQ(logprobs_of(resp), ref.token_logprobs) << "beams=" << beams << " doc " << i;
      EXPECT_FLOAT_EQ(resp.score(), static_cast<float>(ref.score));
      EXPECT_EQ(resp.summary(), FakeTokenizer().decode(ref.tokens));
      EXPECT_FALSE(resp.summary().empty());
      EXPECT_EQ(resp.model(), "fake");
      const auto& u = resp.usage();
      EXPECT_EQ(u.input_tokens(), static_cast<int>(doc_of(i).size()) + 1);
      EXPECT_EQ(u.output_tokens(), resp.token_ids_size());
      EXPECT_EQ(u.segments(), (u.input_tokens() + 3) / 4);
      EXPECT_GT(u.state_bytes(), 0);
      EXPECT_GT(u.raf_firing_rate(), 0.0);
      EXPECT_LT(u.raf_firing_rate(), 1.0);
      EXPECT_EQ(resp.finish_reason(),
                ref.finish_reason == FinishReason::kEos ? v1::FINISH_REASON_EOS : v1::FINISH_REASON_LENGTH);
    }
  }
}

TEST(EngineService, BeamSearchReturnsTheNextBestHypothesesAsAlternatives) {
  TestServer server;
  const std::string doc = doc_of(3);
  auto req = request(doc, 16, 4);
  req.mutable_options()->set_num_return_sequences(3);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  const auto status = server.stub().Summarize(&ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const auto ref = offline_all(doc, 16, 4, 3);  // what generate() returns for the same options, best first
  ASSERT_EQ(ref.size(), 3u);
  EXPECT_EQ(ids_of(resp), ref[0].tokens);
  ASSERT_EQ(resp.alternatives_size(), 2);
  for (int a = 0; a < 2; ++a) {
    const auto& alt = resp.alternatives(a);
    const auto& h = ref[static_cast<size_t>(a) + 1];
    EXPECT_EQ(std::vector<int64_t>(alt.token_ids().begin(), alt.token_ids().end()), h.tokens) << "alternative " << a;
    EXPECT_EQ(std::vector<float>(alt.token_logprobs().begin(), alt.token_logprobs().end()), h.token_logprobs);
    EXPECT_FLOAT_EQ(alt.score(), static_cast<float>(h.score));
    EXPECT_LE(alt.score(), a == 0 ? resp.score() : resp.alternatives(a - 1).score());  // best first
    EXPECT_EQ(alt.summary(), FakeTokenizer().decode(h.tokens));
  }
  // Without the option, one answer.
  grpc::ClientContext ctx1;
  v1::SummarizeResponse one;
  ASSERT_TRUE(server.stub().Summarize(&ctx1, request(doc, 16, 4), &one).ok());
  EXPECT_EQ(one.alternatives_size(), 0);
  EXPECT_EQ(ids_of(one), ref[0].tokens);
}

TEST(EngineService, SameResultAloneAndAmong32ConcurrentRequests) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 2ms}}};
  TestServer server(so);
  struct Case {
    v1::SummarizeRequest req;
    std::vector<int64_t> alone;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 32; ++i) {
    auto r = request(doc_of(i) + std::string(static_cast<size_t>(i * 3), 'x'), 8 + (i * 5) % 30, 1 + i % 3);
    if (i % 4 == 1) r.mutable_options()->set_no_repeat_ngram_size(2);
    if (i % 5 == 2) r.mutable_options()->set_expected_length(40);
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    ASSERT_TRUE(server.stub().Summarize(&ctx, r, &resp).ok());
    cases.push_back({r, ids_of(resp)});
  }
  std::vector<SummarizeCall> futures;
  for (const auto& c : cases) futures.push_back(summarize_async(server, c.req));
  for (size_t i = 0; i < cases.size(); ++i) {
    auto [status, resp] = futures[i].get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(ids_of(resp), cases[i].alone) << "request " << i;
  }
  const auto stats = server.engine().stats();
  EXPECT_GT(stats.max_live_rows, 8) << "requests were not batched together";
  // Step timing splits model time (the fake sleeps 2 ms per step) from the engine's own work.
  EXPECT_GE(stats.model_seconds, 0.002 * static_cast<double>(stats.steps));
  EXPECT_GE(stats.step_seconds, stats.model_seconds);
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 0 && s.state_bytes == 0; }));
}

TEST(EngineService, StreamingIsIncrementalAndConcatenatesToTheSummary) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 15ms}}};
  TestServer server(so);
  grpc::ClientContext ctx;
  const int64_t steps_before = server.engine().stats().steps;
  auto reader = server.stub().SummarizeStream(&ctx, request(doc_of(4), 20, 1));
  v1::SummarizeStreamResponse msg;
  std::string text;
  std::vector<int64_t> ids;
  std::vector<float> logprobs;
  std::optional<int64_t> steps_at_first_token;  // decoder steps the engine had run when the first token came
  v1::SummarizeResponse final;
  bool got_final = false;
  while (reader->Read(&msg)) {
    ASSERT_FALSE(got_final) << "message after the final one";
    if (msg.has_token()) {
      EXPECT_EQ(msg.token().step(), static_cast<int>(ids.size()));
      EXPECT_GE(msg.token().segment(), 0);
      text += msg.token().text();
      ids.push_back(msg.token().token_id());
      logprobs.push_back(msg.token().logprob());
      if (!steps_at_first_token) steps_at_first_token = server.engine().stats().steps - steps_before;
    } else {
      final = msg.final();
      got_final = true;
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_TRUE(got_final);
  EXPECT_EQ(ids, ids_of(final));
  EXPECT_EQ(logprobs, logprobs_of(final));
  double sum = 0;
  for (const float p : logprobs) {
    EXPECT_LE(p, 0.0f);
    sum += p;
  }
  EXPECT_NEAR(sum, final.score(), 1e-4);  // greedy: the score is their sum
  EXPECT_EQ(text, final.summary());
  ASSERT_GE(ids.size(), 5u);
  // Tokens must not all arrive at once at the end: the first came while most of the steps (15 ms each) were
  // still to run. Counted in steps, not in the client's clock, which a busy machine delayed by a step or two
  // (the client's arrival times spanned 186 ms of the 195 ms the old bound asked of 15 tokens).
  ASSERT_TRUE(steps_at_first_token.has_value());
  EXPECT_LT(*steps_at_first_token, static_cast<int64_t>(ids.size()) / 2)
      << "the first of " << ids.size() << " tokens came after step " << *steps_at_first_token;
  EXPECT_EQ(ids, offline(doc_of(4), 20, 1).tokens);
}

TEST(EngineService, BeamStreamEmitsTheBestHypothesisOnce) {
  TestServer server;
  grpc::ClientContext ctx;
  auto reader = server.stub().SummarizeStream(&ctx, request(doc_of(2), 16, 4));
  v1::SummarizeStreamResponse msg;
  std::string text;
  std::vector<float> logprobs;
  v1::SummarizeResponse final;
  while (reader->Read(&msg)) {
    if (msg.has_token()) {
      text += msg.token().text();
      logprobs.push_back(msg.token().logprob());
    }
    if (msg.has_final()) final = msg.final();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text, final.summary());
  const Hypothesis ref = offline(doc_of(2), 16, 4);
  EXPECT_EQ(ids_of(final), ref.tokens);
  EXPECT_EQ(logprobs_of(final), ref.token_logprobs);
  EXPECT_EQ(logprobs, ref.token_logprobs);
}

TEST(EngineService, CancellationFreesTheRowWithinAStep) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}};
  so.config.max_new_tokens_cap = 1000;
  TestServer server(so);
  auto req = request(std::string(200, 'q'), 1000, 2);  // EOS only after many steps
  req.mutable_options()->set_min_new_tokens(1000);
  grpc::ClientContext ctx;
  auto reader = server.stub().SummarizeStream(&ctx, req);
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 2 && s.state_bytes > 0; }));
  {
    const auto stats = server.engine().stats();  // one snapshot: both from the same walk of the state
    EXPECT_GE(stats.state_held_bytes, stats.state_bytes);
  }
  const int steps_before = server.engine().stats().steps;
  EXPECT_EQ(cancel_and_finish(ctx, *reader).error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(server.wait_for(
      [](const server::EngineStats& s) { return s.live_rows == 0 && s.state_bytes == 0 && s.state_held_bytes == 0; },
      2s));
  EXPECT_LE(server.engine().stats().steps - steps_before, 3);
}

// srformer_raf_fired_ratio follows the live rows: present while a request decodes, gone once none is live
// (it kept the last batch's value for ever after, while srformer_state_bytes dropped to 0).
TEST(EngineService, RafFiredRatioGoesWithTheLastLiveRow) {
  using server::testing::sample;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}};
  so.config.max_new_tokens_cap = 1000;
  so.metrics = &metrics;
  TestServer server(so);
  auto req = request(std::string(200, 'q'), 1000, 1);
  req.mutable_options()->set_min_new_tokens(1000);
  grpc::ClientContext ctx;
  auto reader = server.stub().SummarizeStream(&ctx, req);
  const auto ratio = [&] {
    return sample(metrics.scrape_text(), "srformer_raf_fired_ratio", {{"model", "fake"}, {"layer", "0"}});
  };
  for (int i = 0; i < 300 && !ratio(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(ratio().has_value()) << metrics.scrape_text();
  EXPECT_GE(*ratio(), 0.0);
  ctx.TryCancel();
  v1::SummarizeStreamResponse msg;
  while (reader->Read(&msg)) {
  }
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0 && s.state_bytes == 0; }, 2s));
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_state_bytes", {{"model", "fake"}}), 0.0) << text;
  EXPECT_FALSE(ratio().has_value()) << text;
}

// A client that stops reading its stream, then cancels or lets its deadline pass, never gets the final
// message: the call counts and logs the status the client has. The summary was complete, so the server
// counted OK in srformer_requests_total and logged the answer as delivered.
TEST(EngineService, AStreamItsClientStoppedReadingCountsTheClientsStatus) {
  LogCapture captured;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.config.max_new_tokens_cap = 1000;
  so.metrics = &metrics;
  TestServer server(so);
  // A client that reads nothing: its small window stalls the server's writes after a few messages.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  const auto stub =
      v1::Summarizer::NewStub(grpc::CreateCustomChannel(server.target(), grpc::InsecureChannelCredentials(), args));
  const auto calls = [&](const std::string& code) {
    return server::testing::sample(metrics.scrape_text(), "srformer_requests_total",
                                   {{"model", "fake"}, {"method", "SummarizeStream"}, {"code", code}})
        .value_or(0.0);
  };
  const auto ended = [&] { return calls("OK") + calls("CANCELLED") + calls("DEADLINE_EXCEEDED"); };
  for (const bool by_deadline : {false, true}) {
    auto req = request(doc_of(3), 1000, 1);
    req.set_request_id(by_deadline ? "stalled-deadline" : "stalled-cancel");
    req.mutable_options()->set_min_new_tokens(1000);
    grpc::ClientContext ctx;
    const auto deadline = std::chrono::system_clock::now() + 2s;
    if (by_deadline) ctx.set_deadline(deadline);
    const double ended_before = ended();
    auto reader = stub->SummarizeStream(&ctx, req);
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
    // The summary is complete and its result handed over; its messages wait for the client.
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 0; }, 20s));
    ASSERT_TRUE(server.engine().wait_idle(std::chrono::steady_clock::now() + 5s));
    ASSERT_EQ(ended(), ended_before) << "the writes did not stall: the test proves nothing";
    if (by_deadline) {
      std::this_thread::sleep_until(deadline + 100ms);  // still reading nothing
    } else {
      ctx.TryCancel();
    }
    v1::SummarizeStreamResponse msg;
    while (reader->Read(&msg)) {
    }
    EXPECT_EQ(reader->Finish().error_code(),
              by_deadline ? grpc::StatusCode::DEADLINE_EXCEEDED : grpc::StatusCode::CANCELLED);
    for (int i = 0; i < 200 && ended() == ended_before; ++i) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(calls("OK"), 0.0) << metrics.scrape_text();
  EXPECT_EQ(calls("CANCELLED"), 1.0);
  EXPECT_EQ(calls("DEADLINE_EXCEEDED"), 1.0);
  const std::string log = captured.text();
  EXPECT_NE(log.find("request stalled-cancel: SummarizeStream model=fake ended with CANCELLED"), std::string::npos)
      << log;
  EXPECT_NE(log.find("request stalled-deadline: SummarizeStream model=fake ended with DEADLINE_EXCEEDED"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("request stalled-cancel: SummarizeStream model=fake in="), std::string::npos) << log;
}

// A client that reads nothing: its small window stalls the server's writes after a few messages.
std::unique_ptr<v1::Summarizer::Stub> stalling_stub(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  return v1::Summarizer::NewStub(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
}

// A stream of 1,000 tokens whose summary is complete and whose messages wait for `stub`'s client.
std::unique_ptr<grpc::ClientReader<v1::SummarizeStreamResponse>> stalled_stream(TestServer& server,
                                                                                v1::Summarizer::Stub& stub,
                                                                                grpc::ClientContext& ctx) {
  auto req = request(doc_of(3), 1000, 1);
  req.mutable_options()->set_min_new_tokens(1000);
  auto reader = stub.SummarizeStream(&ctx, req);
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 0; }, 20s));
  EXPECT_TRUE(server.engine().wait_idle(std::chrono::steady_clock::now() + 5s));
  return reader;
}

TEST(EngineService, CallsPastAConnectionsStreamLimitWaitOnTheClientsSide) {
  server::Metrics metrics("");
  FakeServerOptions so;
  so.config.max_new_tokens_cap = 1000;
  so.config.max_streams_per_connection = 1;
  so.metrics = &metrics;
  TestServer server(so);
  const auto stub = stalling_stub(server.target());
  grpc::ClientContext stalled_ctx;
  auto stalled = stalled_stream(server, *stub, stalled_ctx);
  const auto summarize_calls = [&] {
    double n = 0;
    for (const char* code : {"OK", "DEADLINE_EXCEEDED", "CANCELLED", "RESOURCE_EXHAUSTED"}) {
      n += server::testing::sample(metrics.scrape_text(), "srformer_requests_total",
                                   {{"model", "fake"}, {"method", "Summarize"}, {"code", code}})
               .value_or(0.0);
    }
    return n;
  };
  // The connection's one stream is taken: a second call waits on the client's side, up to its deadline,
  // and never reaches the service.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 1s);
    v1::SummarizeResponse resp;
    EXPECT_EQ(stub->Summarize(&ctx, request(doc_of(1), 4, 1), &resp).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // One with time to wait runs once the stalled stream has ended: queued, not failed.
  auto waiting = summarize_async(*stub, request(doc_of(2), 4, 1), 60s);
  EXPECT_EQ(summarize_calls(), 0.0) << "a call past the connection's stream limit reached the service";
  // Another connection is not held up by this one's limit.
  grpc::ClientContext other_ctx;
  v1::SummarizeResponse other;
  EXPECT_TRUE(server.stub().Summarize(&other_ctx, request(doc_of(4), 4, 1), &other).ok());
  EXPECT_EQ(cancel_and_finish(stalled_ctx, *stalled).error_code(), grpc::StatusCode::CANCELLED);
  const auto [status, resp] = waiting.get();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ids_of(resp), offline(doc_of(2), 4, 1).tokens);
}

// srformer_stream_unread_bytes (and --max-unread-stream-memory) counted a queued message's serialized
// bytes, ~20 for a token message, of the ~330 it holds (gRPC's byte buffer around them): the limit let
// some 16 times its size pile up, and OPERATIONS.md's "some 400 bytes a token message" was not what it
// counted. held_bytes() is measured here against what the allocator hands out.
TEST(EngineService, UnreadStreamBytesCountWhatAQueuedMessageHoldsInMemory) {
  const auto allocated = tcmalloc_allocated_bytes();
  if (!allocated) GTEST_SKIP() << "not running on tcmalloc";
  for (const size_t text : {size_t{3}, size_t{200}}) {  // a token message; one past an inline slice
    v1::SummarizeStreamResponse msg;
    auto* t = msg.mutable_token();
    t->set_token_id(31999);
    t->set_text(std::string(text, 'w'));
    t->set_step(517);
    t->set_segment(3);
    t->set_logprob(-1.25F);
    constexpr int kMessages = 20000;
    std::deque<grpc::ByteBuffer> held;
    double counted = 0;
    const double before = allocated->bytes();
    for (int i = 0; i < kMessages; ++i) {
      grpc::ByteBuffer body;
      ASSERT_TRUE(server::serialize_body(msg, body).ok());
      counted += static_cast<double>(server::held_bytes(body));
      held.push_back(std::move(body));
    }
    const double measured = allocated->bytes() - before;
    EXPECT_GT(counted, 0.8 * measured) << "text of " << text << ": " << counted / kMessages << " bytes counted, "
                                       << measured / kMessages << " held per message";
    EXPECT_LT(counted, 1.25 * measured) << "text of " << text << ": " << counted / kMessages << " bytes counted, "
                                        << measured / kMessages << " held per message";
  }
}

TEST(EngineService, NewStreamsAreRefusedWhileStreamsNotReadHoldMoreThanTheLimit) {
  LogCapture captured;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.config.max_new_tokens_cap = 1000;
  so.config.max_unread_stream_bytes = 1024;  // less than one stalled stream holds
  so.metrics = &metrics;
  TestServer server(so);
  const auto unread = [&] {
    return server::testing::sample(metrics.scrape_text(), "srformer_stream_unread_bytes", {}).value_or(-1.0);
  };
  const auto rejected = [&] {
    return server::testing::sample(metrics.scrape_text(), "srformer_requests_rejected_total",
                                   {{"model", "fake"}, {"reason", "unread_streams"}})
        .value_or(0.0);
  };
  EXPECT_EQ(unread(), 0.0);
  const auto stub = stalling_stub(server.target());
  grpc::ClientContext stalled_ctx;
  auto stalled = stalled_stream(server, *stub, stalled_ctx);
  EXPECT_GT(unread(), 1024.0) << metrics.scrape_text();
  // A new stream, from another client, is refused and told why.
  {
    grpc::ClientContext ctx;
    auto reader = server.stub().SummarizeStream(&ctx, request(doc_of(1), 4, 1));
    v1::SummarizeStreamResponse msg;
    int messages = 0;
    while (reader->Read(&msg)) ++messages;
    EXPECT_EQ(messages, 0);
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(status.error_message().find("stream messages their clients have not read"), std::string::npos)
        << status.error_message();
    EXPECT_NE(status.error_message().find("--max-unread-stream-memory"), std::string::npos);
  }
  EXPECT_EQ(rejected(), 1.0);
  // A Summarize holds nothing of the kind: it still runs.
  {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    EXPECT_TRUE(server.stub().Summarize(&ctx, request(doc_of(1), 4, 1), &resp).ok());
  }
  // Once the stalled stream ends, what it held is released and streams are taken again.
  EXPECT_EQ(cancel_and_finish(stalled_ctx, *stalled).error_code(), grpc::StatusCode::CANCELLED);
  for (int i = 0; i < 250 && unread() != 0.0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(unread(), 0.0);
  {
    grpc::ClientContext ctx;
    auto reader = server.stub().SummarizeStream(&ctx, request(doc_of(1), 4, 1));
    std::vector<int64_t> ids;
    v1::SummarizeStreamResponse msg;
    while (reader->Read(&msg)) {
      if (msg.has_token()) ids.push_back(msg.token().token_id());
    }
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_EQ(ids, offline(doc_of(1), 4, 1).tokens);
  }
  EXPECT_EQ(rejected(), 1.0);
  for (int i = 0; i < 250 && unread() != 0.0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(unread(), 0.0);
  EXPECT_NE(captured.text().find("SummarizeStream model=fake refused with RESOURCE_EXHAUSTED"), std::string::npos);
}

// A Summarize or SummarizeBatch response waits in the server's memory until its client takes it, as a
// stream's messages do, and for as long (without a deadline, as long as its connection): no gauge counted
// it, so memory pinned by clients that do not read their answers showed nowhere.
// srformer_response_unread_bytes counts it from the write until the client has it or the call ends.
TEST(EngineService, UnaryResponsesNotReadCountInUnreadResponseBytes) {
  server::Metrics metrics("");
  FakeServerOptions so;
  so.config.max_new_tokens_cap = 1000;
  so.metrics = &metrics;
  TestServer server(so);
  const auto unread = [&] {
    return server::testing::sample(metrics.scrape_text(), "srformer_response_unread_bytes", {}).value_or(-1.0);
  };
  const auto wait_for_unread = [&](const std::function<bool(double)>& until) {
    for (int i = 0; i < 250 && !until(unread()); ++i) std::this_thread::sleep_for(20ms);
    return unread();
  };
  EXPECT_EQ(unread(), 0.0) << metrics.scrape_text();
  const auto stub = stalling_stub(server.target());
  auto req = request(doc_of(3), 1000, 1);
  req.mutable_options()->set_min_new_tokens(1000);
  // The async API: ReadInitialMetadata() sends the request, and the client asks for the response only with
  // Finish(). The queue is polled throughout (it drives the channel's I/O); each tag is a promise.
  struct Poller {
    grpc::CompletionQueue cq;
    std::thread thread{[this] {
      void* tag = nullptr;
      bool ok = false;
      while (cq.Next(&tag, &ok)) static_cast<std::promise<void>*>(tag)->set_value();
    }};
    ~Poller() {
      cq.Shutdown();
      thread.join();
    }
  } poller;
  // Summarize: the client starts the call and does not ask for its response.
  {
    grpc::ClientContext ctx;
    auto rpc = stub->PrepareAsyncSummarize(&ctx, req, &poller.cq);
    rpc->StartCall();
    std::promise<void> metadata;
    rpc->ReadInitialMetadata(&metadata);
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 0; }, 20s));
    // 1,000 token ids and log-probabilities alone are some 6 KB, over the client's 1 KB window.
    EXPECT_GT(wait_for_unread([](double v) { return v > 0; }), 6000.0) << metrics.scrape_text();
    std::this_thread::sleep_for(200ms);
    EXPECT_GT(unread(), 6000.0) << "the response was taken although the client reads nothing";
    // Read: released.
    v1::SummarizeResponse resp;
    grpc::Status status;
    std::promise<void> done;
    rpc->Finish(&resp, &status, &done);
    ASSERT_EQ(done.get_future().wait_for(10s), std::future_status::ready);
    EXPECT_EQ(metadata.get_future().wait_for(10s), std::future_status::ready);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(resp.token_ids_size(), 1000);
    EXPECT_EQ(wait_for_unread([](double v) { return v == 0; }), 0.0);
  }
  // SummarizeBatch, whose client cancels instead: released too.
  {
    v1::SummarizeBatchRequest batch;
    *batch.add_requests() = req;
    *batch.add_requests() = req;
    grpc::ClientContext ctx;
    auto rpc = stub->PrepareAsyncSummarizeBatch(&ctx, batch, &poller.cq);
    rpc->StartCall();
    std::promise<void> metadata;
    rpc->ReadInitialMetadata(&metadata);
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests > 0; }));
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 0; }, 20s));
    EXPECT_GT(wait_for_unread([](double v) { return v > 0; }), 12000.0) << metrics.scrape_text();
    ctx.TryCancel();
    v1::SummarizeBatchResponse resp;
    grpc::Status status;
    std::promise<void> done;
    rpc->Finish(&resp, &status, &done);
    ASSERT_EQ(done.get_future().wait_for(10s), std::future_status::ready);
    EXPECT_EQ(metadata.get_future().wait_for(10s), std::future_status::ready);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_EQ(wait_for_unread([](double v) { return v == 0; }), 0.0);
  }
  // Streams are counted apart (srformer_stream_unread_bytes, which --max-unread-stream-memory bounds).
  EXPECT_EQ(server::testing::sample(metrics.scrape_text(), "srformer_stream_unread_bytes", {}), 0.0);
}

// A call kept its parsed request, and gRPC its request message, until it ended: two copies of its document
// held as long as the request queued, decoded and then waited for a client that does not read its answer
// (measured: 2.5 MB an unread Summarize of a 1 MiB document; 0.3 MB once both are released after parsing).
// Measured against what the allocator hands out.
TEST(EngineService, AnUnreadAnswerDoesNotKeepItsDocument) {
  const auto allocated = tcmalloc_allocated_bytes();
  if (!allocated) GTEST_SKIP() << "not running on tcmalloc";
  FakeServerOptions so;
  so.config.max_new_tokens_cap = 1000;
  TestServer server(so);
  const auto stub = stalling_stub(server.target());
  std::string doc;
  while (doc.size() < (1u << 20)) doc += "word ";
  auto req = request(doc, 1000, 1);
  req.set_truncation(v1::TRUNCATION_POLICY_TRUNCATE);
  req.mutable_options()->set_min_new_tokens(1000);
  grpc::CompletionQueue cq;
  std::thread poller([&] {
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
    }
  });
  constexpr int kCalls = 8;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<v1::SummarizeResponse>>> calls;
  const double before = allocated->bytes();
  for (int i = 0; i < kCalls; ++i) {  // one at a time: each has left the engine before the next
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    calls.push_back(stub->PrepareAsyncSummarize(contexts.back().get(), req, &cq));
    calls.back()->StartCall();
    calls.back()->ReadInitialMetadata(nullptr);  // sends the request; the response is never asked for
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 0; }, 20s));
  }
  std::this_thread::sleep_for(200ms);
  const double per_call = (allocated->bytes() - before) / kCalls;
  // The response and what gRPC keeps of a call: not its document (gRPC's copy, in the slices it arrived in,
  // held ~1.45 times its size; the parsed one its size).
  EXPECT_LT(per_call, 0.6 * static_cast<double>(doc.size())) << per_call << " bytes held per unread call";
  for (auto& context : contexts) context->TryCancel();
  calls.clear();
  cq.Shutdown();
  poller.join();
}

// A client that takes none of its stream's messages, without a deadline, held them (and, while its
// summary was decoding, its batch row) until it went away; over --max-unread-stream-memory no stream was
// taken meanwhile. --stream-stall-timeout-ms ends it, with a status its client gets, whether the summary
// was still decoding or complete; a client that reads is never ended, however slowly its tokens come.
TEST(EngineService, AStreamWhoseClientTakesNoneOfItsMessagesIsEndedAfterTheStallTimeout) {
  LogCapture captured;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.models = {{"fake", {}}, {"paced", FakeModelOptions{256, 4, 5ms}}, {"slow", FakeModelOptions{256, 4, 400ms}}};
  so.config.max_new_tokens_cap = 1000;
  so.config.max_unread_stream_bytes = 1024;  // less than one stalled stream holds
  so.config.stream_stall_timeout_ms = 300;
  so.metrics = &metrics;
  TestServer server(so);
  const auto unread = [&] {
    return server::testing::sample(metrics.scrape_text(), "srformer_stream_unread_bytes", {}).value_or(-1.0);
  };
  const auto stalled_total = [&] {
    double n = 0;
    for (const char* model : {"fake", "paced"}) {
      n += server::testing::sample(metrics.scrape_text(), "srformer_streams_stalled_total", {{"model", model}})
               .value_or(-1.0);
    }
    return n;
  };
  const auto calls = [&](const std::string& code) {
    double n = 0;
    for (const char* model : {"fake", "paced"}) {
      n += server::testing::sample(metrics.scrape_text(), "srformer_requests_total",
                                   {{"model", model}, {"method", "SummarizeStream"}, {"code", code}})
               .value_or(0.0);
    }
    return n;
  };
  EXPECT_EQ(stalled_total(), 0.0);
  const auto stub = stalling_stub(server.target());
  // Ended while its summary is still decoding (5 s of steps): its row leaves the batch.
  {
    auto req = request(doc_of(3), 1000, 1);
    req.mutable_options()->set_min_new_tokens(1000);
    req.set_request_id("stall-decoding");
    req.set_model("paced");
    grpc::ClientContext ctx;  // no deadline
    const auto t0 = std::chrono::steady_clock::now();
    auto reader = stub->SummarizeStream(&ctx, req);
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }, 10s, "paced"));
    EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0 && s.state_bytes == 0; },
                                10s, "paced"));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s) << "the summary was decoded to its end";
    for (int i = 0; i < 250 && unread() != 0.0; ++i) std::this_thread::sleep_for(20ms);
    EXPECT_EQ(unread(), 0.0);
    v1::SummarizeStreamResponse msg;
    while (reader->Read(&msg)) {
    }
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_NE(status.error_message().find("had taken none of its messages for 300 ms (--stream-stall-timeout-ms)"),
              std::string::npos)
        << status.error_message();
  }
  // Ended once its summary is complete and its messages wait: what they held is freed, and streams are
  // taken again, although the client neither cancels nor has a deadline.
  {
    grpc::ClientContext ctx;
    auto reader = stalled_stream(server, *stub, ctx);
    for (int i = 0; i < 250 && unread() != 0.0; ++i) std::this_thread::sleep_for(20ms);
    EXPECT_EQ(unread(), 0.0);
    grpc::ClientContext other;
    auto fresh = server.stub().SummarizeStream(&other, request(doc_of(1), 4, 1));
    v1::SummarizeStreamResponse msg;
    std::vector<int64_t> ids;
    while (fresh->Read(&msg)) {
      if (msg.has_token()) ids.push_back(msg.token().token_id());
    }
    EXPECT_TRUE(fresh->Finish().ok());
    EXPECT_EQ(ids, offline(doc_of(1), 4, 1).tokens);
    // The client gets what its window had taken, then the status: the messages the server held are gone.
    int tokens = 0;
    bool final = false;
    while (reader->Read(&msg)) {
      tokens += msg.has_token() ? 1 : 0;
      final = final || msg.has_final();
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_LT(tokens, 1000);
    EXPECT_FALSE(final);
  }
  for (int i = 0; i < 250 && stalled_total() < 2.0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(stalled_total(), 2.0) << metrics.scrape_text();
  EXPECT_EQ(calls("RESOURCE_EXHAUSTED"), 2.0);
  EXPECT_EQ(calls("CANCELLED"), 0.0);
  // A client that reads, on tokens coming further apart than the timeout, is not ended.
  {
    auto req = request(doc_of(2), 3, 1);
    req.set_model("slow");
    req.mutable_options()->set_min_new_tokens(3);
    grpc::ClientContext ctx;
    auto reader = server.stub().SummarizeStream(&ctx, req);
    v1::SummarizeStreamResponse msg;
    int tokens = 0;
    while (reader->Read(&msg)) tokens += msg.has_token() ? 1 : 0;
    const grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(tokens, 3);
  }
  const std::string log = captured.text();
  EXPECT_NE(log.find("request stall-decoding: SummarizeStream model=paced ended with RESOURCE_EXHAUSTED: the server "
                     "ended the stream: its client had taken none of its messages"),
            std::string::npos)
      << log;
}

TEST(EngineService, DeadlineEndsTheRequestAndFreesItsState) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}};
  so.config.max_new_tokens_cap = 1000;
  TestServer server(so);
  auto req = request(std::string(100, 'q'), 1000, 1);
  req.mutable_options()->set_min_new_tokens(1000);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 300ms);
  v1::SummarizeResponse resp;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(server.stub().Summarize(&ctx, req, &resp).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0 && s.state_bytes == 0; }, 2s));
}

// tcmalloc keeps the memory a load freed for reuse; once the batch has been idle for
// --free-memory-after-idle-ms the engine gives it back, so that resident memory follows the load down
// (it stayed at the peak: +200 MiB idle after a demo-model load).
TEST(EngineService, AnIdleEngineGivesTheAllocatorsFreeMemoryBack) {
  if (!server::allocator_free_bytes()) GTEST_SKIP() << "not running on tcmalloc";
  FakeServerOptions so;
  so.config.free_memory_after_idle_ms = 50;
  TestServer server(so);
  constexpr int64_t kBlock = int64_t{256} << 20;
  {  // what a load leaves behind: a large block freed to the allocator
    void* const block = std::malloc(kBlock);
    ASSERT_NE(block, nullptr);
    std::memset(block, 1, kBlock);
    asm volatile("" : : "r"(block) : "memory");  // the compiler may not drop the block
    std::free(block);
  }
  ASSERT_GE(*server::allocator_free_bytes(), kBlock);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  ASSERT_TRUE(server.stub().Summarize(&ctx, request(doc_of(3), 16, 2), &resp).ok());
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0 && s.queued == 0; }, 5s));
  // The release comes 50 ms after the batch empties, on the engine thread.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (*server::allocator_free_bytes() >= kBlock / 2 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_LT(*server::allocator_free_bytes(), kBlock / 2);
}

// A fake encoder of `layers` x `delay` (each layer logged; steps of 5 ms). By default 50 x 40 ms: a request
// that goes while it encodes stops it within a layer (deadline, cancellation, shutdown), where the whole
// encode would run 2 s for nobody.
FakeModelOptions slow_encoder(int layers = 50, std::chrono::milliseconds delay = 40ms) {
  FakeModelOptions mo{256, 4, 5ms};
  mo.encode_layers = layers;
  mo.encode_layer_delay = delay;
  return mo;
}

// Whether the slow encoder ran its first layer within 10 s.
bool encode_started(const FakeModelOptions& mo) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (mo.encode_layers_run->load() == 0) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(EngineService, CancellingDuringALongEncodeStopsItWithinALayer) {
  FakeServerOptions so;
  const auto mo = slow_encoder();
  so.models = {{"fake", mo}};
  TestServer server(so);
  grpc::ClientContext ctx;
  auto reader = server.stub().SummarizeStream(&ctx, request(std::string(100, 'q'), 8, 1));
  const auto& layers = *mo.encode_layers_run;
  ASSERT_TRUE(encode_started(mo));
  EXPECT_EQ(cancel_and_finish(ctx, *reader).error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.encodes_abandoned == 1; }, 5s));
  EXPECT_LT(layers.load(), mo.encode_layers) << "the encoder ran to its end";
  EXPECT_EQ(server.engine().stats().encodes, 0);
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 0 && s.state_bytes == 0; }));
  // The engine serves on.
  grpc::ClientContext next;
  v1::SummarizeResponse resp;
  EXPECT_TRUE(server.stub().Summarize(&next, request("hello", 4, 1), &resp).ok());
}

TEST(EngineService, ADeadlinePassingDuringTheEncodeStopsIt) {
  FakeServerOptions so;
  const auto mo = slow_encoder();
  so.models = {{"fake", mo}};
  TestServer server(so);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 300ms);
  v1::SummarizeResponse resp;
  EXPECT_EQ(server.stub().Summarize(&ctx, request(std::string(100, 'q'), 8, 1), &resp).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.encodes_abandoned == 1; }, 5s))
      << "encodes " << server.engine().stats().encodes;
  EXPECT_LT(mo.encode_layers_run->load(), mo.encode_layers);
}

// A request whose batch is encoding is neither queued nor decoding yet: the drain still waits for it.
TEST(EngineService, GracefulShutdownWaitsForARequestBeingEncoded) {
  FakeServerOptions so;
  const auto mo = slow_encoder();
  so.models = {{"fake", mo}};
  TestServer server(so);
  auto fut = summarize_async(server, request(doc_of(3), 8, 1));
  ASSERT_TRUE(encode_started(mo));
  server.server().shutdown(20s);
  auto [status, resp] = fut.get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ids_of(resp), offline(doc_of(3), 8, 1).tokens);
  EXPECT_EQ(mo.encode_layers_run->load(), mo.encode_layers);
}

// Its request leaves unserved, counted as a queued one the grace's end drops (docs/OPERATIONS.md:
// srformer_requests_rejected_total{reason="shutting_down"}); its encode, abandoned, is no observation.
TEST(EngineService, ShutdownPastTheGraceStopsALongEncode) {
  using server::testing::sample;
  server::Metrics metrics("");
  FakeServerOptions so;
  const auto mo = slow_encoder();
  so.models = {{"fake", mo}};
  so.metrics = &metrics;
  TestServer server(so);
  auto fut = summarize_async(server, request(std::string(100, 'q'), 8, 1));
  ASSERT_TRUE(encode_started(mo));
  server.server().shutdown(100ms);
  EXPECT_EQ(fut.get().first.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server.engine().stats().encodes_abandoned, 1);
  EXPECT_LT(mo.encode_layers_run->load(), mo.encode_layers);
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_requests_rejected_total", {{"model", "fake"}, {"reason", "shutting_down"}}), 1.0)
      << text;
  EXPECT_EQ(sample(text, "srformer_encode_seconds_count", {{"model", "fake"}}).value_or(0.0), 0.0) << text;
}

// One decoding row and a queue of two, kept busy by 1000-token streams (the first decoding, the others
// queued) until cancel().
FakeServerOptions one_row_queue_of_two() {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}};
  so.config.max_batch_rows = 1;
  so.config.max_beams = 1;
  so.config.max_queue = 2;
  so.config.max_new_tokens_cap = 1000;
  return so;
}

class SlowStreams {
 public:
  void open(TestServer& server, int n) {
    auto slow = request(std::string(50, 'q'), 1000, 1);
    slow.mutable_options()->set_min_new_tokens(1000);
    for (int i = 0; i < n; ++i) {
      ctxs_.push_back(std::make_unique<grpc::ClientContext>());
      readers_.push_back(server.stub().SummarizeStream(ctxs_.back().get(), slow));
      // The first must be decoding (not merely queued) before the next arrives, or the queue holds both.
      ASSERT_TRUE(server.wait_for([i](const server::EngineStats& s) { return s.live_requests == 1 && s.queued == i; }))
          << "request " << i << ": live " << server.engine().stats().live_requests << ", queued "
          << server.engine().stats().queued;
    }
  }
  void cancel() {
    for (auto& c : ctxs_) c->TryCancel();
    v1::SummarizeStreamResponse msg;
    for (auto& r : readers_) {
      while (r->Read(&msg)) {
      }
      EXPECT_EQ(r->Finish().error_code(), grpc::StatusCode::CANCELLED);
    }
  }

 private:
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs_;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::SummarizeStreamResponse>>> readers_;
};

TEST(EngineService, QueueFullIsResourceExhausted) {
  TestServer server(one_row_queue_of_two());
  SlowStreams slow;
  ASSERT_NO_FATAL_FAILURE(slow.open(server, 3));
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  const auto status = server.stub().Summarize(&ctx, request("hello", 4, 1), &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("--max-queue"), std::string::npos) << status.error_message();
  slow.cancel();
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.queued == 0 && s.live_rows == 0; }));
}

// srformer_queue_wait_seconds and usage.queue_ms are the time a request waited in its model's queue,
// from when it was queued. They counted from before its document was tokenized: a long document's
// tokenizing (seconds for megabytes, and its turn at the tokenizing gate) happens on the RPC side before
// it is queued, so an idle server read seconds of queue wait, and SrformerQueueWaitHigh ("the server is
// saturated: add replicas") fired for documents that never waited for the engine. Time to first token
// still counts from before the tokenizing: the client waited for it.
TEST(EngineService, QueueWaitCountsFromTheQueueNotFromBeforeTokenizing) {
  using server::testing::sample;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.metrics = &metrics;
  so.long_document_tokenize_delay = 500ms;
  TestServer server(so);
  const auto long_request = long_document_request(4);
  const auto [status, resp] = summarize_async(server.stub(), long_request).get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_LT(resp.usage().queue_ms(), 250.0);
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_queue_wait_seconds_count", {{"model", "fake"}}), 1.0) << text;
  EXPECT_LT(sample(text, "srformer_queue_wait_seconds_sum", {{"model", "fake"}}).value_or(-1), 0.25) << text;
  EXPECT_GE(sample(text, "srformer_time_to_first_token_seconds_sum", {{"model", "fake"}}).value_or(-1), 0.5) << text;
}

// srformer_time_to_first_token_seconds counts from the call's arrival, as srformer_request_duration_seconds
// does (both "from acceptance"). It counted from when the request was built, after a long document had
// waited for one of the service's start threads (2 to 8): under a burst of long documents it left out the
// seconds their clients waited, and read better than the first tokens came.
TEST(EngineService, TimeToFirstTokenCountsFromTheCallsArrivalAsItsDurationDoes) {
  using server::testing::sample;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.metrics = &metrics;
  so.long_document_tokenize_delay = 300ms;
  TestServer server(so);
  const auto long_request = long_document_request(1);
  constexpr int kCalls = 20;  // more than the start threads: most wait for one, 300 ms a document before them
  std::vector<SummarizeCall> calls;
  for (int i = 0; i < kCalls; ++i) calls.push_back(summarize_async(server.stub(), long_request));
  for (auto& call : calls) {
    const grpc::Status status = call.get().first;
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  const std::string text = metrics.scrape_text();
  const server::testing::LabelSet fake{{"model", "fake"}};
  const server::testing::LabelSet unary{{"model", "fake"}, {"method", "Summarize"}};
  ASSERT_EQ(sample(text, "srformer_time_to_first_token_seconds_count", fake), kCalls) << text;
  ASSERT_EQ(sample(text, "srformer_request_duration_seconds_count", unary), kCalls) << text;
  // One token each: a call's first token is its summary, its duration that and the response's delivery.
  const double waited = sample(text, "srformer_request_duration_seconds_sum", unary).value_or(0) -
                        sample(text, "srformer_time_to_first_token_seconds_sum", fake).value_or(0);
  EXPECT_GE(waited, 0.0);
  EXPECT_LT(waited, 1.0) << "the calls' durations exceed their times to first token by " << waited << " s";
}

// srformer_request_duration_seconds is acceptance -> completion (docs/OPERATIONS.md): calls refused before
// queueing (a full queue, a bad document) are not observed there, only in srformer_requests_total; they
// were, as 0 s, and pulled its percentiles down when the server refused most. srformer_queue_wait_seconds
// observes every request that leaves the queue, also one cancelled there: it saw only those encoded, so
// the longest waits (requests that gave up) were missing.
TEST(EngineService, RequestDurationIsOfAcceptedCallsAndQueueWaitOfEveryQueuedRequest) {
  using server::testing::sample;
  server::Metrics metrics("");
  FakeServerOptions so = one_row_queue_of_two();
  so.metrics = &metrics;
  TestServer server(so);
  SlowStreams slow;
  ASSERT_NO_FATAL_FAILURE(slow.open(server, 3));  // one decoding, two queued
  for (int i = 0; i < 4; ++i) {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    ASSERT_EQ(server.stub().Summarize(&ctx, request("hello", 4, 1), &resp).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  ASSERT_EQ(server.stub().Summarize(&ctx, request("", 4, 1), &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  slow.cancel();
  const auto scrape = [&](const std::string& name, const server::testing::LabelSet& labels) {
    return sample(metrics.scrape_text(), name, labels).value_or(0.0);
  };
  for (int i = 0;
       i < 200 && scrape("srformer_requests_total", {{"method", "SummarizeStream"}, {"code", "CANCELLED"}}) < 3; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(scrape("srformer_requests_total", {{"method", "Summarize"}, {"code", "RESOURCE_EXHAUSTED"}}), 4.0);
  EXPECT_EQ(scrape("srformer_requests_total", {{"method", "Summarize"}, {"code", "INVALID_ARGUMENT"}}), 1.0);
  EXPECT_EQ(scrape("srformer_request_duration_seconds_count", {{"method", "Summarize"}}), 0.0);
  EXPECT_EQ(scrape("srformer_request_duration_seconds_count", {{"method", "SummarizeStream"}}), 3.0);
  EXPECT_EQ(scrape("srformer_queue_wait_seconds_count", {{"model", "fake"}}), 3.0);
}

// The server sizes each model's histograms to its limits: with --max-batch-rows 3000 and a model taking
// 50,000 input tokens, full batches and longest documents had only +Inf past 256 rows and 16,384 tokens.
TEST(EngineService, HistogramBucketsReachTheServersConfiguredLimits) {
  using server::testing::largest_finite_bucket;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.config.max_batch_rows = 3000;
  so.models = {{"fake", FakeModelOptions(50000)}, {"short", FakeModelOptions(256)}};
  so.metrics = &metrics;
  TestServer server(so);
  const std::string text = metrics.scrape_text();
  EXPECT_GE(largest_finite_bucket(text, "srformer_batch_size", {{"model", "fake"}}), 3000.0) << text;
  EXPECT_GE(largest_finite_bucket(text, "srformer_input_tokens", {{"model", "fake"}}), 50000.0);
  EXPECT_GE(largest_finite_bucket(text, "srformer_generated_tokens", {{"model", "fake"}}),
            static_cast<double>(so.config.max_new_tokens_cap));
  // A model within the fixed ladder keeps it (its series are summed by le with other servers').
  EXPECT_EQ(largest_finite_bucket(text, "srformer_input_tokens", {{"model", "short"}}), 16384.0);
}

// A full queue asks for a retry after about --retry-pushback-ms (grpc-retry-pushback-ms, ±50%), and a
// client with srformer-client's retry policy gets in once a place is free, without a call of its own.
TEST(EngineService, AFullQueueSaysWhenToRetryAndARetryingClientGetsIn) {
  server::Metrics metrics("");
  FakeServerOptions so = one_row_queue_of_two();
  so.config.retry_pushback_ms = 200;
  so.metrics = &metrics;
  TestServer server(so);
  SlowStreams slow;
  ASSERT_NO_FATAL_FAILURE(slow.open(server, 3));
  for (int i = 0; i < 5; ++i) {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    ASSERT_EQ(server.stub().Summarize(&ctx, request("hello", 4, 1), &resp).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
    const auto& trailers = ctx.GetServerTrailingMetadata();
    const auto pushback = trailers.find("grpc-retry-pushback-ms");
    ASSERT_NE(pushback, trailers.end());
    const int ms = std::stoi(std::string(pushback->second.data(), pushback->second.size()));
    EXPECT_GE(ms, 100);
    EXPECT_LE(ms, 300);
  }
  const auto queue_full = [&] {
    return server::testing::sample(metrics.scrape_text(), "srformer_requests_rejected_total",
                                   {{"model", "fake"}, {"reason", "queue_full"}})
        .value_or(-1);
  };
  EXPECT_EQ(queue_full(), 5.0);

  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(client::retry_service_config(4));
  const auto retrying = grpc::CreateCustomChannel(server.target(), grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Summarizer::NewStub(retrying);
  auto call = summarize_async(*stub, request("hello", 4, 1));
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (queue_full() < 6.0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(2ms);
  ASSERT_GE(queue_full(), 6.0) << "the retrying call's first attempt was refused";
  slow.cancel();
  const auto [status, resp] = call.get();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.usage().output_tokens(), 4);
}

// --max-connection-age-ms: the server closes a client's connection after about that long (GOAWAY), and
// the client's next call reconnects (where it would re-resolve DNS and reach new replicas).
TEST(EngineService, ConnectionsAreClosedAfterTheirMaxAgeAndClientsReconnect) {
  FakeServerOptions so;
  so.config.max_connection_age_ms = 300;
  so.config.max_connection_age_grace_ms = 1000;
  TestServer server(so);
  const auto call = [&] {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    return server.stub().Summarize(&ctx, request("hello", 4, 1), &resp);
  };
  ASSERT_TRUE(call().ok());
  EXPECT_EQ(server.channel()->GetState(false), GRPC_CHANNEL_READY);
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (server.channel()->GetState(false) == GRPC_CHANNEL_READY && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(server.channel()->GetState(false), GRPC_CHANNEL_READY) << "the connection outlived its age";
  EXPECT_TRUE(call().ok()) << "the next call reconnects";
}

// Sends every document at once while another request decodes (20 tokens of doc_of(7)), so that they
// queue together; checks each summary against the offline driver, and the running request.
void burst_behind_a_running_request(TestServer& server, const std::vector<std::string>& docs, int max_new) {
  auto running = summarize_async(server, request(doc_of(7), 20, 1));
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
  std::vector<SummarizeCall> burst;
  for (const auto& doc : docs) burst.push_back(summarize_async(server, request(doc, max_new, 1)));
  for (size_t i = 0; i < docs.size(); ++i) {
    auto [status, resp] = burst[i].get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(ids_of(resp), offline(docs[i], max_new, 1).tokens);
  }
  EXPECT_TRUE(running.get().first.ok());
}

TEST(EngineService, ABurstIsEncodedInChunksWhileOthersDecode) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 50ms}}};
  so.config.max_encode_tokens = 50;  // two 19-token documents per encoder call, not three
  TestServer server(so);
  std::vector<std::string> docs;
  for (int i = 0; i < 6; ++i) docs.push_back("document number " + std::to_string(i) + ":");
  burst_behind_a_running_request(server, docs, 6);
  const auto stats = server.engine().stats();
  EXPECT_LE(stats.max_encoded_tokens, 50);
  EXPECT_GE(stats.encodes, 1 + 3);  // the running request, then at most two of the six per call
}

// On the CPU a burst of short and long documents is encoded (and started) in groups of similar length:
// no encoder call computes mostly padding. The running rows take a decode step between two groups, so
// they wait for one group's encode at a time, not for the whole admission's.
TEST(EngineService, ABurstOfDifferentLengthsIsEncodedInGroupsOfSimilarLengthWithStepsBetween) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 50ms}}};
  const auto batched = so.models[0].second.batched_encodes;
  const auto padded = so.models[0].second.padded_encodes;
  const auto log = so.models[0].second.call_log;
  TestServer server(so);
  // 8-token documents and 119-token ones, queued together behind a 50 ms step.
  std::vector<std::string> docs;
  for (int i = 0; i < 6; ++i) docs.push_back(i % 2 == 0 ? "short " + std::to_string(i) : std::string(118, 'a' + i));
  burst_behind_a_running_request(server, docs, 6);
  EXPECT_EQ(*padded, 0) << "of " << *batched << " encoder calls over several rows";
  EXPECT_GE(server.engine().stats().encodes, 1 + 2);
  auto calls = log->get();  // 'e' encode, 'l' its layer, 's' step
  calls.erase(std::remove(calls.begin(), calls.end(), 'l'), calls.end());
  EXPECT_EQ(calls.find("ee"), std::string::npos) << "two encodes in a row while a request was running: " << calls;
}

// A unary Summarize of exactly `new_tokens` tokens (min = max), on its own thread.
SummarizeCall summarize_async(TestServer& server, const std::string& doc, int new_tokens) {
  auto req = request(doc, new_tokens, 1);
  req.mutable_options()->set_min_new_tokens(new_tokens);
  return summarize_async(server, std::move(req));
}

// --max-tokens-in-flight counts every row at the batch's longest input (the state pads them all to it):
// a long document that would fit beside short running requests by its own length waits until they
// leave, instead of padding all of them to its length.
TEST(EngineService, TokensInFlightCountEveryRowAtTheBatchsLongestInput) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}};
  so.config.max_tokens_in_flight = 400;
  const auto positions = so.models[0].second.max_step_positions;
  TestServer server(so);
  std::vector<SummarizeCall> calls;
  for (int i = 0; i < 4; ++i)
    calls.push_back(summarize_async(server, "short " + std::to_string(i), 30));  // 4 × (8 + 30)
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 4; }));
  // 151 + 4 tokens: 152 + 155 fit the budget by each row's own length, 5 × 151 + 4 × 30 + 4 do not.
  calls.push_back(summarize_async(server, std::string(150, 'x'), 4));
  for (auto& c : calls) EXPECT_TRUE(c.get().first.ok());
  EXPECT_LE(positions->load(), 400) << "a step held more encoder positions than the budget";
  EXPECT_GE(positions->load(), 151);
}

// A model that throws, or leaves a state the engine cannot read, fails the requests it was serving with
// INTERNAL and a message that says where; the engine serves the next request as before.
TEST(EngineService, AFailingModelFailsItsRequestsNotTheServer) {
  struct Fault {
    std::string where;
    FakeModelOptions model;
    std::string message;
  };
  std::vector<Fault> faults(3);
  faults[0] = {"encoder", {}, "generation failed: encoder failed: fake encoder fault"};
  faults[0].model.fail_encode_call = 1;
  faults[1] = {"model's step", {}, "generation failed: decoder step failed: fake decoder fault"};
  faults[1].model.fail_step_call = 3;
  faults[2] = {"engine's part of the step", {}, "generation failed: decoder step failed:"};
  faults[2].model.corrupt_state_at_step = 3;
  for (const auto& fault : faults) {
    SCOPED_TRACE("a fault in the " + fault.where);
    FakeServerOptions so;
    so.models = {{"fake", fault.model}};
    TestServer server(so);
    auto req = request(doc_of(0), 8, 1);
    req.mutable_options()->set_min_new_tokens(8);
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const auto status = server.stub().Summarize(&ctx, req, &resp);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
    EXPECT_NE(status.error_message().find(fault.message), std::string::npos) << status.error_message();
    EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0 && s.state_bytes == 0; }));
    grpc::ClientContext next;
    v1::SummarizeResponse ok;
    const auto next_status = server.stub().Summarize(&next, request(doc_of(3), 8, 1), &ok);
    ASSERT_TRUE(next_status.ok()) << next_status.error_message();
    EXPECT_EQ(ids_of(ok), offline(doc_of(3), 8, 1).tokens);
  }
}

// Rows that cannot join the running batch (DecoderState::append throws: out of memory on a GPU) fail with
// the rows running, each counted leaving with reason error. They were never counted joining, so the rows in
// the batch (srformer_rows_joined_total less srformer_rows_left_total, which SrformerEngineStalled and the
// dashboard read) went below zero by as many for good, and a later stall with that many rows went unseen.
TEST(EngineService, RowsWhoseJoinFailedAreCountedJoinedAsTheyLeave) {
  using server::testing::sample;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.metrics = &metrics;
  FakeModelOptions mo{256, 4, 5ms};
  mo.fail_join_call = 2;
  so.models = {{"fake", mo}};
  TestServer server(so);
  auto long_one = request(doc_of(7), 200, 2);
  long_one.mutable_options()->set_min_new_tokens(200);
  auto running = summarize_async(server.stub(), long_one);
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1 && s.steps > 0; }));
  auto joining = summarize_async(server.stub(), request(doc_of(3), 8, 3));
  for (auto* call : {&running, &joining}) {
    const grpc::Status status = call->get().first;
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL) << status.error_message();
    EXPECT_NE(status.error_message().find("joining the batch failed"), std::string::npos) << status.error_message();
  }
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0 && s.queued == 0; }));
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_rows_left_total", {{"model", "fake"}, {"reason", "error"}}), 5.0) << text;
  EXPECT_EQ(sample(text, "srformer_rows_joined_total", {{"model", "fake"}}), 5.0) << text;
  // The engine serves on, and counts the next request's rows both ways.
  const auto [status, resp] = summarize_async(server.stub(), request(doc_of(3), 8, 1)).get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ids_of(resp), offline(doc_of(3), 8, 1).tokens);
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0; }));
  double left = 0;
  for (const char* reason : {"eos", "length", "cancelled", "error"}) {
    left +=
        sample(metrics.scrape_text(), "srformer_rows_left_total", {{"model", "fake"}, {"reason", reason}}).value_or(0);
  }
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_rows_joined_total", {{"model", "fake"}}), left);
}

// Samples (do_sample with num_return_sequences) leave the batch each at its own end, and
// srformer_rows_left_total counts each by its own reason, as the response's sequences give them. The rows
// still running at the request's end were all counted with the first sample's reason: samples cut at
// max_new_tokens counted as eos where the first had drawn EOS, and the other way round.
TEST(EngineService, SamplesLeaveTheBatchEachByItsOwnReason) {
  using server::testing::sample;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.metrics = &metrics;
  TestServer server(so);
  const auto left = [&](const char* reason) {
    return sample(metrics.scrape_text(), "srformer_rows_left_total", {{"model", "fake"}, {"reason", reason}})
        .value_or(-1);
  };
  int mixed = 0;  // responses whose sequences ended for different reasons
  for (int max_new = 6; max_new <= 20; ++max_new) {
    for (const uint64_t seed : {1, 2, 3}) {
      SCOPED_TRACE("max_new_tokens " + std::to_string(max_new) + ", seed " + std::to_string(seed));
      auto req = request(doc_of(max_new), max_new, 1);
      req.mutable_options()->set_do_sample(true);
      req.mutable_options()->set_temperature(2.0f);
      req.mutable_options()->set_seed(seed);
      req.mutable_options()->set_num_return_sequences(4);
      const double eos_before = left("eos"), length_before = left("length");
      const auto [status, resp] = summarize_async(server.stub(), req).get();
      ASSERT_TRUE(status.ok()) << status.error_message();
      ASSERT_EQ(resp.alternatives_size(), 3);
      std::vector<v1::FinishReason> reasons{resp.finish_reason()};
      for (const auto& a : resp.alternatives()) reasons.push_back(a.finish_reason());
      const auto eos = std::count(reasons.begin(), reasons.end(), v1::FINISH_REASON_EOS);
      const auto length = std::count(reasons.begin(), reasons.end(), v1::FINISH_REASON_LENGTH);
      ASSERT_EQ(eos + length, 4);
      if (eos > 0 && length > 0) ++mixed;
      EXPECT_EQ(left("eos") - eos_before, static_cast<double>(eos));
      EXPECT_EQ(left("length") - length_before, static_cast<double>(length));
    }
  }
  EXPECT_GT(mixed, 3) << "too few requests whose samples ended for different reasons to tell";
  EXPECT_EQ(left("cancelled"), 0.0);
  EXPECT_EQ(left("error"), 0.0);
}

// A step that fails between an encode's layers fails the running requests; the request being encoded
// joins an empty batch and is served.
TEST(EngineService, AStepFailingInsideAnEncodeFailsTheRunningRequestsOnly) {
  FakeServerOptions so;
  FakeModelOptions mo{256, 4, 5ms};
  mo.encode_layers = 4;
  mo.encode_layer_delay = 20ms;
  mo.fail_steps_inside_encode = true;
  so.models = {{"fake", mo}};
  so.config.encode_stall_ms = 1;
  TestServer server(so);
  auto running = summarize_async(server, doc_of(7), 60);
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
  auto arriving = summarize_async(server, request(doc_of(3), 8, 1));
  const auto running_status = running.get().first;
  EXPECT_EQ(running_status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(running_status.error_message().find("fake decoder fault"), std::string::npos)
      << running_status.error_message();
  const auto [status, resp] = arriving.get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ids_of(resp), offline(doc_of(3), 8, 1).tokens);
}

// An encode longer than --encode-stall-ms lets the running rows take decode steps between its layers
// (a long document would otherwise stall every stream for its whole encode); with 0 it runs whole.
// Either way the arriving request's answer is the offline one.
TEST(EngineService, RunningRowsStepBetweenTheLayersOfALongEncode) {
  for (const int64_t stall_ms : {0, 1}) {
    SCOPED_TRACE("--encode-stall-ms " + std::to_string(stall_ms));
    server::Metrics metrics("");
    FakeServerOptions so;
    so.metrics = &metrics;
    const FakeModelOptions mo = slow_encoder(8, 20ms);
    so.models = {{"fake", mo}};
    so.config.encode_stall_ms = stall_ms;
    TestServer server(so);
    auto long_one = request(doc_of(7), 60, 1);  // 60 steps of 5 ms or more
    long_one.mutable_options()->set_min_new_tokens(60);
    auto running = summarize_async(server, long_one);
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
    auto arriving = summarize_async(server, request(doc_of(3), 8, 1));
    const auto [status, resp] = arriving.get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(ids_of(resp), offline(doc_of(3), 8, 1).tokens);
    const auto [running_status, running_resp] = running.get();
    ASSERT_TRUE(running_status.ok()) << running_status.error_message();
    EXPECT_EQ(running_resp.token_ids_size(), 60);
    // The second encode, from its 'e' to its last layer: steps between its layers or none.
    const auto calls = mo.call_log->get();
    const size_t second = calls.find('e', calls.find('e') + 1);
    ASSERT_NE(second, std::string::npos) << calls;
    size_t end = second;
    for (int l = 0; l < mo.encode_layers; ++l) end = calls.find('l', end + 1);
    ASSERT_NE(end, std::string::npos) << calls;
    const auto during = calls.substr(second, end - second + 1);
    const auto steps = std::count(during.begin(), during.end(), 's');
    const auto stats = server.engine().stats();
    const auto counted = server::testing::sample(metrics.scrape_text(), "srformer_decode_steps_during_encodes_total",
                                                 {{"model", "fake"}});
    if (stall_ms == 0) {
      EXPECT_EQ(steps, 0) << during;
    } else {
      // Every layer after the first sleeps 20 ms after the last step: more than the 1 ms allowed.
      EXPECT_GE(steps, mo.encode_layers - 1) << during;
    }
    EXPECT_EQ(stats.steps_while_encoding, steps);
    EXPECT_EQ(counted, std::optional<double>(static_cast<double>(steps)));
  }
}

// Between the layers of an encode over --max-encode-tokens (a long document, let in alone), a queued
// request within the cap is encoded and joins (and takes its first steps there) instead of waiting for
// the whole encode; not with --encode-stall-ms 0, not one over the cap, not inside an encode within the
// cap (that would stall the streams twice as long), not past the batch's limits, which count the long
// document's rows as joined, and not before the long encode has run --encode-stall-ms (here 160 ms in
// all against 1000). Answers are the offline ones.
TEST(EngineService, AShortRequestJoinsBetweenTheLayersOfALongEncode) {
  struct Case {
    int64_t stall_ms;
    int64_t max_encode_tokens;
    bool joins_inside;
    int64_t max_batch_rows = 64;
  };
  for (const Case c : {Case{0, 100, false}, Case{1, 100, true}, Case{1, 60, false}, Case{1, 200, false},
                       Case{1, 100, false, /*max_batch_rows=*/1}, Case{1000, 100, false}}) {
    SCOPED_TRACE("--encode-stall-ms " + std::to_string(c.stall_ms) + " --max-encode-tokens " +
                 std::to_string(c.max_encode_tokens) + " --max-batch-rows " + std::to_string(c.max_batch_rows));
    server::Metrics metrics("");
    FakeServerOptions so;
    so.metrics = &metrics;
    const FakeModelOptions mo = slow_encoder(8, 20ms);
    so.models = {{"fake", mo}};
    so.config.encode_stall_ms = c.stall_ms;
    so.config.max_encode_tokens = c.max_encode_tokens;
    so.config.max_batch_rows = c.max_batch_rows;
    TestServer server(so);
    const std::string long_doc(150, 'x');  // 151 tokens
    auto long_call = summarize_async(server, request(long_doc, 8, 1));
    ASSERT_TRUE(encode_started(mo));
    auto short_call = summarize_async(server, request(doc_of(3), 8, 1));  // 67 tokens
    const auto [status, resp] = short_call.get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(ids_of(resp), offline(doc_of(3), 8, 1).tokens);
    const auto [long_status, long_resp] = long_call.get();
    ASSERT_TRUE(long_status.ok()) << long_status.error_message();
    EXPECT_EQ(ids_of(long_resp), offline(long_doc, 8, 1).tokens);

    const auto calls = mo.call_log->get();
    const size_t second = calls.find('e', calls.find('e') + 1);
    ASSERT_NE(second, std::string::npos) << calls;
    size_t eighth_layer = std::string::npos;
    for (int l = 0; l < mo.encode_layers; ++l) eighth_layer = calls.find('l', eighth_layer + 1);
    const auto stats = server.engine().stats();
    const auto counted = server::testing::sample(
        metrics.scrape_text(), "srformer_requests_admitted_during_encodes_total", {{"model", "fake"}});
    if (c.joins_inside) {
      EXPECT_LT(second, eighth_layer) << "the short request's encode did not run inside the long one's: " << calls;
      const size_t first_step = calls.find('s');
      ASSERT_NE(first_step, std::string::npos) << calls;
      EXPECT_LT(std::count(calls.begin(), calls.begin() + static_cast<std::ptrdiff_t>(first_step), 'l'),
                2 * mo.encode_layers)
          << "the short request took no step before the long encode ended: " << calls;
    } else {
      EXPECT_GT(second, eighth_layer) << calls;
    }
    EXPECT_EQ(stats.admitted_while_encoding, c.joins_inside ? 1 : 0);
    EXPECT_EQ(counted, std::optional<double>(c.joins_inside ? 1.0 : 0.0));
  }
}

// The same between the layers of a long document's start() (cross keys/values, and SRformer's switch
// tables, per decoder layer): the admission's second phase pauses like its encode, and a short request
// queued meanwhile is encoded, started and stepped there, its answer the offline one.
TEST(EngineService, AShortRequestJoinsBetweenTheLayersOfALongStart) {
  FakeServerOptions so;
  FakeModelOptions mo{256, 4, 5ms};
  mo.start_layers = 8;
  mo.start_layer_delay = 20ms;
  so.models = {{"fake", mo}};
  so.config.encode_stall_ms = 1;
  so.config.max_encode_tokens = 100;
  TestServer server(so);
  const std::string long_doc(150, 'x');  // 151 tokens: over the cap, admitted alone
  auto long_call = summarize_async(server, request(long_doc, 8, 1));
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (mo.start_layers_run->load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_GT(mo.start_layers_run->load(), 0) << "the long document's start() never ran";
  const auto [status, resp] = summarize_async(server, request(doc_of(3), 8, 1)).get();  // 67 tokens
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ids_of(resp), offline(doc_of(3), 8, 1).tokens);
  const auto [long_status, long_resp] = long_call.get();
  ASSERT_TRUE(long_status.ok()) << long_status.error_message();
  EXPECT_EQ(ids_of(long_resp), offline(long_doc, 8, 1).tokens);

  // e l c… e l c×8 s… c…: the short request is encoded, started (its own 8 layers) and stepped
  // before the long start's last layer, which is therefore the log's last 'c'.
  const auto calls = mo.call_log->get();
  const size_t second_encode = calls.find('e', calls.find('e') + 1);
  const size_t first_step = calls.find('s');
  const size_t last_start_layer = calls.rfind('c');
  ASSERT_NE(second_encode, std::string::npos) << calls;
  ASSERT_NE(first_step, std::string::npos) << calls;
  EXPECT_EQ(std::count(calls.begin(), calls.end(), 'c'), 2 * mo.start_layers) << calls;
  EXPECT_LT(calls.find('c'), second_encode) << "the short request did not wait for the long start to begin: " << calls;
  EXPECT_LT(first_step, last_start_layer) << "the short request took no step before the long start ended: " << calls;
  EXPECT_EQ(server.engine().stats().admitted_while_encoding, 1);
}

// Encodes inside a long one take at most about half its time: with four short requests queued, each
// encode as long as the long one's whole encoder (8 layers of 20 ms), one joins inside it, then the long
// encode's own layers catch up and it ends with the others still queued (4 would join, one per layer,
// without the rule).
TEST(EngineService, ALongEncodeKeepsAtLeastHalfItsTime) {
  FakeServerOptions so;
  FakeModelOptions mo = slow_encoder(8, 20ms);
  so.models = {{"fake", mo}};
  so.config.encode_stall_ms = 1;
  so.config.max_encode_tokens = 100;  // one short request (67 tokens) per encode
  TestServer server(so);
  const std::string long_doc(150, 'x');
  auto long_call = summarize_async(server, request(long_doc, 8, 1));
  ASSERT_TRUE(encode_started(mo));
  std::vector<SummarizeCall> short_calls;
  for (int i = 0; i < 4; ++i) short_calls.push_back(summarize_async(server, request(doc_of(3), 8, 1)));
  for (auto& c : short_calls) {
    const auto [status, resp] = c.get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(ids_of(resp), offline(doc_of(3), 8, 1).tokens);
  }
  const auto [long_status, long_resp] = long_call.get();
  ASSERT_TRUE(long_status.ok()) << long_status.error_message();
  const auto joined = server.engine().stats().admitted_while_encoding;
  EXPECT_GE(joined, 1);
  EXPECT_LE(joined, 2) << mo.call_log->get();
}

// An encode that fails inside another's fails its own requests only: the long one's encode goes on.
TEST(EngineService, AnEncodeFailingInsideAnotherFailsOnlyItsOwnRequests) {
  FakeServerOptions so;
  FakeModelOptions mo = slow_encoder(8, 20ms);
  mo.fail_encode_call = 2;  // the short request's, inside the long one's
  so.models = {{"fake", mo}};
  so.config.encode_stall_ms = 1;
  so.config.max_encode_tokens = 100;
  TestServer server(so);
  const std::string long_doc(150, 'x');
  auto long_call = summarize_async(server, request(long_doc, 8, 1));
  ASSERT_TRUE(encode_started(mo));
  const auto [status, resp] = summarize_async(server, request(doc_of(3), 8, 1)).get();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(status.error_message().find("fake encoder fault"), std::string::npos) << status.error_message();
  const auto [long_status, long_resp] = long_call.get();
  ASSERT_TRUE(long_status.ok()) << long_status.error_message();
  EXPECT_EQ(ids_of(long_resp), offline(long_doc, 8, 1).tokens);
  EXPECT_EQ(server.engine().stats().admitted_while_encoding, 1);
  const auto [next_status, next_resp] = summarize_async(server, request(doc_of(4), 8, 1)).get();  // still serving
  ASSERT_TRUE(next_status.ok()) << next_status.error_message();
  EXPECT_EQ(ids_of(next_resp), offline(doc_of(4), 8, 1).tokens);
}

// Random traffic around long encodes: long and short documents, greedy and beams, some deadlines short
// enough to expire while queued, encoding (inside another's encode or not) or decoding, under a small
// batch. Every request ends once, with its offline answer or DEADLINE_EXCEEDED, and the engine ends
// empty.
TEST(EngineService, RandomTrafficAroundLongEncodesEndsEveryRequestWithItsAnswer) {
  FakeServerOptions so;
  so.models = {{"fake", slow_encoder(4, 5ms)}};
  so.config.encode_stall_ms = 1;
  so.config.max_encode_tokens = 40;
  so.config.max_batch_rows = 8;
  server::Metrics metrics("");
  so.metrics = &metrics;
  TestServer server(so);
  std::mt19937 rng(31);
  struct Call {
    v1::SummarizeRequest req;
    int deadline_ms = 0;  // 0: none
  };
  std::vector<Call> calls;
  for (int i = 0; i < 48; ++i) {
    Call c;
    const bool long_doc = rng() % 3 == 0;
    const std::string doc = long_doc ? std::string(60 + rng() % 60, static_cast<char>('a' + rng() % 26)) : doc_of(i);
    c.req = request(doc, 4 + static_cast<int>(rng() % 12), 1 + static_cast<int>(rng() % 3));
    if (rng() % 4 == 0) c.deadline_ms = 5 + static_cast<int>(rng() % 80);
    calls.push_back(std::move(c));
  }
  std::atomic<size_t> next{0};
  std::vector<std::pair<grpc::Status, v1::SummarizeResponse>> results(calls.size());
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&] {
      for (size_t i = next++; i < calls.size(); i = next++) {
        grpc::ClientContext ctx;
        if (calls[i].deadline_ms > 0)
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(calls[i].deadline_ms));
        results[i].first = server.stub().Summarize(&ctx, calls[i].req, &results[i].second);
      }
    });
  }
  for (auto& c : clients) c.join();
  int ok = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto& [status, resp] = results[i];
    const auto& o = calls[i].req.options();
    if (status.ok()) {
      ++ok;
      EXPECT_EQ(ids_of(resp), offline(calls[i].req.document(), o.max_new_tokens(), o.num_beams()).tokens)
          << "request " << i;
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
          << "request " << i << ": " << status.error_message();
      EXPECT_GT(calls[i].deadline_ms, 0) << "request " << i << " had no deadline";
    }
  }
  const auto without_deadline =
      std::count_if(calls.begin(), calls.end(), [](const Call& c) { return c.deadline_ms == 0; });
  EXPECT_GE(ok, without_deadline);
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) {
    return s.queued == 0 && s.live_requests == 0 && s.live_rows == 0 && s.state_bytes == 0;
  })) << "the engine did not end empty";
  // The rows that joined less those that left are the running batch (alert SrformerEngineStalled reads its
  // work so): every row counts its leaving once, beams ending early, deadlines inside encodes and steps
  // included.
  const std::string text = metrics.scrape_text();
  const server::testing::LabelSet fake{{"model", "fake"}};
  double left = 0;
  for (const char* reason : {"eos", "length", "cancelled", "error"}) {
    left +=
        server::testing::sample(text, "srformer_rows_left_total", {{"model", "fake"}, {"reason", reason}}).value_or(0);
  }
  EXPECT_GT(server::testing::sample(text, "srformer_rows_joined_total", fake).value_or(0), 0.0) << text;
  EXPECT_EQ(server::testing::sample(text, "srformer_rows_joined_total", fake).value_or(0), left) << text;
  const auto stats = server.engine().stats();
  std::printf("%lld requests joined inside long encodes, %lld steps between layers\n",
              static_cast<long long>(stats.admitted_while_encoding),
              static_cast<long long>(stats.steps_while_encoding));
}

// A fake model whose state is 1000 bytes per encoder position and row (per request where `pooled`:
// beams share its input's keys), under a --max-state-memory of `positions` positions' worth.
FakeServerOptions state_budget_options(int64_t positions, bool pooled = false) {
  FakeServerOptions so;
  FakeModelOptions mo{256, 4, 20ms};
  mo.footprint = StateFootprint{/*per_encoder_position=*/1000};
  mo.footprint.inputs_shared_by_beams = pooled;
  so.models = {{"fake", mo}};
  so.config.max_state_bytes = positions * 1000;
  return so;
}

// Four short requests of 30 tokens, running once this returns.
std::vector<SummarizeCall> four_running(TestServer& server) {
  std::vector<SummarizeCall> calls;
  for (int i = 0; i < 4; ++i) calls.push_back(summarize_async(server, "short " + std::to_string(i), 30));
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 4; }));
  return calls;
}

// --max-state-memory: admissions keep the batch's decoder state (every row at the longest input) within
// the budget; here the fake state is 1000 bytes per encoder position and row, the budget 400 positions'
// worth, and nothing else limits the batch. The long document waits until the short ones leave.
TEST(EngineService, StateBudgetKeepsTheBatchsStateWithinIt) {
  const auto so = state_budget_options(400);
  const auto positions = so.models[0].second.max_step_positions;
  TestServer server(so);
  EXPECT_EQ(server.engine().limits().max_state_bytes, 400 * 1000);
  auto calls = four_running(server);
  calls.push_back(summarize_async(server, std::string(150, 'x'), 4));  // 151 tokens: 5 rows of it would be 755
  for (auto& c : calls) EXPECT_TRUE(c.get().first.ok());
  EXPECT_LE(positions->load(), 400) << "a step held more state than the budget";
  EXPECT_GE(positions->load(), 151);
}

// A model that pools its inputs' keys per request (LayerState::cross_start: no row padded to another's
// length) is budgeted at each request's own length: a long document joins four short requests at once
// (151 + 4 x 8 positions), where padded to its length the five would count 755 and it would wait.
TEST(EngineService, StateBudgetCountsPooledInputsAtTheirOwnLength) {
  TestServer server(state_budget_options(250, /*pooled=*/true));
  auto calls = four_running(server);
  calls.push_back(summarize_async(server, std::string(150, 'x'), 4));
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 5; }))
      << "the long document waited for the short ones";
  for (auto& c : calls) EXPECT_TRUE(c.get().first.ok());
}

// A long document that does not fit the state budget beside running requests waits, and a short
// request behind it that fits goes ahead (--queue-bypass-ms) instead of waiting for it too...
TEST(EngineService, AShortRequestGoesAheadOfALongOneWaitingForRoom) {
  auto so = state_budget_options(400);
  so.config.queue_bypass_ms = 60000;
  TestServer server(so);
  auto running = four_running(server);
  auto long_doc = summarize_async(server, std::string(150, 'x'), 4);  // 5 rows x 151 positions: waits
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.queued == 1; }));
  auto behind = summarize_async(server, "late", 2);
  EXPECT_TRUE(behind.get().first.ok());
  EXPECT_EQ(long_doc.wait_for(0ms), std::future_status::timeout) << "the short request went first";
  EXPECT_TRUE(long_doc.get().first.ok());
  for (auto& c : running) EXPECT_TRUE(c.get().first.ok());
  EXPECT_EQ(server.engine().stats().bypassed, 1);
}

// ...but not once the long one has waited that long: then the queue waits for it, so that no request
// starves behind a stream of smaller ones. 0 is first come, first served.
TEST(EngineService, NoRequestGoesAheadOfOneThatWaitedPastTheBypassTime) {
  for (const int64_t bypass_ms : {int64_t{0}, int64_t{50}}) {
    SCOPED_TRACE("--queue-bypass-ms " + std::to_string(bypass_ms));
    auto so = state_budget_options(400);
    so.config.queue_bypass_ms = bypass_ms;
    TestServer server(so);
    auto calls = four_running(server);
    calls.push_back(summarize_async(server, std::string(150, 'x'), 4));
    ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.queued == 1; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * bypass_ms));
    calls.push_back(summarize_async(server, "late", 2));
    for (auto& c : calls) EXPECT_TRUE(c.get().first.ok());
    EXPECT_EQ(server.engine().stats().bypassed, 0);
  }
}

// A request whose state alone exceeds the budget can never run here: refused at once with what to
// change, and the server goes on serving.
TEST(EngineService, ARequestOverTheStateBudgetAloneIsRefusedWithWhatToChange) {
  FakeServerOptions so;
  FakeModelOptions mo{256, 4};
  mo.footprint = StateFootprint{/*per_encoder_position=*/1000};
  so.models = {{"fake", mo}};
  so.config.max_state_bytes = 100 * 1000;
  TestServer server(so);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  const auto status = server.stub().Summarize(&ctx, request(std::string(150, 'x'), 4, 1), &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  for (const char* part : {"needs about 147 KiB of decoder state (151 input tokens, 1 row, up to 4 new tokens)",
                           "budget of 98 KiB (--max-state-memory)", "send a shorter document"}) {
    EXPECT_NE(status.error_message().find(part), std::string::npos) << status.error_message();
  }
  EXPECT_TRUE(summarize_async(server, "short", 4).get().first.ok());
}

// SRformer's switch table holds the segments a request's steps reach: one whose expected length is far
// above its max_new_tokens is budgeted for those (2 of 151 segments here), not refused for the whole
// schedule, which it never reaches.
TEST(EngineService, TheStateBudgetCountsOnlyTheSwitchesARequestsStepsReach) {
  FakeServerOptions so;
  FakeModelOptions mo{256, 1};
  mo.footprint.per_switch = 1000;
  mo.footprint.segment_size = 1;
  so.models = {{"fake", mo}};
  so.config.max_state_bytes = 20 * 1000;
  TestServer server(so);
  const auto run = [&](int expected_length) {
    auto r = request(std::string(150, 'x'), 4, 1);  // 151 tokens: m = 151
    r.mutable_options()->set_expected_length(expected_length);
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    return server.stub().Summarize(&ctx, r, &resp);
  };
  // L = 400: steps 0..3 reach segments 0 and 1 (floor(3 * 151 / 400)).
  const auto reached = run(400);
  EXPECT_TRUE(reached.ok()) << reached.error_message();
  // L = 4: a new segment each of the 4 steps, and L = 151 one a step too: still 4 entries.
  EXPECT_TRUE(run(4).ok());
  EXPECT_TRUE(run(151).ok());
}

TEST(EngineService, GracefulShutdownFinishesInFlightAndRefusesNew) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 10ms}}};
  TestServer server(so);
  std::vector<SummarizeCall> inflight;
  for (int i = 0; i < 3; ++i) inflight.push_back(summarize_async(server, request(doc_of(i), 30, 1)));
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 3; }));
  std::thread stopper([&] { server.server().shutdown(10s); });
  ASSERT_TRUE(server.wait_for([&](const server::EngineStats&) { return server.server().service().shutting_down(); }));
  {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const auto st = server.stub().Summarize(&ctx, request("late", 4, 1), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  }
  {  // A partial_results batch too: the call is UNAVAILABLE (retry elsewhere), not OK with failed items.
    v1::SummarizeBatchRequest batch;
    batch.set_partial_results(true);
    *batch.add_requests() = request("late", 4, 1);
    grpc::ClientContext ctx;
    v1::SummarizeBatchResponse resp;
    const auto st = server.stub().SummarizeBatch(&ctx, batch, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  }
  for (int i = 0; i < 3; ++i) {
    auto [status, resp] = inflight[i].get();
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(ids_of(resp), offline(doc_of(i), 30, 1).tokens);
  }
  stopper.join();
}

TEST(EngineService, ShutdownCancelsWhatOutlivesTheGracePeriod) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}};
  so.config.max_new_tokens_cap = 1000;
  TestServer server(so);
  auto slow = request(std::string(40, 'q'), 1000, 1);
  slow.mutable_options()->set_min_new_tokens(1000);
  auto fut = summarize_async(server, slow);
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  server.server().shutdown(200ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(fut.get().first.error_code(), grpc::StatusCode::UNAVAILABLE);
}

// With --encoder-cache-memory, a document that comes again skips the encoder, also when it is admitted
// together with one that needs it, and a document twice in one admission is encoded once: what each
// gets is what it gets without the cache.
TEST(EngineService, EncoderCacheServesACachedAndANewDocumentInOneAdmission) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 40ms}}};
  so.config.encoder_cache_bytes = 1 << 20;
  so.config.max_new_tokens_cap = 1000;
  const auto max_start_rows = so.models[0].second.max_start_rows;
  const auto batched_encodes = so.models[0].second.batched_encodes;
  TestServer server(so);
  const std::string cached_doc = doc_of(3);
  grpc::ClientContext ctx0;
  v1::SummarizeResponse first;
  ASSERT_TRUE(server.stub().Summarize(&ctx0, request(cached_doc, 8, 1), &first).ok());
  EXPECT_FALSE(first.usage().encoder_cached());
  // A long request keeps the engine stepping, so that a batch call's two requests arrive within one
  // step and are admitted together (tried up to three times with a new document: timing).
  auto long_req = request(std::string(200, 'q'), 1000, 1);
  long_req.mutable_options()->set_min_new_tokens(1000);
  grpc::ClientContext long_ctx;
  auto long_call = std::async(std::launch::async, [&] {
    v1::SummarizeResponse r;
    return server.stub().Summarize(&long_ctx, long_req, &r);
  });
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
  bool together = false;
  for (int attempt = 0; attempt < 3 && !together; ++attempt) {
    const std::string new_doc = doc_of(10 + 7 * attempt);  // as many words as doc_of(3)
    *max_start_rows = 0;
    const auto hits_before = server.engine().stats().encoder_cache_hits;
    const int batched_before = *batched_encodes;
    v1::SummarizeBatchRequest batch;
    *batch.add_requests() = request(cached_doc, 12, 2);
    *batch.add_requests() = request(new_doc, 12, 1);
    *batch.add_requests() = request(new_doc, 10, 2);  // twice in one admission: encoded once
    grpc::ClientContext ctx;
    v1::SummarizeBatchResponse resp;
    ASSERT_TRUE(server.stub().SummarizeBatch(&ctx, batch, &resp).ok());
    ASSERT_EQ(resp.responses_size(), 3);
    EXPECT_EQ(ids_of(resp.responses(0)), offline(cached_doc, 12, 2).tokens);
    EXPECT_EQ(ids_of(resp.responses(1)), offline(new_doc, 12, 1).tokens);
    EXPECT_EQ(logprobs_of(resp.responses(1)), offline(new_doc, 12, 1).token_logprobs);
    EXPECT_EQ(ids_of(resp.responses(2)), offline(new_doc, 10, 2).tokens);
    EXPECT_TRUE(resp.responses(0).usage().encoder_cached());
    together = *max_start_rows == 3;
    if (!together) continue;
    EXPECT_FALSE(resp.responses(1).usage().encoder_cached());
    EXPECT_TRUE(resp.responses(2).usage().encoder_cached());
    EXPECT_EQ(server.engine().stats().encoder_cache_hits, hits_before + 2);
    EXPECT_EQ(*batched_encodes, batched_before) << "the encoder saw more than the one new document";
  }
  EXPECT_TRUE(together) << "the two requests were never admitted together";
  EXPECT_GT(server.engine().stats().encoder_cache_bytes, 0);
  long_ctx.TryCancel();
  EXPECT_EQ(long_call.get().error_code(), grpc::StatusCode::CANCELLED);
}

// srformer_encode_seconds observes encoder calls: a document served from the encoder cache makes none.
TEST(EngineService, EncodeSecondsObservesNoAdmissionServedFromTheEncoderCache) {
  using server::testing::sample;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.config.encoder_cache_bytes = 1 << 20;
  so.metrics = &metrics;
  TestServer server(so);
  const std::string doc = doc_of(4);
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    ASSERT_TRUE(server.stub().Summarize(&ctx, request(doc, 8, 1), &resp).ok());
    EXPECT_EQ(resp.usage().encoder_cached(), i > 0);
  }
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_encode_seconds_count", {{"model", "fake"}}), 1.0) << text;
}

TEST(EngineService, AnEncoderOutputTheCacheCannotCopyIsNotCachedAndTheRequestsSucceed) {
  LogCapture captured;
  FakeServerOptions so;
  so.config.encoder_cache_bytes = 1 << 20;
  TestServer server(so);
  struct FailCopies {
    FailCopies() { server::EncoderCache::fail_copies_for_testing = true; }
    ~FailCopies() { server::EncoderCache::fail_copies_for_testing = false; }
  } fail_copies;
  const std::string doc = doc_of(4);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const grpc::Status status = server.stub().Summarize(&ctx, request(doc, 8, 1), &resp);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(ids_of(resp), offline(doc, 8, 1).tokens);
    EXPECT_FALSE(resp.usage().encoder_cached()) << "nothing could be cached";
  }
  EXPECT_EQ(server.engine().stats().encoder_cache_bytes, 0);
  const std::string log = captured.text();
  EXPECT_NE(log.find("encoder output not cached"), std::string::npos) << log;
}

TEST(EngineService, BatchKeepsOrderAndEqualsUnary) {
  TestServer server;
  v1::SummarizeBatchRequest batch;
  for (int i = 0; i < 6; ++i) *batch.add_requests() = request(doc_of(i), 12, 1 + i % 2);
  grpc::ClientContext ctx;
  v1::SummarizeBatchResponse resp;
  ASSERT_TRUE(server.stub().SummarizeBatch(&ctx, batch, &resp).ok());
  ASSERT_EQ(resp.responses_size(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ids_of(resp.responses(i)), offline(doc_of(i), 12, 1 + i % 2).tokens);

  *batch.add_requests() = make_request("");
  grpc::ClientContext ctx2;
  const auto st = server.stub().SummarizeBatch(&ctx2, batch, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("requests[6]"), std::string::npos) << st.error_message();
}

// An item that fails while the batch runs ends the call with its status at once: the other items,
// whose answers could no longer be returned, are cancelled rather than decoded to their end.
TEST(EngineService, ABatchItemFailingCancelsTheOthersAndEndsTheCall) {
  FakeServerOptions so;
  FakeModelOptions faulty;
  faulty.fail_encode_call = 1;
  so.models = {{"slow", FakeModelOptions{256, 4, 5ms}}, {"faulty", faulty}};
  TestServer server(so);
  constexpr int kLong = 400;  // 2 s of 5 ms steps
  v1::SummarizeBatchRequest batch;
  *batch.add_requests() = request(doc_of(1), kLong, 1);
  batch.mutable_requests(0)->set_model("slow");
  batch.mutable_requests(0)->mutable_options()->set_min_new_tokens(kLong);
  *batch.add_requests() = request(doc_of(2), 8, 1);
  batch.mutable_requests(1)->set_model("faulty");
  grpc::ClientContext ctx;
  v1::SummarizeBatchResponse resp;
  const auto status = server.stub().SummarizeBatch(&ctx, batch, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(status.error_message().find("requests[1]: generation failed: encoder failed: fake encoder fault"),
            std::string::npos)
      << status.error_message();
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0 && s.state_bytes == 0; },
                              std::chrono::seconds(10), "slow"));
  EXPECT_LT(server.engine("slow").stats().steps, kLong) << "the slow item was decoded to its end";
  // Both models serve the next call.
  v1::SummarizeBatchRequest next;
  *next.add_requests() = request(doc_of(3), 8, 1);
  next.mutable_requests(0)->set_model("slow");
  *next.add_requests() = request(doc_of(4), 8, 2);
  next.mutable_requests(1)->set_model("faulty");
  grpc::ClientContext ctx2;
  const auto next_status = server.stub().SummarizeBatch(&ctx2, next, &resp);
  ASSERT_TRUE(next_status.ok()) << next_status.error_message();
  ASSERT_EQ(resp.responses_size(), 2);
  EXPECT_EQ(ids_of(resp.responses(0)), offline(doc_of(3), 8, 1).tokens);
  EXPECT_EQ(ids_of(resp.responses(1)), offline(doc_of(4), 8, 2).tokens);
}

// partial_results: items refused up front (an empty document, an unknown model, max_new_tokens 0) or
// failing while they run (the faulty model's encoder) are listed in errors with their own status, their
// responses keep only request_id and model, and the other items are answered as if alone.
TEST(EngineService, APartialBatchAnswersEachItemOnItsOwn) {
  FakeServerOptions so;
  FakeModelOptions faulty;
  faulty.fail_encode_call = 1;
  so.models = {{"fake", FakeModelOptions{}}, {"faulty", faulty}};
  TestServer server(so);
  v1::SummarizeBatchRequest batch;
  batch.set_partial_results(true);
  *batch.add_requests() = request(doc_of(1), 12, 1);
  *batch.add_requests() = make_request("");
  batch.mutable_requests(1)->set_request_id("empty-one");
  *batch.add_requests() = make_request(doc_of(2), "nope");
  *batch.add_requests() = request(doc_of(3), 12, 2);
  *batch.add_requests() = request(doc_of(4), 8, 1);
  batch.mutable_requests(4)->set_model("faulty");
  *batch.add_requests() = request(doc_of(5), 0, 1);
  grpc::ClientContext ctx;
  v1::SummarizeBatchResponse resp;
  const auto status = server.stub().SummarizeBatch(&ctx, batch, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(resp.responses_size(), 6);
  EXPECT_EQ(ids_of(resp.responses(0)), offline(doc_of(1), 12, 1).tokens);
  EXPECT_EQ(ids_of(resp.responses(3)), offline(doc_of(3), 12, 2).tokens);
  EXPECT_EQ(resp.responses(3).model(), "fake");
  ASSERT_EQ(resp.errors_size(), 4);
  const std::vector<std::tuple<int, grpc::StatusCode, std::string>> expected = {
      {1, grpc::StatusCode::INVALID_ARGUMENT, "document is empty"},
      {2, grpc::StatusCode::NOT_FOUND, "nope"},
      {4, grpc::StatusCode::INTERNAL, "generation failed: encoder failed: fake encoder fault"},
      {5, grpc::StatusCode::INVALID_ARGUMENT, "max_new_tokens"}};
  for (int e = 0; e < 4; ++e) {
    const auto& [index, code, says] = expected[static_cast<size_t>(e)];
    const auto& error = resp.errors(e);
    EXPECT_EQ(error.index(), index);
    EXPECT_EQ(error.code(), static_cast<int>(code)) << error.message();
    EXPECT_NE(error.message().find(says), std::string::npos) << error.message();
    EXPECT_EQ(error.message().find("requests["), std::string::npos) << "the index is a field: " << error.message();
    const auto& empty = resp.responses(index);
    EXPECT_TRUE(empty.summary().empty() && empty.token_ids().empty()) << index;
    EXPECT_EQ(empty.finish_reason(), v1::FINISH_REASON_UNSPECIFIED) << index;
    EXPECT_FALSE(empty.request_id().empty()) << index;
  }
  EXPECT_EQ(resp.responses(1).request_id(), "empty-one");
  EXPECT_EQ(resp.responses(4).model(), "faulty");
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0 && s.state_bytes == 0; }));

  // Every item failing is still an answer: OK, with every error listed.
  v1::SummarizeBatchRequest bad;
  bad.set_partial_results(true);
  *bad.add_requests() = make_request("  ");
  *bad.add_requests() = make_request(doc_of(1), "nope");
  grpc::ClientContext ctx2;
  ASSERT_TRUE(server.stub().SummarizeBatch(&ctx2, bad, &resp).ok());
  EXPECT_EQ(resp.responses_size(), 2);
  ASSERT_EQ(resp.errors_size(), 2);
  EXPECT_EQ(resp.errors(0).index(), 0);
  EXPECT_EQ(resp.errors(1).index(), 1);
  // Without partial_results the same batch fails as a whole, naming the first item refused.
  bad.set_partial_results(false);
  grpc::ClientContext ctx3;
  const auto whole = server.stub().SummarizeBatch(&ctx3, bad, &resp);
  EXPECT_EQ(whole.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(whole.error_message().rfind("requests[0]: ", 0), 0U) << whole.error_message();
}

// partial_results with a full queue: the item the queue cannot take is RESOURCE_EXHAUSTED on its own,
// the one it took is answered once the queue moves.
TEST(EngineService, APartialBatchItemTheQueueCannotTakeFailsAlone) {
  TestServer server(one_row_queue_of_two());
  SlowStreams slow;
  ASSERT_NO_FATAL_FAILURE(slow.open(server, 2));
  v1::SummarizeBatchRequest batch;
  batch.set_partial_results(true);
  *batch.add_requests() = request(doc_of(1), 6, 1);
  *batch.add_requests() = request(doc_of(2), 6, 1);
  v1::SummarizeBatchResponse resp;
  auto call = std::async(std::launch::async, [&] {
    grpc::ClientContext ctx;
    return server.stub().SummarizeBatch(&ctx, batch, &resp);
  });
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.queued == 2; }));
  slow.cancel();
  const auto status = call.get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(resp.responses_size(), 2);
  EXPECT_EQ(ids_of(resp.responses(0)), offline(doc_of(1), 6, 1, FakeModelOptions{256, 4, 20ms}).tokens);
  ASSERT_EQ(resp.errors_size(), 1);
  EXPECT_EQ(resp.errors(0).index(), 1);
  EXPECT_EQ(resp.errors(0).code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_NE(resp.errors(0).message().find("--max-queue"), std::string::npos) << resp.errors(0).message();
  EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.queued == 0 && s.live_rows == 0; }));
}

TEST(EngineService, ABatchLargerThanTheQueueIsRefusedUpFrontAndNothingRuns) {
  FakeServerOptions so;
  so.config.max_queue = 4;
  TestServer server(so);
  v1::SummarizeBatchRequest batch;
  for (int i = 0; i < 5; ++i) *batch.add_requests() = request(doc_of(i), 4, 1);
  grpc::ClientContext ctx;
  v1::SummarizeBatchResponse resp;
  const auto st = server.stub().SummarizeBatch(&ctx, batch, &resp);
  // Not RESOURCE_EXHAUSTED: retrying could never succeed, even on an idle server.
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("holds 5 requests, more than this server's queues take together (4"),
            std::string::npos)
      << st.error_message();
  EXPECT_NE(st.error_message().find("split it"), std::string::npos) << st.error_message();
  EXPECT_EQ(server.engine().stats().queued, 0);
  EXPECT_EQ(server.engine().stats().live_requests, 0);
  // As many as the queue takes: served.
  batch.mutable_requests()->RemoveLast();
  grpc::ClientContext ctx2;
  ASSERT_TRUE(server.stub().SummarizeBatch(&ctx2, batch, &resp).ok());
  EXPECT_EQ(resp.responses_size(), 4);
}

// A batch holding more items than the server's queues take together (whatever the items hold) is
// refused before any item is prepared, answered or logged: a 4 MiB body of two million empty items cost a
// minute, gigabytes, two million log lines and a 200 MB answer. Up to that many, items are answered each.
TEST(EngineService, ABatchLargerThanEveryQueueTogetherIsRefusedBeforeItsItems) {
  LogCapture captured;
  FakeServerOptions so;
  so.config.max_queue = 3;
  so.models = {{"alpha", FakeModelOptions{}}, {"beta", FakeModelOptions{}}};
  TestServer server(so);
  for (const bool partial : {true, false}) {
    SCOPED_TRACE(partial);
    v1::SummarizeBatchRequest batch;
    batch.set_partial_results(partial);
    for (int i = 0; i < 7; ++i) {
      *batch.add_requests() = make_request("", i % 2 ? "beta" : "nope");
      batch.mutable_requests(i)->set_request_id("big-" + std::to_string(i));
    }
    grpc::ClientContext ctx;
    v1::SummarizeBatchResponse resp;
    const auto st = server.stub().SummarizeBatch(&ctx, batch, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("holds 7 requests, more than this server's queues take together (6"),
              std::string::npos)
        << st.error_message();
    EXPECT_NE(st.error_message().find("batches of at most 6"), std::string::npos) << st.error_message();
  }
  EXPECT_EQ(captured.text().find("request big-"), std::string::npos) << captured.text();
  // As many as the queues take: each item answered on its own.
  v1::SummarizeBatchRequest batch;
  batch.set_partial_results(true);
  for (int i = 0; i < 6; ++i) *batch.add_requests() = make_request("", i % 2 ? "beta" : "nope");
  grpc::ClientContext ctx;
  v1::SummarizeBatchResponse resp;
  ASSERT_TRUE(server.stub().SummarizeBatch(&ctx, batch, &resp).ok());
  EXPECT_EQ(resp.errors_size(), 6);
  // Within that, more for one model than its own queue takes is refused as before.
  v1::SummarizeBatchRequest one_model;
  for (int i = 0; i < 4; ++i) *one_model.add_requests() = make_request(doc_of(i), "alpha");
  grpc::ClientContext ctx2;
  const auto st = server.stub().SummarizeBatch(&ctx2, one_model, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("more than 3 requests for model 'alpha'"), std::string::npos) << st.error_message();
}

// A batch asking two models counts once under each (srformer_requests_total is per model), with the
// call's code whichever item ended it; the refusal itself (srformer_requests_rejected_total) counts under
// the model of the request refused, not the batch's first.
// A partial_results batch ended by its deadline or the client's cancel counts and logs the status the
// client got, not the OK of a response nobody receives, and none of its items (it counted OK, with its
// items under srformer_batch_items_total).
// A cancel that arrives just before the server's copy of the deadline is the client's deadline (gRPC
// cancels the call then; a loaded machine delays its arrival, and CI counted such a call CANCELLED).
TEST(EngineService, ACancelNearTheDeadlineIsTheDeadlines) {
  using server::cancel_near_deadline;
  EXPECT_TRUE(cancel_near_deadline(990ms, 10ms));
  EXPECT_TRUE(cancel_near_deadline(800ms, 240ms));   // a quarter of 1040 ms is 260 ms
  EXPECT_FALSE(cancel_near_deadline(100ms, 900ms));  // an early cancel is the client's own
  EXPECT_FALSE(cancel_near_deadline(9s, 300ms));     // at most 250 ms, whatever the call's length
  EXPECT_TRUE(cancel_near_deadline(9s, 250ms));
  EXPECT_FALSE(cancel_near_deadline(150ms, 60ms));  // short calls: a quarter (52 ms)
  EXPECT_TRUE(cancel_near_deadline(150ms, 50ms));
  EXPECT_TRUE(cancel_near_deadline(0ms, 0ms));
}

TEST(EngineService, ABatchEndedByItsDeadlineOrACancelCountsThatStatus) {
  server::Metrics metrics("");
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}};
  so.config.max_new_tokens_cap = 1000;
  so.metrics = &metrics;
  TestServer server(so);
  v1::SummarizeBatchRequest batch;
  batch.set_partial_results(true);
  for (int i = 0; i < 2; ++i) {
    *batch.add_requests() = request(doc_of(i), 1000, 1);
    batch.mutable_requests(i)->mutable_options()->set_min_new_tokens(1000);
  }
  using server::testing::sample;
  const auto calls = [&](const std::string& code) {
    return sample(metrics.scrape_text(), "srformer_requests_total",
                  {{"model", "fake"}, {"method", "SummarizeBatch"}, {"code", code}})
        .value_or(0.0);
  };
  {
    grpc::ClientContext ctx;
    // 1 s: the cancel gRPC sends at the client's deadline may arrive before the server's copy of the
    // deadline passes; within a quarter of the call's time (at most 250 ms) it counts as the deadline's.
    ctx.set_deadline(std::chrono::system_clock::now() + 1s);
    v1::SummarizeBatchResponse resp;
    EXPECT_EQ(server.stub().SummarizeBatch(&ctx, batch, &resp).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0; }, 5s));
  {
    grpc::ClientContext ctx;
    v1::SummarizeBatchResponse resp;
    auto call = std::async(std::launch::async, [&] { return server.stub().SummarizeBatch(&ctx, batch, &resp); });
    // Cancelled once its items decode (a call cancelled before the server takes it is never counted).
    EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 2; }, 10s));
    ctx.TryCancel();
    EXPECT_EQ(call.get().error_code(), grpc::StatusCode::CANCELLED);
  }
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0; }, 5s));
  // The server ends each call once its items have stopped, after the client has its status.
  for (int i = 0; i < 100 && !(calls("DEADLINE_EXCEEDED") == 1.0 && calls("CANCELLED") == 1.0); ++i) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(calls("DEADLINE_EXCEEDED"), 1.0) << metrics.scrape_text();
  EXPECT_EQ(calls("CANCELLED"), 1.0);
  EXPECT_EQ(calls("OK"), 0.0);
  for (const std::string code : {"OK", "DEADLINE_EXCEEDED", "CANCELLED"}) {
    EXPECT_FALSE(sample(metrics.scrape_text(), "srformer_batch_items_total", {{"model", "fake"}, {"code", code}}))
        << code << ": the call returned no items";
  }
}

// A batch refused whole before queueing (an invalid item, partial_results off) logs every other item too,
// with the client's id: the valid one before the refused item had no line at all, though it had an id.
TEST(EngineService, EveryItemOfABatchRefusedBeforeQueueingIsLoggedWithItsId) {
  LogCapture captured;
  {
    TestServer server;
    v1::SummarizeBatchRequest batch;
    *batch.add_requests() = request(doc_of(0), 8, 1);
    batch.mutable_requests(0)->set_request_id("item-before");
    *batch.add_requests() = request("", 8, 1);
    batch.mutable_requests(1)->set_request_id("item-empty");
    *batch.add_requests() = request(doc_of(2), 8, 1);
    batch.mutable_requests(2)->set_request_id("item-after");
    grpc::ClientContext ctx;
    v1::SummarizeBatchResponse resp;
    EXPECT_EQ(server.stub().SummarizeBatch(&ctx, batch, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  const std::string log = captured.text();
  EXPECT_NE(log.find("request item-empty: SummarizeBatch model=fake refused with INVALID_ARGUMENT"), std::string::npos)
      << log;
  for (const char* id : {"item-before", "item-after"}) {
    EXPECT_NE(log.find(std::string("request ") + id +
                       ": SummarizeBatch model=fake not run: requests[1] of its batch was refused"),
              std::string::npos)
        << log;
  }
}

// Every item of a batch that was queued gets its log line with its request id, also when another
// item's failure ends the call (only the call's line was logged then), and an item the call's end kept
// from running says so.
TEST(EngineService, EveryQueuedItemOfAFailedBatchIsLoggedWithItsId) {
  LogCapture captured;
  {
    FakeServerOptions so;
    FakeModelOptions faulty;
    faulty.fail_encode_call = 1;
    so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}, {"faulty", faulty}};
    so.config.max_new_tokens_cap = 1000;
    TestServer server(so);
    v1::SummarizeBatchRequest batch;
    *batch.add_requests() = request(doc_of(0), 1000, 1);
    batch.mutable_requests(0)->mutable_options()->set_min_new_tokens(1000);
    batch.mutable_requests(0)->set_request_id("item-slow");
    *batch.add_requests() = request(doc_of(1), 8, 1);
    batch.mutable_requests(1)->set_model("faulty");
    batch.mutable_requests(1)->set_request_id("item-faulty");
    grpc::ClientContext ctx;
    v1::SummarizeBatchResponse resp;
    EXPECT_EQ(server.stub().SummarizeBatch(&ctx, batch, &resp).error_code(), grpc::StatusCode::INTERNAL);
    EXPECT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_rows == 0; }, 5s));
  }
  const std::string log = captured.text();
  EXPECT_NE(log.find("request item-slow: SummarizeBatch model=fake ended with CANCELLED"), std::string::npos) << log;
  EXPECT_NE(log.find("request item-faulty: SummarizeBatch model=faulty ended with INTERNAL"), std::string::npos) << log;
}

TEST(EngineService, ABatchCountsUnderEveryModelItAsksFor) {
  server::Metrics metrics("");
  FakeServerOptions so;
  so.models = {{"alpha", FakeModelOptions{}}, {"beta", FakeModelOptions{}}};
  so.metrics = &metrics;
  TestServer server(so);
  v1::SummarizeBatchRequest batch;
  *batch.add_requests() = make_request(doc_of(0), "alpha");
  *batch.add_requests() = make_request(doc_of(1), "beta");
  *batch.add_requests() = make_request(doc_of(2), "beta");
  grpc::ClientContext ctx;
  v1::SummarizeBatchResponse resp;
  ASSERT_TRUE(server.stub().SummarizeBatch(&ctx, batch, &resp).ok());
  using server::testing::sample;
  const auto calls = [&](const std::string& model, const std::string& code) {
    return sample(metrics.scrape_text(), "srformer_requests_total",
                  {{"model", model}, {"method", "SummarizeBatch"}, {"code", code}})
        .value_or(0.0);
  };
  EXPECT_EQ(calls("alpha", "OK"), 1.0);
  EXPECT_EQ(calls("beta", "OK"), 1.0);
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_requests_in_flight", {{"model", "beta"}}), 0.0);

  *batch.add_requests() = make_request("", "beta");  // refused: empty document
  grpc::ClientContext ctx2;
  EXPECT_EQ(server.stub().SummarizeBatch(&ctx2, batch, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(calls("beta", "INVALID_ARGUMENT"), 1.0);
  EXPECT_EQ(calls("alpha", "INVALID_ARGUMENT"), 1.0) << "the call asked alpha too (it counted under beta only)";
  EXPECT_EQ(
      sample(metrics.scrape_text(), "srformer_requests_rejected_total", {{"model", "beta"}, {"reason", "invalid"}}),
      1.0);
  EXPECT_EQ(
      sample(metrics.scrape_text(), "srformer_requests_rejected_total", {{"model", "alpha"}, {"reason", "invalid"}}),
      0.0);
  EXPECT_FALSE(sample(metrics.scrape_text(), "srformer_batch_items_total", {{"model", "beta"}, {"code", "OK"}}))
      << "only partial_results batches count their items";

  // partial_results: the call is OK; each item counts under its model with its own code (an unknown
  // model's item under none: the name is the client's text).
  *batch.add_requests() = make_request(doc_of(3), "nope");
  batch.set_partial_results(true);
  grpc::ClientContext ctx3;
  ASSERT_TRUE(server.stub().SummarizeBatch(&ctx3, batch, &resp).ok());
  EXPECT_EQ(resp.errors_size(), 2);
  const auto items = [&](const std::string& model, const std::string& code) {
    return sample(metrics.scrape_text(), "srformer_batch_items_total", {{"model", model}, {"code", code}})
        .value_or(0.0);
  };
  EXPECT_EQ(items("alpha", "OK"), 1.0);
  EXPECT_EQ(items("beta", "OK"), 2.0);
  EXPECT_EQ(items("beta", "INVALID_ARGUMENT"), 1.0);
  EXPECT_EQ(metrics.scrape_text().find("nope"), std::string::npos);
  EXPECT_EQ(calls("beta", "OK"), 2.0);

  // Calls and items naming a model this server does not hold count apart, without the name.
  const auto unrouted = [&](const std::string& method) {
    return sample(metrics.scrape_text(), "srformer_requests_unrouted_total",
                  {{"method", method}, {"reason", "unknown_model"}});
  };
  EXPECT_EQ(unrouted("SummarizeBatch"), 1.0);
  EXPECT_EQ(unrouted("Summarize"), 0.0) << "present at zero before the first";
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext c;
    v1::SummarizeResponse r;
    EXPECT_EQ(server.stub().Summarize(&c, make_request(doc_of(4), "nope"), &r).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_EQ(unrouted("Summarize"), 2.0);
  EXPECT_EQ(calls("alpha", "NOT_FOUND") + calls("beta", "NOT_FOUND"), 0.0);
  // A whole batch ended by an item naming no model still counts under the models it did name.
  v1::SummarizeBatchRequest lost;
  *lost.add_requests() = make_request(doc_of(0), "alpha");
  *lost.add_requests() = make_request(doc_of(1), "nope");
  grpc::ClientContext ctx4;
  EXPECT_EQ(server.stub().SummarizeBatch(&ctx4, lost, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(calls("alpha", "NOT_FOUND"), 1.0);
  EXPECT_EQ(unrouted("SummarizeBatch"), 2.0);
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_requests_in_flight", {{"model", "alpha"}}), 0.0);
  EXPECT_EQ(metrics.scrape_text().find("nope"), std::string::npos);
}

TEST(EngineService, SeveralModelsByNameAndListModels) {
  FakeServerOptions so;
  FakeModelOptions beta{32, 8};
  beta.max_length = 7;  // 6 new tokens
  beta.num_beams = 3;
  beta.expected_length = 9;
  FakeModelOptions delta;
  delta.temperature = 0.0;  // samples by default at temperature 0: no request can take its defaults as they are
  so.models = {{"alpha", FakeModelOptions{}}, {"beta", beta}, {"delta", delta}};
  TestServer server(so);
  grpc::ClientContext ctx;
  v1::ListModelsResponse models;
  ASSERT_TRUE(server.stub().ListModels(&ctx, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 3);
  EXPECT_EQ(models.models(0).name(), "alpha");
  EXPECT_EQ(models.models(1).name(), "beta");
  EXPECT_EQ(models.models(1).segment_size(), 8);
  EXPECT_EQ(models.models(1).max_input_tokens(), 32);
  EXPECT_EQ(models.models(1).max_new_tokens(), 512) << "the server's cap: under the fake BART's 1024 positions";
  EXPECT_EQ(models.models(0).device(), "cpu");
  EXPECT_EQ(models.models(0).dtype(), "fp32");
  EXPECT_EQ(models.models(0).architecture(), "bart");
  // What a request that sets no option gets, every field set.
  const auto& alpha_defaults = models.models(0).defaults();
  EXPECT_EQ(alpha_defaults.max_new_tokens(), 128) << "no max_length in the config: 128";
  EXPECT_EQ(alpha_defaults.num_beams(), 1);
  EXPECT_EQ(alpha_defaults.expected_length(), 128) << "no srformer.expected_length: max_new_tokens";
  EXPECT_EQ(models.models(0).default_expected_length(), 128);
  EXPECT_TRUE(alpha_defaults.has_do_sample() && alpha_defaults.has_seed() && alpha_defaults.has_top_k());
  const auto& beta_defaults = models.models(1).defaults();
  EXPECT_EQ(beta_defaults.max_new_tokens(), 6);
  EXPECT_EQ(beta_defaults.num_beams(), 3);
  EXPECT_EQ(beta_defaults.expected_length(), 9) << "the checkpoint's L";
  EXPECT_EQ(models.models(1).default_expected_length(), 9);
  EXPECT_FALSE(models.models(2).has_defaults()) << "unusable defaults are left out, and listing still works";
  EXPECT_EQ(models.models(2).default_expected_length(), 128);
  for (const std::string name : {"alpha", "beta", ""}) {
    grpc::ClientContext c;
    v1::SummarizeResponse resp;
    ASSERT_TRUE(server.stub().Summarize(&c, make_request("some text", name), &resp).ok());
    EXPECT_EQ(resp.model(), name.empty() ? "alpha" : name);
  }
  grpc::ClientContext c;
  v1::SummarizeResponse resp;
  const auto st = server.stub().Summarize(&c, make_request("some text", "gamma"), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("alpha, beta"), std::string::npos) << st.error_message();
}

TEST(EngineService, ModelDefaultsPrefixAndTruncation) {
  FakeServerOptions so;
  FakeModelOptions mo;
  mo.max_input_tokens = 20;
  mo.max_length = 7;  // HF max_length counts decoder start: 6 new tokens
  mo.prefix = "summarize: ";
  so.models = {{"fake", mo}};
  TestServer server(so);
  {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    ASSERT_TRUE(server.stub().Summarize(&ctx, make_request("abc"), &resp).ok());
    EXPECT_EQ(resp.usage().input_tokens(), 11 + 3 + 1);
    EXPECT_LE(resp.token_ids_size(), 6);
  }
  const std::string longdoc(40, 'z');
  {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const auto st = server.stub().Summarize(&ctx, make_request(longdoc), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("TRUNCATION_POLICY_TRUNCATE"), std::string::npos) << st.error_message();
  }
  {
    auto req = make_request(longdoc);
    req.set_truncation(v1::TRUNCATION_POLICY_TRUNCATE);
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    ASSERT_TRUE(server.stub().Summarize(&ctx, req, &resp).ok());
    EXPECT_TRUE(resp.usage().truncated());
    EXPECT_EQ(resp.usage().input_tokens(), 20);
    EXPECT_EQ(resp.usage().original_input_tokens(), 11 + 40 + 1);
  }
}

// A truncated request kept the capacity of its whole document's tokens (resize() gives no memory back): 8
// bytes a token of a 4 MiB document, not of the model's limit, held while it queued, decoded and waited for
// its client to take the answer (measured: 42 MB an unread Summarize of 3 MiB on the fake tokenizer).
TEST(EngineService, ATruncatedRequestHoldsOnlyTheTokensItKeeps) {
  FakeServerOptions so;
  FakeModelOptions mo;
  mo.max_input_tokens = 20;
  so.models = {{"fake", mo}};
  TestServer server(so);
  auto in = make_request(std::string(100000, 'z'));
  in.set_truncation(v1::TRUNCATION_POLICY_TRUNCATE);
  const auto req = server::build_request(in, server.engine(), server::ServiceLimits{}, std::nullopt);
  EXPECT_EQ(req->input_ids.size(), 20u);
  EXPECT_EQ(req->usage.original_input_tokens, 100000 + 1);
  EXPECT_LE(req->input_ids.capacity(), 21u);
}

TEST(EngineService, MessageOverTheSizeLimitIsRefused) {
  FakeServerOptions so;
  so.config.max_message_bytes = 64 * 1024;
  TestServer server(so);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  const auto st = server.stub().Summarize(&ctx, make_request(std::string(100 * 1024, 'a')), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  grpc::ClientContext ok_ctx;
  EXPECT_TRUE(server.stub().Summarize(&ok_ctx, make_request("still alive"), &resp).ok());
}

TEST(EngineService, HealthIsServingAtOnceAndNotServingDuringShutdown) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 10ms}}};
  TestServer server(so);
  const std::string service = "srformer.v1.Summarizer";
  EXPECT_EQ(client::check_health(server.channel(), "", 2s), client::HealthStatus::kServing);
  EXPECT_EQ(client::check_health(server.channel(), service, 2s), client::HealthStatus::kServing);
  auto fut = summarize_async(server, request(doc_of(3), 30, 1));
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
  std::thread stopper([&] { server.server().shutdown(10s); });
  ASSERT_TRUE(server.wait_for([&](const server::EngineStats&) { return server.server().service().shutting_down(); }));
  EXPECT_EQ(client::check_health(server.channel(), "", 2s), client::HealthStatus::kNotServing);
  EXPECT_EQ(client::check_health(server.channel(), service, 2s), client::HealthStatus::kNotServing);
  EXPECT_TRUE(fut.get().first.ok());
  stopper.join();
}

// A model's engine that had work and did not move (a CUDA call that never returns, a deadlock) left the health
// service SERVING: readiness and liveness probes kept sending calls to a server whose requests waited until
// their deadlines, and only the SrformerEngineStalled alert, minutes later, said so. Health now answers
// NOT_SERVING once an engine has had work for --engine-stall-timeout-ms without moving, and SERVING once it
// moves again. Idle time before a request does not count; a long encode that moves from piece to piece is
// no stall; an engine that moves again during the drain leaves it NOT_SERVING.
TEST(EngineService, HealthIsNotServingWhileAnEngineIsStalledAndServingOnceItMovesAgain) {
  LogCapture log;
  FakeServerOptions so;
  so.config.engine_stall_timeout_ms = 500;
  FakeModelOptions long_encode;
  long_encode.encode_layers = 12;
  long_encode.encode_layer_delay = 100ms;  // 1.2 s of encode, moving every 100 ms
  so.models = {{"fake", FakeModelOptions{}}, {"long", long_encode}};
  const auto hang = so.models[0].second.hang_steps;
  TestServer server(so);
  const StoreOnExit release(hang, false);  // a failed assertion must not leave the engine hung
  const std::string service = "srformer.v1.Summarizer";
  const auto health_becomes = [&](client::HealthStatus want) {
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < end) {
      if (client::check_health(server.channel(), "", 2s) == want &&
          client::check_health(server.channel(), service, 2s) == want) {
        return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  const auto summarize = [&](const std::string& model) {
    auto r = request(doc_of(3), 8, 1);
    r.set_model(model);
    return summarize_async(server, std::move(r), 60s);
  };
  std::this_thread::sleep_for(700ms);  // idle past the limit: a request's wait counts from the request
  hang->store(true);
  auto hung = summarize("fake");
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.steps > 0 || s.encoding > 0; }));
  EXPECT_LT(server.engine("fake").without_progress(std::chrono::steady_clock::now()), 500ms);
  EXPECT_EQ(client::check_health(server.channel(), "", 2s), client::HealthStatus::kServing);

  ASSERT_TRUE(health_becomes(client::HealthStatus::kNotServing));
  EXPECT_NE(log.text().find("model 'fake': has had requests for"), std::string::npos) << log.text();
  hang->store(false);
  ASSERT_TRUE(health_becomes(client::HealthStatus::kServing));
  EXPECT_TRUE(hung.get().first.ok());
  EXPECT_NE(log.text().find("model 'fake': moves again after"), std::string::npos) << log.text();

  // 1.2 s of encode without a decode step, but moving: SERVING throughout.
  auto encoded = summarize("long");
  const auto end = std::chrono::steady_clock::now() + 1500ms;
  while (std::chrono::steady_clock::now() < end) {
    EXPECT_EQ(client::check_health(server.channel(), "", 2s), client::HealthStatus::kServing);
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(encoded.get().first.ok());
  EXPECT_EQ(server.engine("long").without_progress(std::chrono::steady_clock::now()), 0ms);  // idle

  // Stalled as the drain begins, moving during it (while a long encode holds the drain open): the request
  // finishes, and health stays NOT_SERVING.
  hang->store(true);
  auto draining = summarize("fake");
  ASSERT_TRUE(health_becomes(client::HealthStatus::kNotServing));
  auto holding = summarize("long");
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.encoding > 0; }, 10s, "long"));
  std::thread stopper([&] { server.server().shutdown(20s); });
  ASSERT_TRUE(server.wait_for([&](const server::EngineStats&) { return server.server().service().shutting_down(); }));
  hang->store(false);
  EXPECT_TRUE(draining.get().first.ok());
  std::this_thread::sleep_for(300ms);  // more than a tick of the stall watch (125 ms)
  EXPECT_EQ(client::check_health(server.channel(), "", 2s), client::HealthStatus::kNotServing);
  EXPECT_TRUE(holding.get().first.ok());
  stopper.join();
}

// A model's engine hung in a step (a CUDA call that never returns) held a stopped server for good: its
// request's call stayed open, holding gRPC's shutdown, and the server's destructor waited for the decode
// thread, so srformer-server ended only by the supervisor's SIGKILL. main() now waits Server::shutdown_bound
// for the drain, then stop_engines, which returns in bounded time naming the stuck model (the model beside
// it, which stops, is not named), and exits (status 3) without the destructor.
TEST(EngineService, StoppingEnginesWithOneHungInAStepNamesItInBoundedTime) {
  LogCapture log;
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{}}, {"other", FakeModelOptions{256, 4, 20ms}}};
  const auto hang = so.models[0].second.hang_steps;
  TestServer server(so);
  const StoreOnExit release(hang, false);  // a failed assertion must not leave the engine hung
  const auto summarize = [&](const std::string& model, int max_new_tokens) {
    auto r = request(doc_of(3), max_new_tokens, 1);
    r.mutable_options()->set_min_new_tokens(max_new_tokens);
    r.set_model(model);
    return summarize_async(server, std::move(r), 60s);
  };
  hang->store(true);
  auto hung = summarize("fake", 8);
  auto running = summarize("other", 200);  // 4 s of steps
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.encoding > 0 || s.steps > 0; }));
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.steps > 0; }, 10s, "other"));

  std::thread drain([&] { server.server().shutdown(0ms); });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(server.server().wait_until(t0 + 500ms));  // the drain waits for the hung engine
  const auto stuck = server.server().stop_engines(500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(stuck, std::vector<std::string>{"fake"});
  EXPECT_NE(log.text().find("model 'fake': its engine did not stop within 500 ms of the shutdown"), std::string::npos)
      << log.text();
  EXPECT_EQ(log.text().find("model 'other': its engine did not stop"), std::string::npos) << log.text();
  EXPECT_EQ(running.get().first.error_code(), grpc::StatusCode::UNAVAILABLE);  // cancelled by the shutdown

  // Released, the engine ends its cancelled request, and the drain and the destructor complete.
  hang->store(false);
  EXPECT_EQ(hung.get().first.error_code(), grpc::StatusCode::UNAVAILABLE);
  drain.join();
  EXPECT_TRUE(server.server().wait_until(std::chrono::steady_clock::now()));
  EXPECT_TRUE(server.server().stop_engines(0ms).empty());
}

// A shutdown that did not end (an engine hung in a step) exited 1, the status of a start that failed (a model
// that did not load, a port in use): a supervisor, or an operator reading a pod's last state, could not tell
// a stuck GPU from a bad configuration. main() exits with what Server::finish_shutdown returns: 3 there, in
// bounded time, said in the log; 0 once the engine moves and the drain completes.
TEST(EngineService, AShutdownStuckOnAHungEngineEndsWithItsOwnStatusNotAFailedStartsOne) {
  LogCapture log;
  FakeServerOptions so;
  const auto hang = so.models[0].second.hang_steps;
  TestServer server(so);
  const StoreOnExit release(hang, false);  // a failed assertion must not leave the engine hung
  hang->store(true);
  auto hung = std::async(std::launch::async, [&server] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 60s);
    v1::SummarizeResponse resp;
    return server.stub().Summarize(&ctx, request(doc_of(3), 8, 1), &resp);
  });
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.encoding > 0 || s.steps > 0; }));

  std::thread drain([&] { server.server().shutdown(0ms); });
  const auto t0 = std::chrono::steady_clock::now();
  const int status = server.server().finish_shutdown(t0 + 500ms, 500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(status, 3);  // as docs/OPERATIONS.md says: not 1 (a start that failed) nor 2 (a configuration refused)
  EXPECT_EQ(status, server::kStuckShutdownExitStatus);
  EXPECT_NE(log.text().find("shutdown: exiting with status 3 without waiting for the stuck engine's thread"),
            std::string::npos)
      << log.text();

  hang->store(false);
  EXPECT_EQ(hung.get().error_code(), grpc::StatusCode::UNAVAILABLE);
  drain.join();
  EXPECT_EQ(server.server().finish_shutdown(std::chrono::steady_clock::now(), 0ms), 0);
}

// Server::stop_engines(bound), which main() counts on to return in bounded time, waited for the delivery
// thread's join without a bound: a request's callback that hung there (one must not; a log line to a stderr
// pipe nobody reads blocks) held the stopping server for good, after its decode thread had ended. Now it
// returns by the bound and names the model, saying it is a callback.
TEST(EngineService, StoppingEnginesWithARequestsCallbackHungReturnsInBoundedTimeAndNamesIt) {
  LogCapture log;
  TestServer server;
  const auto release = std::make_shared<std::atomic<bool>>(false);
  const StoreOnExit released(release, true);  // a failed assertion must not leave the callback hung
  const auto entered = std::make_shared<std::promise<void>>();
  auto r = server::build_request(request(doc_of(3), 4, 1), server.engine(), server::ServiceLimits{}, std::nullopt);
  r->on_finish = [release, entered](server::RequestResult) {
    entered->set_value();
    while (!release->load()) std::this_thread::sleep_for(1ms);
  };
  server.engine().submit(r);
  ASSERT_EQ(entered->get_future().wait_for(10s), std::future_status::ready);

  const auto t0 = std::chrono::steady_clock::now();
  auto stopping = std::async(std::launch::async, [&] { return server.server().stop_engines(300ms); });
  if (stopping.wait_for(5s) != std::future_status::ready) {
    release->store(true);
    FAIL() << "stop_engines(300 ms) had not returned 5 s on: it waits for the hung callback";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(stopping.get(), std::vector<std::string>{"fake"});
  EXPECT_NE(log.text().find("model 'fake': its engine did not stop within 300 ms of the shutdown (0 ms without "
                            "moving); a request's callback is stuck on its delivery thread"),
            std::string::npos)
      << log.text();

  release->store(true);
  EXPECT_TRUE(server.server().stop_engines(2s).empty());
}

// The same calls after a normal shutdown: the requests finish, and no engine is named.
TEST(EngineService, StoppingEnginesAfterANormalShutdownNamesNone) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{256, 4, 20ms}}};
  TestServer server(so);
  auto call = summarize_async(server, request(doc_of(3), 30, 1));
  ASSERT_TRUE(server.wait_for([](const server::EngineStats& s) { return s.live_requests == 1; }));
  std::thread drain([&] { server.server().shutdown(10s); });
  EXPECT_TRUE(server.server().wait_until(std::chrono::steady_clock::now() + server::Server::shutdown_bound(10s)));
  EXPECT_TRUE(server.server().stop_engines(2s).empty());
  EXPECT_TRUE(call.get().first.ok());
  drain.join();
}

// Long documents are tokenized on the service's own threads. gRPC's callback threads, a few shared by
// every call (the health service's and ListModels' too), tokenized them: while calls of megabytes did (24
// of 3.6 MB on a real model), a health check waited past 20 s, and a liveness probe would restart the
// server. A call cancelled while it waits to be tokenized ends CANCELLED and leaves nothing in flight.
TEST(EngineService, HealthAndListModelsAnswerWhileLongDocumentsAreTokenized) {
  using server::testing::sample;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.metrics = &metrics;
  so.long_document_tokenize_delay = 300ms;
  TestServer server(so);
  const auto long_request = long_document_request(4);
  constexpr int kCalls = 48;  // more than gRPC's callback threads (at most 16), each held 300 ms
  std::vector<SummarizeCall> calls;
  for (int i = 0; i < kCalls; ++i) calls.push_back(summarize_async(server, long_request));
  grpc::ClientContext cancelled_ctx;
  auto cancelled = std::async(std::launch::async, [&] {
    v1::SummarizeResponse resp;
    return server.stub().Summarize(&cancelled_ctx, long_request, &resp);
  });
  std::this_thread::sleep_for(200ms);  // the calls have reached the server
  cancelled_ctx.TryCancel();
  EXPECT_EQ(client::check_health(server.channel(), "", 500ms), client::HealthStatus::kServing);
  grpc::ClientContext list_ctx;
  list_ctx.set_deadline(std::chrono::system_clock::now() + 500ms);
  v1::ListModelsResponse models;
  const grpc::Status listed = server.stub().ListModels(&list_ctx, v1::ListModelsRequest(), &models);
  EXPECT_TRUE(listed.ok()) << listed.error_code() << ": " << listed.error_message();
  for (auto& call : calls) {
    const grpc::Status status = call.get().first;
    EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  }
  EXPECT_EQ(cancelled.get().error_code(), grpc::StatusCode::CANCELLED);
  const auto counted = [&](const std::string& code) {
    return sample(metrics.scrape_text(), "srformer_requests_total",
                  {{"model", "fake"}, {"method", "Summarize"}, {"code", code}})
        .value_or(0.0);
  };
  EXPECT_TRUE(server.wait_for([&](const server::EngineStats& s) {
    return s.live_requests == 0 && counted("OK") + counted("CANCELLED") == kCalls + 1;
  })) << metrics.scrape_text();
  EXPECT_EQ(counted("CANCELLED"), 1.0);
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_requests_in_flight", {{"model", "fake"}}), 0.0);
}

// A response the server runs out of memory building (a SummarizeBatch's of many long summaries, a
// ListModels) ends RESOURCE_EXHAUSTED, as a request that runs out preparing or queueing does: ListModels,
// Summarize, SummarizeStream and SummarizeBatch answered INTERNAL, which SrformerHighErrorRate counts and
// retry policies do not retry. Other failures stay INTERNAL.
TEST(EngineService, RunningOutOfMemoryBuildingAResponseIsResourceExhausted) {
  const grpc::Status oom = server::build_response([]() -> grpc::Status { throw std::bad_alloc(); });
  EXPECT_EQ(oom.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(oom.error_message(), "the server ran out of memory building the response; retry later");
  const grpc::Status other = server::build_response([]() -> grpc::Status { throw std::runtime_error("no"); });
  EXPECT_EQ(other.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(other.error_message(), "building the response failed: no");
  EXPECT_TRUE(server::build_response([] { return grpc::Status::OK; }).ok());
}

// What the engine's submit() throws that is none of its own refusals (LibTorch's c10::Error from a bad
// shape, std::bad_alloc) ends the call with INTERNAL, or RESOURCE_EXHAUSTED for memory, and a message, and
// logs an error line with the request id; the server serves on. It reached gRPC as UNKNOWN ("Unexpected
// error in RPC handling") with nothing logged, and left the call in srformer_requests_in_flight. Memory
// counts in srformer_requests_rejected_total{reason="out_of_memory"}: no metric nor alert saw it.
TEST(EngineService, AFailureToQueueIsInternalOrResourceExhaustedAndLogged) {
  using server::testing::sample;
  LogCapture captured;
  server::Metrics metrics("");
  FakeServerOptions so;
  so.metrics = &metrics;
  so.searcher_factory = [](const GenerationOptions& o) {
    if (o.num_beams == 3) throw std::bad_alloc();
    if (o.num_beams == 2) (void)torch::zeros({2, 3}).matmul(torch::zeros({2, 3}));  // c10::Error
    return make_searcher(o);
  };
  TestServer server(so);
  struct Case {
    int beams;
    grpc::StatusCode code;
  };
  for (const Case c : {Case{3, grpc::StatusCode::RESOURCE_EXHAUSTED}, Case{2, grpc::StatusCode::INTERNAL}}) {
    SCOPED_TRACE(c.beams);
    const std::string id = "beams-" + std::to_string(c.beams);
    auto r = request(doc_of(1), 8, c.beams);
    r.set_request_id(id + "-unary");
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const grpc::Status unary = server.stub().Summarize(&ctx, r, &resp);
    EXPECT_EQ(unary.error_code(), c.code) << unary.error_message();
    EXPECT_FALSE(unary.error_message().empty());

    r.set_request_id(id + "-stream");
    grpc::ClientContext sctx;
    auto reader = server.stub().SummarizeStream(&sctx, r);
    v1::SummarizeStreamResponse msg;
    while (reader->Read(&msg)) {
    }
    const grpc::Status stream = reader->Finish();
    EXPECT_EQ(stream.error_code(), c.code) << stream.error_message();

    v1::SummarizeBatchRequest batch;
    batch.set_partial_results(true);
    *batch.add_requests() = request(doc_of(2), 8, 1);
    *batch.add_requests() = r;
    batch.mutable_requests(1)->set_request_id(id + "-item");
    grpc::ClientContext bctx;
    v1::SummarizeBatchResponse bresp;
    ASSERT_TRUE(server.stub().SummarizeBatch(&bctx, batch, &bresp).ok());
    ASSERT_EQ(bresp.errors_size(), 1);
    EXPECT_EQ(bresp.errors(0).index(), 1);
    EXPECT_EQ(bresp.errors(0).code(), static_cast<int>(c.code)) << bresp.errors(0).message();
    EXPECT_EQ(ids_of(bresp.responses(0)), offline(doc_of(2), 8, 1).tokens);

    const std::string log = captured.text();
    for (const char* call : {"-unary", "-stream", "-item"}) {
      EXPECT_NE(log.find("[error] request " + id + call + ": "), std::string::npos) << id + call << "\n" << log;
    }
  }
  // None of them was the client's: they are no refusal (invalid, queue full), and none is left in flight.
  for (const std::string reason : {"invalid", "queue_full"}) {
    EXPECT_EQ(sample(metrics.scrape_text(), "srformer_requests_rejected_total", {{"model", "fake"}, {"reason", reason}})
                  .value_or(0.0),
              0.0)
        << reason;
  }
  // Running out of memory is counted, so that an alert can see it (its RESOURCE_EXHAUSTED is no full queue):
  // the three calls of the bad_alloc case, not the c10::Error ones (INTERNAL, in srformer_requests_total).
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_requests_rejected_total",
                   {{"model", "fake"}, {"reason", "out_of_memory"}}),
            3.0);
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_requests_in_flight", {{"model", "fake"}}), 0.0);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  ASSERT_TRUE(server.stub().Summarize(&ctx, request(doc_of(3), 8, 1), &resp).ok());
  EXPECT_EQ(ids_of(resp), offline(doc_of(3), 8, 1).tokens);
}

}  // namespace
}  // namespace srformer::testing
