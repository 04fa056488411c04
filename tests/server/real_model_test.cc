// The server with a real tiny SRformer T5 (fixture weights + a SentencePiece tokenizer trained here):
// unary and streaming results equal the offline generate() driver, alone and among 32 concurrent
// requests of different lengths and options.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "model/generation/generate.h"
#include "model/kernels/avx2.h"
#include "server/metrics/metrics.h"
#include "server/server.h"
#include "tests/metrics/scrape.h"
#include "tests/server/edge_options.h"
#include "tests/server/tiny_real_model.h"
#include "tests/support/kernel_switches.h"

namespace srformer::testing {
namespace {

namespace fs = std::filesystem;

// A server of a test's own, serving `models` as `config` says on a loopback port of its own (no metrics
// listener), and a stub that calls it.
struct OwnServer {
  std::unique_ptr<server::Server> server;
  std::unique_ptr<v1::Summarizer::Stub> stub;
};
OwnServer serve(server::ServerConfig config, std::vector<server::LoadedModel> models,
                server::Metrics* metrics = nullptr) {
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "";
  OwnServer own;
  own.server = std::make_unique<server::Server>(config, std::move(models), metrics);
  own.server->start();
  own.stub = v1::Summarizer::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(own.server->port()), grpc::InsecureChannelCredentials()));
  return own;
}

class RealModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_tiny_t5_srformer(fs::temp_directory_path() / ("srformer_server_real_t5_" + std::to_string(::getpid())));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  void SetUp() override {
    if (dir_.empty()) GTEST_SKIP() << "fixture t5-srformer not found under " << fixtures_dir();
    auto own = start_server({}, &metrics_);
    server_ = std::move(own.server);
    stub_ = std::move(own.stub);
    reference_ = load_model(dir_);
    tokenizer_ = load_tokenizer(dir_);
  }

  // A server of the test's own on the fixture model, listening as SetUp's does, `config` for the rest.
  static OwnServer start_server(server::ServerConfig config, server::Metrics* metrics = nullptr) {
    config.max_new_tokens_cap = 64;
    std::vector<server::LoadedModel> models;
    models.push_back(server::load_model_dir({"t5", dir_.string()}, server::ServerConfig{}));
    return serve(std::move(config), std::move(models), metrics);
  }

  // Offline reference: the generate() driver on its own model instance.
  std::vector<int64_t> offline(const std::string& doc, int max_new, int beams, int no_repeat = 0) {
    return offline_best(doc, max_new, beams, no_repeat).tokens;
  }
  // The same, with the best hypothesis' score and per-token log-probabilities.
  Hypothesis offline_best(const std::string& doc, int max_new, int beams, int no_repeat = 0) {
    auto ids = tokenizer_->encode(doc);
    const auto input = torch::tensor(ids, torch::kInt64).unsqueeze(0);
    GenerationOptions o;
    o.max_new_tokens = max_new;
    o.num_beams = beams;
    o.no_repeat_ngram_size = no_repeat;
    o = with_model_tokens(o, reference_->config());
    auto r = generate(*reference_, input, torch::ones_like(input), o,
                      torch::full({1}, static_cast<int64_t>(max_new), torch::kInt64));
    return r.at(0).hypotheses.at(0);
  }

  // Sampling at a high temperature, 16 new tokens at most: on this random tiny model the samples differ, and
  // EOS comes often enough that some end before others.
  static v1::SummarizeRequest sampling_request(const std::string& doc, int samples, uint64_t seed) {
    auto r = request(doc, 16, 1);
    r.mutable_options()->set_do_sample(true);
    r.mutable_options()->set_seed(seed);
    r.mutable_options()->set_temperature(3.0F);
    r.mutable_options()->set_num_return_sequences(samples);
    return r;
  }
  // The server's defaults for a request of 16 new tokens at most (top_k 50 …), as generate() takes them.
  GenerationOptions defaults_for_16_new_tokens() const {
    auto o = model_generation_defaults(reference_->config());
    o.max_new_tokens = 16;
    o.min_new_tokens = std::min<int64_t>(o.min_new_tokens, 16);
    o.vocab_limit = tokenizer_->vocab_size();
    return o;
  }
  // generate()'s hypotheses for `doc` under `o` (16 new tokens at most).
  std::vector<Hypothesis> offline_16(const std::string& doc, const GenerationOptions& o) const {
    const auto input = torch::tensor(tokenizer_->encode(doc), torch::kInt64).unsqueeze(0);
    return generate(*reference_, input, torch::ones_like(input), o, torch::full({1}, int64_t{16}, torch::kInt64))
        .at(0)
        .hypotheses;
  }
  // What generate() draws for sampling_request(doc, samples, seed), in draw order.
  std::vector<Hypothesis> offline_samples(const std::string& doc, int samples, uint64_t seed) const {
    auto o = defaults_for_16_new_tokens();
    o.do_sample = true;
    o.num_beams = 1;
    o.seed = seed;
    o.temperature = 3.0;
    o.num_return_sequences = samples;
    return offline_16(doc, o);
  }

  static v1::SummarizeRequest request(const std::string& doc, int max_new, int beams, int no_repeat = 0) {
    v1::SummarizeRequest r;
    r.set_document(doc);
    r.mutable_options()->set_max_new_tokens(max_new);
    r.mutable_options()->set_num_beams(beams);
    if (no_repeat) r.mutable_options()->set_no_repeat_ngram_size(no_repeat);
    return r;
  }

  // Another request (24 new tokens, 2 beams) on its own thread, to decode beside a test's: whether it was served.
  std::future<bool> another_request() const {
    return std::async(std::launch::async, [this] {
      grpc::ClientContext ctx;
      v1::SummarizeResponse resp;
      return stub_->Summarize(&ctx, request(synthetic_text(5, 3), 24, 2), &resp).ok();
    });
  }
  // `req` served unary: its summary and alternatives are `ref`'s candidates, its score ref[0]'s.
  void expect_unary_candidates(const v1::SummarizeRequest& req, const std::vector<Hypothesis>& ref);

  // cut_short(i): request i gets a deadline of a few milliseconds, so that it may leave the batch
  // (its rows, beams sharing self-attention slots among them) while the others decode.
  void expect_same_alone_and_among_32(const std::function<int(int)>& beams_of,
                                      const std::function<bool(int)>& cut_short = {});

  // Empty where the fixture is missing, or where SetUpTestSuite threw (no SentencePiece shim): gtest reports
  // that failure and goes on to SetUp and TearDownTestSuite, which dereferenced a null pointer here.
  static inline fs::path dir_;
  server::Metrics metrics_{""};  // server_'s
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<v1::Summarizer::Stub> stub_;
  std::unique_ptr<Seq2SeqModel> reference_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

std::vector<int64_t> ids_of(const v1::SummarizeResponse& r) { return {r.token_ids().begin(), r.token_ids().end()}; }

// `resp`'s summary is `ref`'s first hypothesis and its alternatives the others, in order (token ids).
void expect_candidates(const v1::SummarizeResponse& resp, const std::vector<Hypothesis>& ref, const std::string& how) {
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(ids_of(resp), ref[0].tokens) << how;
  ASSERT_EQ(static_cast<size_t>(resp.alternatives_size()), ref.size() - 1) << how;
  for (int a = 0; a < resp.alternatives_size(); ++a) {
    const auto& alt = resp.alternatives(a);
    EXPECT_EQ(std::vector<int64_t>(alt.token_ids().begin(), alt.token_ids().end()),
              ref[static_cast<size_t>(a) + 1].tokens)
        << how << ", candidate " << a + 1;
  }
}

void RealModel::expect_unary_candidates(const v1::SummarizeRequest& req, const std::vector<Hypothesis>& ref) {
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  ASSERT_TRUE(stub_->Summarize(&ctx, req, &resp).ok());
  expect_candidates(resp, ref, "unary");
  EXPECT_EQ(resp.score(), static_cast<float>(ref[0].score));
}

// A streamed summary: its status, the token ids and text deltas as they came, and the final message.
struct Streamed {
  grpc::Status status;
  std::vector<int64_t> token_ids;
  std::string text;
  v1::SummarizeResponse final;
};

Streamed read_stream(v1::Summarizer::Stub& stub, const v1::SummarizeRequest& req) {
  grpc::ClientContext ctx;
  auto reader = stub.SummarizeStream(&ctx, req);
  Streamed out;
  v1::SummarizeStreamResponse msg;
  while (reader->Read(&msg)) {
    if (msg.has_token()) {
      out.text += msg.token().text();
      out.token_ids.push_back(msg.token().token_id());
    } else {
      out.final = msg.final();
    }
  }
  out.status = reader->Finish();
  return out;
}

TEST_F(RealModel, OptionsAtTheirEdgesAreServedOrRefusedNeverInternal) {
  auto seen = send_edge_option_requests(*stub_, 150, 13);
  EXPECT_GT(seen[grpc::StatusCode::OK], 0);
  // Options that leave no token to choose before min_new_tokens (no token twice, over a vocabulary of
  // 64): INVALID_ARGUMENT naming them, greedy and sampled (it was INTERNAL, blaming the model's weights).
  for (const bool sample : {false, true}) {
    auto r = request(synthetic_text(2, 5), 64, 1, /*no_repeat=*/1);
    r.mutable_options()->set_min_new_tokens(64);
    r.mutable_options()->set_do_sample(sample);
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const auto status = stub_->Summarize(&ctx, r, &resp);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("the request's options leave no token to choose"), std::string::npos)
        << status.error_message();
  }
}

TEST_F(RealModel, UnaryAndStreamEqualOfflineGenerate) {
  const std::string doc = synthetic_text(3, 11);
  for (const int beams : {1, 4}) {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    ASSERT_TRUE(stub_->Summarize(&ctx, request(doc, 20, beams), &resp).ok());
    const auto ref = offline(doc, 20, beams);
    EXPECT_EQ(ids_of(resp), ref) << "beams " << beams;
    EXPECT_EQ(resp.summary(), tokenizer_->decode(ref));
    EXPECT_EQ(resp.usage().segments(), (resp.usage().input_tokens() + 3) / 4);
    EXPECT_GE(resp.usage().raf_firing_rate(), 0.0);
    EXPECT_LE(resp.usage().raf_firing_rate(), 1.0);

    const auto [status, streamed, text, final] = read_stream(*stub_, request(doc, 20, beams));
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(streamed, ref);
    EXPECT_EQ(ids_of(final), ref);
    EXPECT_EQ(text, final.summary());
  }
}

// 32 concurrent requests of different lengths, with beams_of(i) beams each, give what each gives
// offline alone (those cut short: unless their deadline ended them first).
void RealModel::expect_same_alone_and_among_32(const std::function<int(int)>& beams_of,
                                               const std::function<bool(int)>& cut_short) {
  struct Case {
    v1::SummarizeRequest req;
    Hypothesis ref;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 32; ++i) {
    const std::string doc = synthetic_text(1 + i % 6, 100 + static_cast<uint32_t>(i));
    const int max_new = 6 + (i * 7) % 25;
    const int beams = beams_of(i);
    const int no_repeat = i % 4 == 3 ? 2 : 0;
    cases.push_back({request(doc, max_new, beams, no_repeat), offline_best(doc, max_new, beams, no_repeat)});
  }
  // Rows the engine dropped from the running batch before their summary ended: a request whose deadline
  // passes while it queues or encodes never joined it, and leaves no hole.
  const auto left_early = [this] {
    return server::testing::sample(metrics_.scrape_text(), "srformer_rows_left_total",
                                   {{"model", "t5"}, {"reason", "cancelled"}})
        .value_or(0);
  };
  // Cut short, the deadlines are 4 times longer each round until a row has left the batch: what ends a
  // request mid-batch on one machine passes while it still queues on a slower one (there all 11 did).
  int ended_early = 0;
  for (int scale = 1; scale <= 64; scale *= 4) {
    std::vector<std::future<std::pair<grpc::Status, v1::SummarizeResponse>>> futures;
    for (size_t i = 0; i < cases.size(); ++i) {
      const bool short_deadline = cut_short && cut_short(static_cast<int>(i));
      futures.push_back(std::async(std::launch::async, [this, &c = cases[i], short_deadline, i, scale] {
        grpc::ClientContext ctx;
        if (short_deadline) {
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds((5 + 3 * i) * scale));
        }
        v1::SummarizeResponse resp;
        auto st = stub_->Summarize(&ctx, c.req, &resp);
        return std::make_pair(st, resp);
      }));
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      auto [status, resp] = futures[i].get();
      if (cut_short && cut_short(static_cast<int>(i)) && status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        ++ended_early;
        continue;
      }
      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(ids_of(resp), cases[i].ref.tokens) << "request " << i;
      // With the CPU kernels a row computes the same bits in any batch (padded among longer inputs too), so
      // the scores are equal as well, not only the tokens they picked.
      if (kernels::use_cpu_kernels()) {
        EXPECT_EQ(resp.score(), static_cast<float>(cases[i].ref.score)) << "request " << i;
        EXPECT_EQ(std::vector<float>(resp.token_logprobs().begin(), resp.token_logprobs().end()),
                  cases[i].ref.token_logprobs)
            << "request " << i;
      }
    }
    if (!cut_short || left_early() > 0) break;
  }
  if (cut_short) {
    std::printf("%d of the requests cut short ended before their summary, %g rows of them in the batch\n", ended_early,
                left_early());
    EXPECT_GT(left_early(), 0) << "no request cut short left the batch before its summary";
  }
  EXPECT_GT(server_->models().find("t5")->stats().max_live_rows, 4) << "requests were not batched together";
  // The last reply can reach the client just before the decode loop frees that row's state.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (server_->models().find("t5")->stats().state_held_bytes != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->models().find("t5")->stats().state_bytes, 0);
  EXPECT_EQ(server_->models().find("t5")->stats().state_held_bytes, 0) << "no buffer kept once every row left";
}

TEST_F(RealModel, IdenticalAloneAndAmong32Concurrent) {
  expect_same_alone_and_among_32([](int i) { return 1 + i % 3; });
}

// Every third request has a deadline of a few milliseconds: requests leave mid-batch (beams and
// greedy rows, the last rows moving into their holes) and the others' results do not change.
TEST_F(RealModel, OthersUnchangedWhenRequestsLeaveEarly) {
  expect_same_alone_and_among_32([](int i) { return 1 + i % 3; }, [](int i) { return i % 3 == 1; });
}

// All greedy: every request has one row, so the rows of requests that finish are refilled with the
// batch's last rows (the engine's hole filling) instead of shifting every row behind them.
TEST_F(RealModel, IdenticalAloneAndAmong32ConcurrentGreedy) {
  expect_same_alone_and_among_32([](int /*i*/) { return 1; });
}

// With an encoder cache, documents that come again skip the encoder — alone, and in admissions that
// mix them with documents encoded there — and every answer is what the server without a cache gives.
TEST_F(RealModel, EncoderCacheGivesTheSameAnswersAndSkipsTheEncoder) {
  server::ServerConfig config;
  config.encoder_cache_bytes = 64 << 20;
  auto own = start_server(config);
  server::Server& cached = *own.server;
  auto& stub = own.stub;
  const auto call = [](v1::Summarizer::Stub& on, const v1::SummarizeRequest& req) {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const auto status = on.Summarize(&ctx, req, &resp);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return resp;
  };
  const auto expect_same = [](const v1::SummarizeResponse& a, const v1::SummarizeResponse& b, int i) {
    EXPECT_EQ(ids_of(a), ids_of(b)) << "request " << i;
    ASSERT_EQ(a.token_logprobs_size(), b.token_logprobs_size()) << "request " << i;
    for (int t = 0; t < a.token_logprobs_size(); ++t) {
      EXPECT_NEAR(a.token_logprobs(t), b.token_logprobs(t), 1e-5) << "request " << i << " token " << t;
    }
  };
  // Six documents of similar length (admitted in one length group), each asked for twice with other
  // options: greedy, then beams.
  std::vector<v1::SummarizeRequest> requests;
  for (int i = 0; i < 12; ++i) {
    requests.push_back(request(synthetic_text(4, 300 + static_cast<uint32_t>(i % 6)), 12, i < 6 ? 1 : 3));
  }
  const auto first = call(*stub, requests[0]);
  const auto again = call(*stub, requests[6]);  // the same document: from the cache
  EXPECT_FALSE(first.usage().encoder_cached());
  EXPECT_TRUE(again.usage().encoder_cached());
  expect_same(again, call(*stub_, requests[6]), 6);
  const auto before = cached.models().find("t5")->stats();
  EXPECT_EQ(before.encoder_cache_hits, 1);
  EXPECT_GT(before.encoder_cache_bytes, 0);
  // All twelve at once: admissions of cached and new documents together.
  std::vector<std::future<v1::SummarizeResponse>> futures;
  for (size_t i = 0; i < requests.size(); ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] { return call(*stub, requests[i]); }));
  }
  int hits = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto resp = futures[i].get();
    hits += resp.usage().encoder_cached() ? 1 : 0;
    expect_same(resp, call(*stub_, requests[i]), static_cast<int>(i));
  }
  const auto after = cached.models().find("t5")->stats();
  EXPECT_EQ(after.encoder_cache_hits - before.encoder_cache_hits, hits);
  EXPECT_GE(hits, 2);  // documents 0 and 6 at least were held before
  cached.shutdown(std::chrono::milliseconds(1000));
}

// Every bit of an answer (tokens, log-probabilities, scores, alternatives) is the same whether the
// document's encoder output came from the cache, from an encode among longer or shorter documents, or
// from the server without a cache: greedy, beams with alternatives and samples, each document twice
// with other max_new_tokens (another L), all sent at once twice over so that cached rows and new ones
// of other lengths share admissions.
TEST_F(RealModel, EncoderCacheHitIsBitIdenticalToAMiss) {
  // Rows batched with others keep their bits through the CPU kernels only; LibTorch's matmuls (kernels off)
  // change the last bits with the batch's size, so there the same answers differ in their log-probabilities.
  SKIP_WITHOUT_CPU_KERNELS();
  server::ServerConfig config;
  config.encoder_cache_bytes = 64 << 20;
  auto own = start_server(config);
  server::Server& cached = *own.server;
  auto& stub = own.stub;
  std::vector<v1::SummarizeRequest> requests;
  for (int d = 0; d < 5; ++d) {
    const std::string doc = synthetic_text(2 + 3 * d, 900 + static_cast<uint32_t>(d));
    requests.push_back(request(doc, 12 + d, 1));
    auto beams = request(doc, 20 - d, 3);
    beams.mutable_options()->set_num_return_sequences(2);
    requests.push_back(beams);
    requests.push_back(sampling_request(doc, 2, 17 + static_cast<uint64_t>(d)));
  }
  const auto answer = [](v1::Summarizer::Stub& on, const v1::SummarizeRequest& req) {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const auto status = on.Summarize(&ctx, req, &resp);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return resp;
  };
  const auto bits = [](v1::SummarizeResponse r) {
    r.clear_usage();
    r.clear_request_id();
    return r.SerializeAsString();
  };
  std::vector<std::string> alone;
  for (const auto& r : requests) alone.push_back(bits(answer(*stub_, r)));
  int hits = 0;
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<v1::SummarizeResponse>> futures;
    for (size_t i = 0; i < requests.size(); ++i) {
      futures.push_back(std::async(std::launch::async, [&, i] { return answer(*stub, requests[i]); }));
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto resp = futures[i].get();
      hits += resp.usage().encoder_cached() ? 1 : 0;
      EXPECT_EQ(bits(resp), alone[i]) << "round " << round << ", request " << i
                                      << (resp.usage().encoder_cached() ? " (cached)" : "");
    }
  }
  EXPECT_GE(hits, static_cast<int>(requests.size()));  // the second round's at least
  cached.shutdown(std::chrono::milliseconds(1000));
}

// The row counters count rows: a request's beams each join, switch segments, run the RAF neuron and read
// cross keys/values. Expected values from the document's tokens and the paper's schedule (step t reads
// segment min(floor(t*m/L), m-1)), with L < m so that steps skip segments: a greedy request, then 4 beams.
TEST_F(RealModel, RowCountersCountEveryBeamOfARequest) {
  server::Metrics metrics("");
  server::ServerConfig config;
  config.warm_up = false;
  auto own = start_server(config, &metrics);
  server::Server& counted = *own.server;
  auto& stub = own.stub;
  const server::testing::LabelSet t5{{"model", "t5"}};
  const auto counters = [&] {
    const std::string text = metrics.scrape_text();
    std::map<std::string, double> c;
    for (const char* name :
         {"srformer_rows_joined_total", "srformer_segment_switches_total", "srformer_raf_updates_total",
          "srformer_cross_attention_kv_read_total", "srformer_cross_attention_kv_full_equivalent_total",
          "srformer_inter_token_seconds_count", "srformer_time_to_first_token_seconds_count"}) {
      c[name] = server::testing::sample(text, name, t5).value_or(0);
    }
    return c;
  };
  constexpr int kTokens = 20;
  constexpr int kExpectedLength = 6;
  const int64_t segment_size = reference_->config().srformer.segment_size;
  const int64_t layers = reference_->config().decoder_layers;
  const std::string doc = synthetic_text(8, 11);
  for (const int beams : {1, 4}) {
    auto req = request(doc, kTokens, beams);
    req.mutable_options()->set_min_new_tokens(kTokens);  // every beam runs exactly kTokens steps
    req.mutable_options()->set_expected_length(kExpectedLength);
    const auto before = counters();
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    ASSERT_TRUE(stub->Summarize(&ctx, req, &resp).ok());
    const auto after = counters();
    // k and m from the tokenizer and the segment size, not from the server's own report of them.
    const auto k = static_cast<int64_t>(tokenizer_->encode(doc).size());
    const int64_t m = (k + segment_size - 1) / segment_size;
    EXPECT_EQ(resp.usage().input_tokens(), k);
    EXPECT_EQ(resp.usage().segments(), m);
    const int64_t steps = resp.usage().output_tokens();
    ASSERT_EQ(steps, kTokens);
    ASSERT_GT(m, kExpectedLength + 1) << "the document must have more segments than L, so that steps skip some";
    std::set<int64_t> visited;
    for (int64_t t = 0; t < steps; ++t) visited.insert(std::min(t * m / kExpectedLength, m - 1));
    const auto switches = static_cast<double>(beams * static_cast<int64_t>(visited.size()));
    const auto delta = [&](const char* name) { return after.at(name) - before.at(name); };
    EXPECT_EQ(delta("srformer_rows_joined_total"), beams);
    EXPECT_EQ(delta("srformer_segment_switches_total"), switches) << beams << " beams, m=" << m;
    EXPECT_EQ(delta("srformer_raf_updates_total"), switches * static_cast<double>(layers)) << beams << " beams";
    EXPECT_EQ(delta("srformer_cross_attention_kv_read_total"),
              static_cast<double>(beams * steps * std::min(k, segment_size)));
    EXPECT_EQ(delta("srformer_cross_attention_kv_full_equivalent_total"), static_cast<double>(beams * steps * k));
    // Greedy delivers a token a step; beam search all of them at its end, which is one delivery (its
    // zero gaps would drag every inter-token quantile down).
    EXPECT_EQ(delta("srformer_time_to_first_token_seconds_count"), 1);
    EXPECT_EQ(delta("srformer_inter_token_seconds_count"), beams == 1 ? steps - 1 : 0) << beams << " beams";
  }
  counted.shutdown(std::chrono::milliseconds(1000));
}

// The cross-attention K/V counters count the keys each variant's step reads, against the k that full
// attention reads: all k with full attention (no saving), s for srformer, s and the previous segment's s
// for xl_memory, s and one pooled key per segment for global_tokens. They counted s for every segmented
// variant and nothing with full attention, so "attention work saved" summed over models overstated it.
TEST_F(RealModel, KeyValueCountersCountTheKeysEachVariantReads) {
  constexpr int kTokens = 12;
  const std::string doc = synthetic_text(8, 11);
  const int64_t s = reference_->config().srformer.segment_size;
  ASSERT_GT(s, 0);
  const auto per_step = [s](const std::string& kind, int64_t k) -> int64_t {
    const int64_t m = (k + s - 1) / s;
    if (kind == "full") return k;
    if (kind == "xl_memory") return std::min(k, 2 * s);
    if (kind == "global_tokens") return std::min(k, s) + m;
    return std::min(k, s);
  };
  for (const std::string kind : {"full", "srformer", "xl_memory", "global_tokens"}) {
    SCOPED_TRACE(kind);
    // The tiny model's weights and tokenizer with this variant in its config.json.
    const fs::path dir = fs::temp_directory_path() / ("srformer_server_kv_" + kind + "_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    for (const auto& file : fs::directory_iterator(dir_)) {
      fs::copy_file(file.path(), dir / file.path().filename(), fs::copy_options::overwrite_existing);
    }
    auto config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    config["srformer"]["cross_attention"] = kind;
    config["srformer"]["segment_size"] = kind == "full" ? nlohmann::json() : nlohmann::json(s);
    std::ofstream(dir / "config.json") << config.dump();

    server::Metrics metrics("");
    server::ServerConfig server_config;
    server_config.warm_up = false;
    std::vector<server::LoadedModel> models;
    models.push_back(server::load_model_dir({"m", dir.string()}, server::ServerConfig{}));
    auto own = serve(server_config, std::move(models), &metrics);
    server::Server& counted = *own.server;
    auto& stub = own.stub;
    for (const int beams : {1, 3}) {
      auto req = request(doc, kTokens, beams);
      req.mutable_options()->set_min_new_tokens(kTokens);  // every row runs exactly kTokens steps
      const std::string before = metrics.scrape_text();
      grpc::ClientContext ctx;
      v1::SummarizeResponse resp;
      ASSERT_TRUE(stub->Summarize(&ctx, req, &resp).ok());
      const std::string after = metrics.scrape_text();
      const auto delta = [&](const char* name) {
        const server::testing::LabelSet labels{{"model", "m"}};
        return server::testing::sample(after, name, labels).value_or(0) -
               server::testing::sample(before, name, labels).value_or(0);
      };
      const auto k = static_cast<int64_t>(tokenizer_->encode(doc).size());  // not the server's report of it
      EXPECT_EQ(resp.usage().input_tokens(), k);
      ASSERT_EQ(resp.usage().output_tokens(), kTokens);
      ASSERT_GT(k, 2 * s) << "the document must be longer than the widest window";
      const auto row_steps = static_cast<double>(beams * kTokens);
      EXPECT_EQ(delta("srformer_cross_attention_kv_read_total"), row_steps * static_cast<double>(per_step(kind, k)))
          << beams << " beams, k=" << k;
      EXPECT_EQ(delta("srformer_cross_attention_kv_full_equivalent_total"), row_steps * static_cast<double>(k))
          << beams << " beams";
    }
    counted.shutdown(std::chrono::milliseconds(1000));
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}

// A long document (over --max-encode-tokens, encoded alone) lets the short requests queued behind it be
// encoded, started and joined between its sublayers: the real encoder paused inside another encode.
// Every answer is what generate() gives alone. Sent as one SummarizeBatch (queued together, the long
// one first), again until one joined inside (the long encode takes a few ms; nothing forces the order).
TEST_F(RealModel, ShortRequestsJoiningInsideALongEncodeGiveTheOfflineAnswers) {
  server::ServerConfig config;
  config.max_new_tokens_cap = 64;
  config.max_encode_tokens = 96;
  config.encode_stall_ms = 1;
  std::vector<server::LoadedModel> models;
  models.push_back(server::load_model_dir({"t5", dir_.string()}, config));
  auto own = serve(config, std::move(models));
  server::Server& nesting = *own.server;
  auto& stub = own.stub;
  v1::SummarizeBatchRequest batch;
  *batch.add_requests() = request(synthetic_text(150, 41), 12, 1);
  for (int i = 0; i < 6; ++i)
    *batch.add_requests() = request(synthetic_text(2, 50 + static_cast<uint32_t>(i)), 10, 1 + i % 3);
  ASSERT_GT(tokenizer_->encode(batch.requests(0).document()).size(), 96u * 4);
  for (int attempt = 0; attempt < 10 && nesting.models().find("t5")->stats().admitted_while_encoding == 0; ++attempt) {
    grpc::ClientContext ctx;
    v1::SummarizeBatchResponse resp;
    const auto status = stub->SummarizeBatch(&ctx, batch, &resp);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(resp.responses_size(), batch.requests_size());
    for (int i = 0; i < batch.requests_size(); ++i) {
      const auto& req = batch.requests(i);
      EXPECT_EQ(ids_of(resp.responses(i)),
                offline(req.document(), req.options().max_new_tokens(), req.options().num_beams()))
          << "request " << i << ", attempt " << attempt;
    }
  }
  EXPECT_GT(nesting.models().find("t5")->stats().admitted_while_encoding, 0)
      << "no short request joined inside the long encode in 10 attempts";
  nesting.shutdown(std::chrono::milliseconds(1000));
}

// Beam sampling (do_sample with 3 beams, 2 sequences returned): the server's summary and alternative are
// generate()'s with the same seed, streamed and unary alike, and the beams keep their request's seed in
// a batch (a second request decodes beside it).
TEST_F(RealModel, BeamSamplingEqualsOfflineGenerate) {
  const std::string doc = synthetic_text(3, 31);
  auto req = sampling_request(doc, 2, 23);
  req.mutable_options()->set_num_beams(3);
  auto o = defaults_for_16_new_tokens();
  o.do_sample = true;
  o.num_beams = 3;
  o.seed = 23;
  o.temperature = 3.0;
  o.num_return_sequences = 2;
  const auto ref = offline_16(doc, o);
  ASSERT_EQ(ref.size(), 2u);
  auto other = another_request();
  ASSERT_NO_FATAL_FAILURE(expect_unary_candidates(req, ref));
  const auto [status, streamed, text, final] = read_stream(*stub_, req);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(streamed, ref[0].tokens);
  EXPECT_EQ(ids_of(final), ref[0].tokens);
  EXPECT_TRUE(other.get());
  // Another seed draws other beams (on this random model at temperature 3).
  bool differs = false;
  for (uint64_t seed = 24; seed < 30 && !differs; ++seed) {
    req.mutable_options()->set_seed(seed);
    grpc::ClientContext c;
    v1::SummarizeResponse r;
    ASSERT_TRUE(stub_->Summarize(&c, req, &r).ok());
    differs = ids_of(r) != ref[0].tokens;
  }
  EXPECT_TRUE(differs) << "six other seeds drew the same best beam";
}

// Diverse beam search through the server: the summary and its alternatives are generate()'s, beside another
// request, and the groups' penalty gives other candidates than plain beam search.
TEST_F(RealModel, GroupBeamSearchEqualsOfflineGenerate) {
  const std::string doc = synthetic_text(3, 37);
  auto req = request(doc, 16, 4);
  req.mutable_options()->set_num_beam_groups(2);
  req.mutable_options()->set_diversity_penalty(3.0F);
  req.mutable_options()->set_num_return_sequences(4);
  auto o = defaults_for_16_new_tokens();
  o.num_beams = 4;
  o.num_beam_groups = 2;
  o.diversity_penalty = 3.0;
  o.num_return_sequences = 4;
  const auto ref = offline_16(doc, o);
  ASSERT_EQ(ref.size(), 4u);
  auto other = another_request();
  ASSERT_NO_FATAL_FAILURE(expect_unary_candidates(req, ref));
  EXPECT_TRUE(other.get());
  o.num_beam_groups = 1;
  o.diversity_penalty = 0.0;
  const auto plain = offline_16(doc, o);
  ASSERT_EQ(plain.size(), 4u);
  bool differs = false;
  for (size_t i = 0; i < 4; ++i) differs = differs || plain[i].tokens != ref[i].tokens;
  EXPECT_TRUE(differs) << "the groups gave plain beam search's candidates";
}

// Several samples per request (do_sample, num_return_sequences 3): the summary and its alternatives are
// generate()'s samples in draw order, the same streamed and unary, alone and beside other requests;
// the first is what a one-sample request with the same seed gets.
TEST_F(RealModel, SeveralSamplesEqualOfflineGenerateInDrawOrder) {
  const std::string doc = synthetic_text(3, 29);
  const auto sampled = [](const std::string& text, int samples) { return sampling_request(text, samples, 17); };
  const auto ref = offline_samples(doc, 3, 17);
  ASSERT_EQ(ref.size(), 3u);
  EXPECT_FALSE(ref[0].tokens == ref[1].tokens && ref[1].tokens == ref[2].tokens) << "three identical samples";
  const auto expect_samples = [&](const v1::SummarizeResponse& resp, const std::string& how) {
    expect_candidates(resp, ref, how);
    EXPECT_EQ(resp.summary(), tokenizer_->decode(ref[0].tokens)) << how;
    for (int a = 0; a < std::min(resp.alternatives_size(), 2); ++a) {
      EXPECT_EQ(resp.alternatives(a).summary(), tokenizer_->decode(ref[static_cast<size_t>(a) + 1].tokens)) << how;
    }
  };
  {
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    ASSERT_TRUE(stub_->Summarize(&ctx, sampled(doc, 3), &resp).ok());
    expect_samples(resp, "unary");
    grpc::ClientContext one_ctx;
    v1::SummarizeResponse one;
    ASSERT_TRUE(stub_->Summarize(&one_ctx, sampled(doc, 1), &one).ok());
    EXPECT_EQ(ids_of(one), ref[0].tokens) << "one sample with the same seed is the first";
    EXPECT_EQ(one.alternatives_size(), 0);
  }
  {
    const auto [status, streamed, text, final] = read_stream(*stub_, sampled(doc, 3));
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(streamed, ref[0].tokens) << "the first sample streams as it is drawn";
    EXPECT_EQ(text, final.summary());
    expect_samples(final, "streamed");
  }
  // Beside eight greedy and beam requests of other lengths, in one batch.
  std::vector<std::future<std::pair<grpc::Status, v1::SummarizeResponse>>> futures;
  for (int i = 0; i < 9; ++i) {
    const auto req =
        i == 4 ? sampled(doc, 3) : request(synthetic_text(1 + i % 5, 60 + static_cast<uint32_t>(i)), 12, 1 + i % 2);
    futures.push_back(std::async(std::launch::async, [this, req] {
      grpc::ClientContext ctx;
      v1::SummarizeResponse resp;
      auto status = stub_->Summarize(&ctx, req, &resp);
      return std::make_pair(status, resp);
    }));
  }
  for (int i = 0; i < 9; ++i) {
    auto [status, resp] = futures[static_cast<size_t>(i)].get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    if (i == 4) expect_samples(resp, "among others");
  }
}

// Requests of several samples each, decoded together: samples that end leave the batch while their
// request's others and the other requests go on (rows of one request fall; no request moves into
// another's place then), and every request still gets what generate() draws alone.
TEST_F(RealModel, SamplesLeavingTheBatchChangeNoOtherRow) {
  std::vector<std::vector<Hypothesis>> refs;
  std::vector<std::future<std::pair<grpc::Status, v1::SummarizeResponse>>> futures;
  bool ended_early = false;
  for (int i = 0; i < 6; ++i) {
    const std::string doc = synthetic_text(2 + i % 3, 70 + static_cast<uint32_t>(i));
    refs.push_back(offline_samples(doc, 4, 100 + static_cast<uint64_t>(i)));
    std::set<size_t> lengths;
    for (const auto& h : refs.back()) lengths.insert(h.tokens.size());
    ended_early = ended_early || lengths.size() > 1;
    const auto req = sampling_request(doc, 4, 100 + static_cast<uint64_t>(i));
    futures.push_back(std::async(std::launch::async, [this, req] {
      grpc::ClientContext ctx;
      v1::SummarizeResponse resp;
      auto status = stub_->Summarize(&ctx, req, &resp);
      return std::make_pair(status, resp);
    }));
  }
  ASSERT_TRUE(ended_early) << "no sample ended before another of its request: nothing left the batch early";
  for (size_t i = 0; i < refs.size(); ++i) {
    auto [status, resp] = futures[i].get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    expect_candidates(resp, refs[i], "request " + std::to_string(i));
    EXPECT_GE(resp.usage().raf_firing_rate(), 0.0);
    EXPECT_LE(resp.usage().raf_firing_rate(), 1.0);
    EXPECT_GT(resp.usage().state_bytes(), 0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (server_->models().find("t5")->stats().state_held_bytes != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->models().find("t5")->stats().state_bytes, 0) << "every row left";
  EXPECT_EQ(server_->models().find("t5")->stats().tokens_in_flight, 0)
      << "rows that left early gave back their budget once";
}

// Hugging Face's further sampling warpers and encoder-input settings, set in a request, give what the same
// setting in a checkpoint's generation_config.json gives a request that sets none (scores and log-probabilities
// too), change the summary on this random model, and a request's value that turns one off turns the
// checkpoint's off.
TEST_F(RealModel, RequestWarpersAndEncoderSettingsEqualTheSameInGenerationConfig) {
  struct Setting {
    std::string json;
    std::function<void(v1::GenerationOptions&)> set, turn_off;
    bool samples;
  };
  const std::vector<Setting> settings = {
      {R"({"min_p": 0.25})", [](auto& o) { o.set_min_p(0.25F); }, [](auto& o) { o.set_min_p(0); }, true},
      {R"({"typical_p": 0.5})", [](auto& o) { o.set_typical_p(0.5F); }, [](auto& o) { o.set_typical_p(1); }, true},
      {R"({"epsilon_cutoff": 0.0625})", [](auto& o) { o.set_epsilon_cutoff(0.0625F); },
       [](auto& o) { o.set_epsilon_cutoff(0); }, true},
      {R"({"eta_cutoff": 0.5})", [](auto& o) { o.set_eta_cutoff(0.5F); }, [](auto& o) { o.set_eta_cutoff(0); }, true},
      {R"({"encoder_repetition_penalty": 4.0})", [](auto& o) { o.set_encoder_repetition_penalty(4.0F); },
       [](auto& o) { o.set_encoder_repetition_penalty(1); }, false},
      {R"({"encoder_no_repeat_ngram_size": 1})", [](auto& o) { o.set_encoder_no_repeat_ngram_size(1); },
       [](auto& o) { o.set_encoder_no_repeat_ngram_size(0); }, false},
  };
  // The fixture's model as "plain", and beside it a copy per setting whose generation_config.json sets it.
  std::vector<server::LoadedModel> models;
  models.push_back(server::load_model_dir({"plain", dir_.string()}, server::ServerConfig{}));
  std::vector<fs::path> copies;
  for (size_t i = 0; i < settings.size(); ++i) {
    copies.push_back(dir_.string() + "-configured-" + std::to_string(i));
    fs::create_directories(copies.back());
    fs::copy(dir_, copies.back(), fs::copy_options::overwrite_existing | fs::copy_options::recursive);
    std::ofstream(copies.back() / "generation_config.json") << settings[i].json;
    models.push_back(
        server::load_model_dir({"configured-" + std::to_string(i), copies.back().string()}, server::ServerConfig{}));
  }
  server::ServerConfig config;
  config.max_new_tokens_cap = 64;
  auto own = serve(config, std::move(models));
  server::Server& server = *own.server;
  const auto& stub = own.stub;
  const auto summarize = [&stub](const std::string& model, v1::SummarizeRequest r) {
    r.set_model(model);
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const auto status = stub->Summarize(&ctx, r, &resp);
    EXPECT_TRUE(status.ok()) << model << ": " << status.error_message();
    return resp;
  };
  const auto logprobs = [](const v1::SummarizeResponse& r) {
    return std::vector<float>(r.token_logprobs().begin(), r.token_logprobs().end());
  };
  for (size_t i = 0; i < settings.size(); ++i) {
    const auto& setting = settings[i];
    const std::string configured = "configured-" + std::to_string(i);
    bool changed = false;
    for (uint32_t trial = 0; trial < 6; ++trial) {
      const std::string doc = synthetic_text(3, 40 + trial);
      // Sampling at a temperature that spreads the random model's probabilities; else greedy and beams.
      auto base = setting.samples ? sampling_request(doc, 1, 7 + trial) : request(doc, 20, 1 + trial % 3);
      if (setting.samples) base.mutable_options()->set_temperature(1.5F);
      auto own = base;
      setting.set(*own.mutable_options());
      auto off = base;
      setting.turn_off(*off.mutable_options());
      const auto by_request = summarize("plain", own);
      const auto by_config = summarize(configured, base);
      EXPECT_EQ(ids_of(by_request), ids_of(by_config)) << setting.json << ", trial " << trial;
      EXPECT_EQ(by_request.score(), by_config.score()) << setting.json << ", trial " << trial;
      EXPECT_EQ(logprobs(by_request), logprobs(by_config)) << setting.json << ", trial " << trial;
      const auto plain = summarize("plain", base);
      const auto turned_off = summarize(configured, off);
      EXPECT_EQ(ids_of(turned_off), ids_of(plain)) << setting.json << " turned off, trial " << trial;
      EXPECT_EQ(logprobs(turned_off), logprobs(plain)) << setting.json << " turned off, trial " << trial;
      changed = changed || ids_of(by_request) != ids_of(plain);
    }
    EXPECT_TRUE(changed) << setting.json << " changed no summary in six trials";
  }
  server.shutdown(std::chrono::milliseconds(1000));
  for (const auto& copy : copies) {
    std::error_code ec;
    fs::remove_all(copy, ec);
  }
}

// The demo model (models/debian-synopsis-t5, a trained T5): a word of its greedy summary, banned by a
// request's bad_words, is gone from the summary, which is what the same ids (the word's two forms, as the
// tokenizer gives them) in the checkpoint's generation_config.json bad_words_ids give a request that bans
// nothing, with greedy and beam search; the model's EOS written out is refused with what to do.
TEST(DemoModel, ABannedWordLeavesTheSummaryTheSameIdsInGenerationConfigLeave) {
  const fs::path demo = fs::path(SRFORMER_SOURCE_DIR) / "models" / "debian-synopsis-t5";
  const fs::path configured = fs::temp_directory_path() / ("srformer_bad_words_" + std::to_string(::getpid()));
  fs::create_directories(configured);
  fs::copy(demo, configured, fs::copy_options::overwrite_existing | fs::copy_options::recursive);
  const auto tokenizer = load_tokenizer(demo);
  const std::string doc =
      "GNU Emacs is the extensible self-documenting text editor. This package contains the GNU Emacs editor "
      "with support for the X Window System, documentation and the Lisp files that make up the editor.";
  const auto words_of = [](const std::string& text) {
    std::vector<std::string> words;
    std::string word;
    for (const char c : text + " ") {
      if (std::isalpha(static_cast<unsigned char>(c))) {
        word += c;
      } else if (!word.empty()) {
        words.push_back(std::move(word));
        word.clear();
      }
    }
    return words;
  };
  const auto contains = [](const std::vector<int64_t>& ids, const std::vector<int64_t>& part) {
    return std::search(ids.begin(), ids.end(), part.begin(), part.end()) != ids.end();
  };
  std::vector<server::LoadedModel> models;
  models.push_back(server::load_model_dir({"demo", demo.string()}, server::ServerConfig{}));
  auto own = serve({}, std::move(models));
  const auto call = [&own, &doc](const std::string& model, int beams, const std::vector<std::string>& bad_words,
                                 v1::SummarizeResponse& resp) {
    v1::SummarizeRequest r;
    r.set_model(model);
    r.set_document(doc);
    // Both models' options set alike: the copy's generation_config.json sets only bad_words_ids besides.
    r.mutable_options()->set_max_new_tokens(32);
    r.mutable_options()->set_num_beams(beams);
    r.mutable_options()->set_no_repeat_ngram_size(3);
    for (const auto& w : bad_words) r.mutable_options()->add_bad_words(w);
    grpc::ClientContext ctx;
    return own.stub->Summarize(&ctx, r, &resp);
  };
  v1::SummarizeResponse plain;
  ASSERT_TRUE(call("demo", 1, {}, plain).ok());
  // The summary's first word of four letters or more.
  std::string banned;
  for (const auto& w : words_of(plain.summary())) {
    if (w.size() >= 4) {
      banned = w;
      break;
    }
  }
  ASSERT_FALSE(banned.empty()) << "summary: " << plain.summary();
  const std::vector<int64_t> spaced = tokenizer->encode_word(banned, true),
                             bare = tokenizer->encode_word(banned, false);
  ASSERT_TRUE(contains(ids_of(plain), spaced) || contains(ids_of(plain), bare)) << plain.summary();

  nlohmann::json bad_words_ids = nlohmann::json::array({spaced});
  if (bare != spaced) bad_words_ids.push_back(bare);
  const nlohmann::json generation = {{"decoder_start_token_id", 0}, {"eos_token_id", 1},
                                     {"pad_token_id", 0},           {"max_length", 33},
                                     {"no_repeat_ngram_size", 3},   {"bad_words_ids", bad_words_ids}};
  std::ofstream(configured / "generation_config.json") << generation.dump();
  own.server->shutdown(std::chrono::milliseconds(1000));
  models.clear();
  models.push_back(server::load_model_dir({"demo", demo.string()}, server::ServerConfig{}));
  models.push_back(server::load_model_dir({"configured", configured.string()}, server::ServerConfig{}));
  own = serve({}, std::move(models));
  const auto logprobs = [](const v1::SummarizeResponse& r) {
    return std::vector<float>(r.token_logprobs().begin(), r.token_logprobs().end());
  };
  for (const int beams : {1, 4}) {
    v1::SummarizeResponse by_request, by_config, unbanned;
    ASSERT_TRUE(call("demo", beams, {banned}, by_request).ok());
    ASSERT_TRUE(call("configured", beams, {}, by_config).ok());
    ASSERT_TRUE(call("demo", beams, {}, unbanned).ok());
    const auto words = words_of(by_request.summary());
    EXPECT_EQ(std::count(words.begin(), words.end(), banned), 0)
        << "'" << banned << "' banned, " << beams << " beams: " << by_request.summary();
    EXPECT_FALSE(contains(ids_of(by_request), spaced) || contains(ids_of(by_request), bare));
    EXPECT_NE(by_request.summary(), unbanned.summary()) << beams << " beams";
    EXPECT_EQ(by_request.summary(), by_config.summary()) << beams << " beams";
    EXPECT_EQ(ids_of(by_request), ids_of(by_config)) << beams << " beams";
    EXPECT_EQ(by_request.score(), by_config.score()) << beams << " beams";
    EXPECT_EQ(logprobs(by_request), logprobs(by_config)) << beams << " beams";
    if (beams == 1) {
      EXPECT_EQ(unbanned.summary(), plain.summary()) << "the ban was the request's alone";
    }
  }
  v1::SummarizeResponse refused;
  const auto status = call("demo", 1, {banned, "</s>"}, refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "bad_words[1] \"</s>\" holds the end-of-sequence token '</s>' (id 1): banning it would keep the model from "
            "ending its summary; leave it out (max_new_tokens bounds the length)");
  own.server->shutdown(std::chrono::milliseconds(1000));
  std::error_code ec;
  fs::remove_all(configured, ec);
}

}  // namespace
}  // namespace srformer::testing
