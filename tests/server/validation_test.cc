// Every bad input gets the right status code and a message that says what to fix; the server stays up.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/client_unary_call.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "grpc/health/v1/health.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/request_builder.h"
#include "tests/metrics/scrape.h"
#include "tests/server/edge_options.h"
#include "tests/server/test_server.h"
#include "tests/support/log_capture.h"

namespace srformer::testing {
namespace {

using namespace std::chrono_literals;

struct BadCase {
  const char* name;
  std::function<void(v1::SummarizeRequest&)> edit;
  grpc::StatusCode code;
  const char* hint;  // must appear in the message
};

TEST(Validation, EveryBadInputIsRefusedWithAHelpfulMessage) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{64}}};
  so.config.max_new_tokens_cap = 100;
  so.config.max_beams = 4;
  TestServer server(so);
  using SC = grpc::StatusCode;
  const std::vector<BadCase> cases = {
      {"empty document", [](auto& r) { r.set_document(""); }, SC::INVALID_ARGUMENT, "document is empty"},
      {"whitespace only", [](auto& r) { r.set_document(" \n\t \xC2\xA0 "); }, SC::INVALID_ARGUMENT, "whitespace"},
      {"invalid UTF-8", [](auto& r) { r.set_document("abc \xFF def"); }, SC::INVALID_ARGUMENT,
       "not valid UTF-8 (bad byte sequence at byte offset 4)"},
      {"over the input limit", [](auto& r) { r.set_document(std::string(100, 'a')); }, SC::INVALID_ARGUMENT,
       "over the limit of 64"},
      {"UTF-16 with its byte-order mark", [](auto& r) { r.set_document(std::string("\xFF\xFEh\0i\0", 6)); },
       SC::INVALID_ARGUMENT, "a UTF-16 byte-order mark, the text is UTF-16); re-encode the text as UTF-8"},
      {"a NUL byte", [](auto& r) { r.set_document(std::string("h\0i\0", 4)); }, SC::INVALID_ARGUMENT,
       "contains a NUL byte (at byte offset 1)"},
      {"zero-width spaces and a byte-order mark only", [](auto& r) { r.set_document("\xEF\xBB\xBF\xE2\x80\x8B "); },
       SC::INVALID_ARGUMENT, "only whitespace"},
      {"unknown model", [](auto& r) { r.set_model("nope"); }, SC::NOT_FOUND, "holds: fake"},
      // Quoted back cut short: in full it would overflow the status's metadata (and a NUL end it).
      {"unknown model, 10 kB name", [](auto& r) { r.set_model(std::string(10000, 'x') + '\0'); }, SC::NOT_FOUND,
       "... (10001 bytes)'; this server holds: fake"},
      {"tiny temperature with sampling",
       [](auto& r) {
         r.mutable_options()->set_do_sample(true);
         r.mutable_options()->set_temperature(1e-38F);
       },
       SC::INVALID_ARGUMENT, "at least 1e-4"},
      {"unknown truncation policy", [](auto& r) { r.set_truncation(static_cast<v1::TruncationPolicy>(7)); },
       SC::INVALID_ARGUMENT, "truncation 7 is not a TruncationPolicy"},
      {"tiny repetition penalty", [](auto& r) { r.mutable_options()->set_repetition_penalty(1e-38F); },
       SC::INVALID_ARGUMENT, "repetition_penalty is 1e-38; set it between 1e-4 and a finite number"},
      {"max_new_tokens 0", [](auto& r) { r.mutable_options()->set_max_new_tokens(0); }, SC::INVALID_ARGUMENT,
       "max_new_tokens must be at least 1"},
      {"max_new_tokens absurd", [](auto& r) { r.mutable_options()->set_max_new_tokens(1000000); }, SC::INVALID_ARGUMENT,
       "at most 100"},
      {"min over max",
       [](auto& r) {
         r.mutable_options()->set_max_new_tokens(5);
         r.mutable_options()->set_min_new_tokens(6);
       },
       SC::INVALID_ARGUMENT, "min_new_tokens"},
      {"length_penalty past 10", [](auto& r) { r.mutable_options()->set_length_penalty(40); }, SC::INVALID_ARGUMENT,
       "length_penalty must be between -10 and 10"},
      {"length_penalty -1e38", [](auto& r) { r.mutable_options()->set_length_penalty(-1e38F); }, SC::INVALID_ARGUMENT,
       "length_penalty must be between -10 and 10"},
      {"request_id of 129 bytes", [](auto& r) { r.set_request_id(std::string(129, 'r')); }, SC::INVALID_ARGUMENT,
       "request_id is 129 bytes; at most 128"},
      {"num_beams 0", [](auto& r) { r.mutable_options()->set_num_beams(0); }, SC::INVALID_ARGUMENT,
       "num_beams must be between 1 and 4"},
      {"num_beams over cap", [](auto& r) { r.mutable_options()->set_num_beams(5); }, SC::INVALID_ARGUMENT,
       "num_beams must be between 1 and 4"},
      {"temperature 0 with sampling",
       [](auto& r) {
         r.mutable_options()->set_do_sample(true);
         r.mutable_options()->set_temperature(0);
       },
       SC::INVALID_ARGUMENT, "temperature is 0; it must be at least 1e-4 (and finite) when do_sample is true"},
      {"negative top_p", [](auto& r) { r.mutable_options()->set_top_p(-0.5F); }, SC::INVALID_ARGUMENT,
       "top_p must be in [0, 1] (1 disables it; 0 keeps only the likeliest token), got -0.5"},
      {"top_p over 1", [](auto& r) { r.mutable_options()->set_top_p(1.5f); }, SC::INVALID_ARGUMENT, "top_p"},
      {"negative top_k", [](auto& r) { r.mutable_options()->set_top_k(-1); }, SC::INVALID_ARGUMENT, "top_k"},
      {"negative repetition penalty", [](auto& r) { r.mutable_options()->set_repetition_penalty(-1); },
       SC::INVALID_ARGUMENT, "repetition_penalty is -1; set it between 1e-4 and a finite number"},
      {"negative no_repeat_ngram_size", [](auto& r) { r.mutable_options()->set_no_repeat_ngram_size(-2); },
       SC::INVALID_ARGUMENT, "no_repeat_ngram_size"},
      // Hugging Face's further warpers and encoder-input settings: a request's own value out of range is refused,
      // sampling or not (as top_p), saying the range and the value that turns it off.
      {"min_p over 1", [](auto& r) { r.mutable_options()->set_min_p(1.5F); }, SC::INVALID_ARGUMENT,
       "min_p must be in [0, 1] (0 disables it), got 1.5"},
      {"negative min_p with sampling",
       [](auto& r) {
         r.mutable_options()->set_do_sample(true);
         r.mutable_options()->set_min_p(-0.25F);
       },
       SC::INVALID_ARGUMENT, "min_p must be in [0, 1] (0 disables it), got -0.25"},
      {"min_p NaN", [](auto& r) { r.mutable_options()->set_min_p(std::numeric_limits<float>::quiet_NaN()); },
       SC::INVALID_ARGUMENT, "min_p must be in [0, 1] (0 disables it), got nan"},
      {"typical_p 0", [](auto& r) { r.mutable_options()->set_typical_p(0); }, SC::INVALID_ARGUMENT,
       "typical_p must be in (0, 1] (1 disables it), got 0"},
      {"typical_p over 1", [](auto& r) { r.mutable_options()->set_typical_p(2); }, SC::INVALID_ARGUMENT,
       "typical_p must be in (0, 1] (1 disables it), got 2"},
      {"epsilon_cutoff 1", [](auto& r) { r.mutable_options()->set_epsilon_cutoff(1); }, SC::INVALID_ARGUMENT,
       "epsilon_cutoff must be in [0, 1) (0 disables it; Hugging Face suggests 3e-4 to 9e-4), got 1"},
      {"negative epsilon_cutoff", [](auto& r) { r.mutable_options()->set_epsilon_cutoff(-0.5F); }, SC::INVALID_ARGUMENT,
       "epsilon_cutoff must be in [0, 1)"},
      {"eta_cutoff inf", [](auto& r) { r.mutable_options()->set_eta_cutoff(std::numeric_limits<float>::infinity()); },
       SC::INVALID_ARGUMENT,
       "eta_cutoff must be in [0, 1) (0 disables it; Hugging Face suggests 3e-4 to 2e-3), got inf"},
      {"encoder_repetition_penalty 0", [](auto& r) { r.mutable_options()->set_encoder_repetition_penalty(0); },
       SC::INVALID_ARGUMENT,
       "encoder_repetition_penalty is 0; set it between 1e-4 and a finite number (1 disables it)"},
      {"encoder_repetition_penalty NaN",
       [](auto& r) { r.mutable_options()->set_encoder_repetition_penalty(std::numeric_limits<float>::quiet_NaN()); },
       SC::INVALID_ARGUMENT, "encoder_repetition_penalty is nan; set it between 1e-4"},
      {"negative encoder_no_repeat_ngram_size",
       [](auto& r) { r.mutable_options()->set_encoder_no_repeat_ngram_size(-1); }, SC::INVALID_ARGUMENT,
       "encoder_no_repeat_ngram_size must be >= 0 (0 disables it), got -1"},
      // A request's bad_words: each entry the server cannot ban is named, with what to do (the fake tokenizer
      // gives a token a byte, and one more for the space of the form after a space).
      {"an empty bad word",
       [](auto& r) {
         r.mutable_options()->add_bad_words("fine");
         r.mutable_options()->add_bad_words("");
       },
       SC::INVALID_ARGUMENT, "bad_words[1] is empty; give a word or phrase to ban, or leave it out"},
      {"a blank bad word", [](auto& r) { r.mutable_options()->add_bad_words(" \t\xE2\x80\x8B"); }, SC::INVALID_ARGUMENT,
       "bad_words[0] contains only whitespace; give a word or phrase to ban, or leave it out"},
      {"a bad word holding a NUL byte", [](auto& r) { r.mutable_options()->add_bad_words(std::string("a\0b", 3)); },
       SC::INVALID_ARGUMENT, "bad_words[0] contains a NUL byte"},
      {"257 bad words",
       [](auto& r) {
         for (int i = 0; i < 257; ++i) r.mutable_options()->add_bad_words("w" + std::to_string(i));
       },
       SC::INVALID_ARGUMENT, "bad_words holds 257 words; at most 256 may be banned in one request: ban fewer"},
      {"a bad word over 256 bytes", [](auto& r) { r.mutable_options()->add_bad_words(std::string(300, 'w')); },
       SC::INVALID_ARGUMENT, "bad_words[0] is 300 bytes; at most 256: ban a shorter word or phrase"},
      {"a bad word over 32 tokens", [](auto& r) { r.mutable_options()->add_bad_words(std::string(40, 'w')); },
       SC::INVALID_ARGUMENT, "\" is 41 tokens with this model's tokenizer; at most 32: ban a shorter phrase"},
      // Diverse beam search, with Hugging Face's rules: groups dividing num_beams, no sampling, a penalty only
      // between groups.
      {"num_beam_groups 0", [](auto& r) { r.mutable_options()->set_num_beam_groups(0); }, SC::INVALID_ARGUMENT,
       "num_beam_groups must be >= 1 (1 is ordinary beam search), got 0"},
      {"num_beam_groups not dividing num_beams",
       [](auto& r) {
         r.mutable_options()->set_num_beams(4);
         r.mutable_options()->set_num_beam_groups(3);
       },
       SC::INVALID_ARGUMENT,
       "num_beam_groups is 3 but num_beams (4) must be a multiple of it; set num_beams to a multiple of "
       "num_beam_groups, or num_beam_groups to 1"},
      {"num_beam_groups over num_beams",
       [](auto& r) {
         r.mutable_options()->set_num_beams(2);
         r.mutable_options()->set_num_beam_groups(4);
       },
       SC::INVALID_ARGUMENT, "num_beam_groups is 4 but num_beams (2) must be a multiple of it"},
      {"num_beam_groups with do_sample",
       [](auto& r) {
         r.mutable_options()->set_num_beams(4);
         r.mutable_options()->set_num_beam_groups(2);
         r.mutable_options()->set_do_sample(true);
       },
       SC::INVALID_ARGUMENT, "num_beam_groups is 2 with do_sample true; group beam search does not sample"},
      {"diversity_penalty with one group",
       [](auto& r) {
         r.mutable_options()->set_num_beams(4);
         r.mutable_options()->set_diversity_penalty(0.5F);
       },
       SC::INVALID_ARGUMENT, "diversity_penalty is 0.5 with num_beam_groups 1; it acts between groups of beams"},
      {"negative diversity_penalty", [](auto& r) { r.mutable_options()->set_diversity_penalty(-1); },
       SC::INVALID_ARGUMENT, "diversity_penalty must be a finite number >= 0 (0 disables it), got -1"},
      {"diversity_penalty NaN",
       [](auto& r) { r.mutable_options()->set_diversity_penalty(std::numeric_limits<float>::quiet_NaN()); },
       SC::INVALID_ARGUMENT, "diversity_penalty must be a finite number >= 0 (0 disables it), got nan"},
      {"unknown early_stopping_mode",
       [](auto& r) { r.mutable_options()->set_early_stopping_mode(static_cast<v1::EarlyStoppingMode>(7)); },
       SC::INVALID_ARGUMENT, "early_stopping_mode 7 is not one of HEURISTIC (1), WHEN_FULL (2) or NEVER (3)"},
      {"early_stopping and its mode disagree",
       [](auto& r) {
         r.mutable_options()->set_early_stopping(true);
         r.mutable_options()->set_early_stopping_mode(v1::EARLY_STOPPING_MODE_NEVER);
       },
       SC::INVALID_ARGUMENT, "early_stopping is true but early_stopping_mode is EARLY_STOPPING_MODE_NEVER"},
      {"expected_length 0", [](auto& r) { r.mutable_options()->set_expected_length(0); }, SC::INVALID_ARGUMENT,
       "expected_length must be between 1 and 400"},
      {"expected_length huge", [](auto& r) { r.mutable_options()->set_expected_length(401); }, SC::INVALID_ARGUMENT,
       "expected_length"},
      {"beam sampling, more sequences than beams",
       [](auto& r) {
         r.mutable_options()->set_do_sample(true);
         r.mutable_options()->set_num_beams(2);
         r.mutable_options()->set_num_return_sequences(3);
       },
       SC::INVALID_ARGUMENT, "num_return_sequences must be between 1 and num_beams (2)"},
      {"num_return_sequences 0", [](auto& r) { r.mutable_options()->set_num_return_sequences(0); },
       SC::INVALID_ARGUMENT, "num_return_sequences must be between 1 and num_beams"},
      {"num_return_sequences over num_beams",
       [](auto& r) {
         r.mutable_options()->set_num_beams(2);
         r.mutable_options()->set_num_return_sequences(3);
       },
       SC::INVALID_ARGUMENT, "num_return_sequences must be between 1 and num_beams (2), got 3"},
      {"num_return_sequences over one with greedy search",
       [](auto& r) { r.mutable_options()->set_num_return_sequences(2); }, SC::INVALID_ARGUMENT,
       "greedy search returns one: ask for num_beams >= num_return_sequences, or do_sample=true"},
      {"more samples than the server's rows per request",
       [](auto& r) {
         r.mutable_options()->set_do_sample(true);
         r.mutable_options()->set_num_return_sequences(5);
       },
       SC::INVALID_ARGUMENT, "num_return_sequences must be between 1 and 4 when sampling (the server cap, --max-beams"},
  };
  for (const auto& c : cases) {
    auto req = make_request("a perfectly fine document");
    c.edit(req);
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const auto st = server.stub().Summarize(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), c.code) << c.name << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(c.hint), std::string::npos) << c.name << ": " << st.error_message();
    // The streaming call validates the same way.
    grpc::ClientContext sctx;
    auto reader = server.stub().SummarizeStream(&sctx, req);
    v1::SummarizeStreamResponse msg;
    EXPECT_FALSE(reader->Read(&msg)) << c.name;
    EXPECT_EQ(reader->Finish().error_code(), c.code) << c.name;
  }
  // Deadline already expired when the call is made.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() - 1s);
  v1::SummarizeResponse resp;
  EXPECT_EQ(server.stub().Summarize(&ctx, make_request("fine"), &resp).error_code(), SC::DEADLINE_EXCEEDED);
  // And the server still works.
  grpc::ClientContext ok;
  EXPECT_TRUE(server.stub().Summarize(&ok, make_request("fine"), &resp).ok());
}

// A request's bad_words are never generated by it, after a space or not, and by it alone: the same document
// without them is summarized as before. Here each summary letter banned in turn disappears from it.
TEST(Validation, BadWordsAreBannedForTheRequestAlone) {
  FakeServerOptions so;
  so.models = {{"fake", FakeModelOptions{64}}};
  TestServer server(so);
  const auto summarize = [&server](const std::vector<std::string>& bad_words) {
    auto req = make_request("a perfectly fine document");
    for (const auto& w : bad_words) req.mutable_options()->add_bad_words(w);
    grpc::ClientContext ctx;
    v1::SummarizeResponse resp;
    const auto st = server.stub().Summarize(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.summary();
  };
  const std::string plain = summarize({});
  ASSERT_NE(plain.find_first_not_of(' '), std::string::npos) << "a summary with letters";
  std::vector<std::string> banned;
  for (const char c : plain) {
    if (c == ' ' || std::find(banned.begin(), banned.end(), std::string(1, c)) != banned.end()) continue;
    banned.emplace_back(1, c);
    const std::string without = summarize({std::string(1, c)});
    EXPECT_EQ(without.find(c), std::string::npos) << "'" << c << "' banned: " << without;
    EXPECT_NE(without, plain);
  }
  const std::string none = summarize(banned);
  for (const auto& w : banned) EXPECT_EQ(none.find(w), std::string::npos) << w << " in " << none;
  EXPECT_EQ(summarize({}), plain) << "the next request bans nothing";
}

// A body that does not parse as the method's message (a client built from another proto, a string field
// holding invalid UTF-8, bytes cut short) is the client's error, said so: gRPC's callback API would
// answer UNIMPLEMENTED with no message, as if the method did not exist.
// Calls the method at `path` with `body` as its raw request bytes; `on_message` sees each answer (a unary
// call's when it succeeds) and returns false to cancel the call there.
grpc::Status raw_call_path(TestServer& server, grpc::ClientContext& ctx, const std::string& path,
                           const std::string& body, bool streaming,
                           const std::function<bool(const grpc::ByteBuffer&)>& on_message) {
  grpc::Slice slice(body);
  const grpc::ByteBuffer request(&slice, 1);
  if (!streaming) {
    grpc::ByteBuffer response;
    const auto status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        server.channel().get(), grpc::internal::RpcMethod(path.c_str(), grpc::internal::RpcMethod::NORMAL_RPC), &ctx,
        request, &response);
    if (status.ok()) on_message(response);
    return status;
  }
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          server.channel().get(), grpc::internal::RpcMethod(path.c_str(), grpc::internal::RpcMethod::SERVER_STREAMING),
          &ctx, request));
  grpc::ByteBuffer message;
  while (reader->Read(&message)) {
    if (!on_message(message)) {
      ctx.TryCancel();
      break;
    }
  }
  return reader->Finish();
}

// A Summarizer method's raw call; `pushback`, where given, receives the trailing grpc-retry-pushback-ms ("" when
// absent).
grpc::Status raw_call(TestServer& server, const std::string& method, const std::string& body, bool streaming,
                      std::string* pushback = nullptr) {
  grpc::ClientContext ctx;
  const auto status = raw_call_path(server, ctx, "/srformer.v1.Summarizer/" + method, body, streaming,
                                    [](const grpc::ByteBuffer&) { return true; });
  if (pushback) {
    const auto& trailers = ctx.GetServerTrailingMetadata();
    const auto it = trailers.find("grpc-retry-pushback-ms");
    *pushback = it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
  }
  return status;
}

TEST(Validation, ABodyThatIsNotTheRequestMessageIsInvalidArgument) {
  server::Metrics metrics("");
  FakeServerOptions so;
  so.metrics = &metrics;
  TestServer server(so);
  const std::vector<std::pair<const char*, std::string>> bodies = {
      {"cut short", std::string("\x12\x05"
                                "ab",
                                4)},                                  // document: 5 bytes announced, 2 sent
      {"model not UTF-8", std::string("\x0A\x01\xFF\x12\x02ok", 7)},  // proto3 strings must be UTF-8
      {"wire type 7", std::string("\x0F", 1)},                        // no such wire type
  };
  const std::vector<std::pair<const char*, bool>> methods = {
      {"Summarize", false}, {"SummarizeStream", true}, {"SummarizeBatch", false}, {"ListModels", false}};
  for (const auto& [method, streaming] : methods) {
    const std::string message_name =
        std::string("srformer.v1.") +
        (std::string(method) == "SummarizeStream" ? "SummarizeRequest" : std::string(method) + "Request");
    for (const auto& [what, body] : bodies) {
      SCOPED_TRACE(std::string(method) + ", " + what);
      // ListModelsRequest has no fields: field 1 is an unknown one there, kept and ignored, as it should be.
      if (std::string(method) == "ListModels" && std::string(what) == "model not UTF-8") {
        EXPECT_TRUE(raw_call(server, method, body, streaming).ok());
        continue;
      }
      const grpc::Status status = raw_call(server, method, body, streaming);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
      EXPECT_NE(status.error_message().find("not a valid " + message_name), std::string::npos)
          << status.error_message();
      EXPECT_NE(status.error_message().find("proto/srformer/v1/summarizer.proto"), std::string::npos)
          << status.error_message();
    }
  }
  // Each counted once, by method, under no model (none was named); ListModels' two (it was not counted).
  for (const char* method : {"Summarize", "SummarizeStream", "SummarizeBatch", "ListModels"}) {
    EXPECT_EQ(server::testing::sample(metrics.scrape_text(), "srformer_requests_unrouted_total",
                                      {{"method", method}, {"reason", "malformed"}}),
              std::string(method) == "ListModels" ? 2.0 : 3.0)
        << method;
  }
  EXPECT_EQ(metrics.scrape_text().find("srformer_requests_total{"), std::string::npos);
  // Well-formed bodies on the same path still work: an empty one is a valid (empty) message.
  EXPECT_EQ(raw_call(server, "ListModels", "", false).error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(raw_call(server, "Summarize", std::string("\x12\x02ok", 4), false).error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(raw_call(server, "SummarizeStream", std::string("\x12\x02ok", 4), true).error_code(), grpc::StatusCode::OK);
  const grpc::Status empty = raw_call(server, "Summarize", "", false);
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(empty.error_message().find("document is empty"), std::string::npos) << empty.error_message();
}

// grpc.health.v1 too: a Check or Watch whose body is not a HealthCheckRequest (a probe built from another
// proto, bytes cut short) got UNIMPLEMENTED with no message from gRPC's callback API, which a probe reports as
// "the server has no health service". It is INVALID_ARGUMENT now, saying what it is and which proto to use; a
// well-formed one is answered as before. Each is logged and counted as a Summarizer method's malformed body
// is (docs/OPERATIONS.md: srformer_requests_unrouted_total{reason="malformed"}, any method); they were neither.
TEST(Validation, AHealthRequestThatIsNotAHealthCheckRequestIsInvalidArgument) {
  LogCapture captured;  // before the server: it outlives the server's threads
  server::Metrics metrics("");
  FakeServerOptions so;
  so.metrics = &metrics;
  TestServer server(so);
  // Returns the call's status and the statuses it received (a Watch's first only: it stays open until its
  // deadline).
  const auto call = [&](const char* method, const std::string& body) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 2s);
    std::vector<grpc::health::v1::HealthCheckResponse::ServingStatus> got;
    const auto take = [&](const grpc::ByteBuffer& message) {
      std::vector<grpc::Slice> slices;
      EXPECT_TRUE(message.Dump(&slices).ok());
      std::string bytes;
      for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      grpc::health::v1::HealthCheckResponse response;
      EXPECT_TRUE(response.ParseFromString(bytes));
      got.push_back(response.status());
      return false;  // a Watch stays open until its deadline: its first answer is enough
    };
    const auto status = raw_call_path(server, ctx, std::string("/grpc.health.v1.Health/") + method, body,
                                      std::string(method) != "Check", take);
    return std::make_pair(status, got);
  };
  const std::vector<std::pair<const char*, std::string>> bodies = {
      {"cut short", std::string("\x0A\x05"
                                "ab",
                                4)},                  // service: 5 bytes announced, 2 sent
      {"not UTF-8", std::string("\x0A\x01\xFF", 3)},  // proto3 strings must be UTF-8
      {"wire type 7", std::string("\x0F", 1)},        // no such wire type
  };
  for (const char* method : {"Check", "Watch"}) {
    for (const auto& [what, body] : bodies) {
      SCOPED_TRACE(std::string(method) + ", " + what);
      const auto [status, got] = call(method, body);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
      EXPECT_NE(status.error_message().find("not a valid grpc.health.v1.HealthCheckRequest"), std::string::npos)
          << status.error_message();
      EXPECT_NE(status.error_message().find("grpc/health/v1/health.proto"), std::string::npos)
          << status.error_message();
      EXPECT_TRUE(got.empty());
    }
    SCOPED_TRACE(method);
    using Health = grpc::health::v1::HealthCheckResponse;
    const auto [whole, whole_got] = call(method, "");  // the whole server
    EXPECT_EQ(whole_got, std::vector<Health::ServingStatus>{Health::SERVING});
    const auto [named, named_got] = call(method, std::string("\x0A\x16srformer.v1.Summarizer", 24));
    EXPECT_EQ(named_got, std::vector<Health::ServingStatus>{Health::SERVING});
    const auto [unknown, unknown_got] = call(method, std::string("\x0A\x02no", 4));
    if (std::string(method) == "Check") {
      EXPECT_EQ(whole.error_code(), grpc::StatusCode::OK);
      EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
    } else {
      EXPECT_EQ(whole.error_code(), grpc::StatusCode::CANCELLED);  // ours, after its first message
      EXPECT_EQ(unknown_got, std::vector<Health::ServingStatus>{Health::SERVICE_UNKNOWN});
    }
    // The malformed ones only, not the well-formed ones after them.
    EXPECT_EQ(server::testing::sample(metrics.scrape_text(), "srformer_requests_unrouted_total",
                                      {{"method", method}, {"reason", "malformed"}}),
              static_cast<double>(bodies.size()))
        << metrics.scrape_text();
  }
  const std::string log = captured.text();
  EXPECT_NE(log.find("health: Check from "), std::string::npos) << log;
  EXPECT_NE(log.find("health: Watch from "), std::string::npos) << log;
  EXPECT_NE(log.find("refused with INVALID_ARGUMENT: "), std::string::npos) << log;
}

// A call that sends its headers but no message, then is cancelled (cancel) or half-closes (a client that
// sends none); returns the status the client sees.
grpc::Status call_without_message(TestServer& server, const std::string& method, bool cancel) {
  grpc::GenericStub stub(server.channel());
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  const auto call = stub.PrepareCall(&ctx, "/srformer.v1.Summarizer/" + method, &cq);
  void* tag = nullptr;
  bool ok = false;
  const auto wait = [&](intptr_t want) {
    while (cq.Next(&tag, &ok) && reinterpret_cast<intptr_t>(tag) != want) {
    }
  };
  call->StartCall(reinterpret_cast<void*>(1));
  wait(1);
  if (cancel) {
    std::this_thread::sleep_for(50ms);  // the headers reach the server, which waits for the message
    ctx.TryCancel();
  } else {
    call->WritesDone(reinterpret_cast<void*>(2));
    wait(2);
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(3));
  wait(3);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// gRPC hands the service a call cancelled (or past its deadline) before its message arrived, with no
// message: that is the client's cancel, not a malformed request (1 ms deadlines under load made a few
// percent of calls count as srformer_requests_unrouted_total{reason="malformed"} and log INVALID_ARGUMENT
// with "build the client from this server's proto"). A client that half-closes without one still is.
TEST(Validation, ACallCancelledBeforeItsMessageArrivedIsNotMalformed) {
  LogCapture captured;  // before the server: it outlives the server's threads
  server::Metrics metrics("");
  FakeServerOptions so;
  so.metrics = &metrics;
  TestServer server(so);
  const std::vector<std::string> methods = {"Summarize", "SummarizeStream", "SummarizeBatch"};
  const auto malformed = [&](const std::string& method) {
    return server::testing::sample(metrics.scrape_text(), "srformer_requests_unrouted_total",
                                   {{"method", method}, {"reason", "malformed"}});
  };
  const auto lines_with = [&](const std::string& text) {
    const std::string log = captured.text();
    int n = 0;
    for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
    return n;
  };
  for (const auto& method : methods) {
    EXPECT_EQ(call_without_message(server, method, true).error_code(), grpc::StatusCode::CANCELLED) << method;
  }
  // Each call's one line comes from its OnDone, once gRPC has seen the cancel.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (lines_with("ended before its request message arrived") < 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(lines_with("ended before its request message arrived"), 3) << captured.text();
  for (const auto& method : methods) EXPECT_EQ(malformed(method), 0.0) << method;
  for (const auto& method : methods) {
    const grpc::Status status = call_without_message(server, method, false);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_NE(status.error_message().find("the call carried no"), std::string::npos) << status.error_message();
  }
  while (lines_with("the call carried no") < 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  for (const auto& method : methods) EXPECT_EQ(malformed(method), 1.0) << method;
}

// A body over --max-message-bytes reaches the service (gRPC's own limit is lifted), which refuses it with
// RESOURCE_EXHAUSTED and what to do, tells retrying clients not to (a negative pushback), and counts it
// under srformer_requests_unrouted_total{reason="too_large"}; a body of exactly the limit is served.
TEST(Validation, ABodyOverTheMessageLimitIsRefusedCountedAndNotToBeRetried) {
  server::Metrics metrics("");
  FakeServerOptions so;
  so.metrics = &metrics;
  so.config.max_message_bytes = 2048;
  TestServer server(so);
  const auto body_of = [](size_t bytes) {
    v1::SummarizeRequest r;
    r.set_truncation(v1::TRUNCATION_POLICY_TRUNCATE);                // the fake model's input limit is short
    r.set_document(std::string(bytes - r.ByteSizeLong() - 3, 'a'));  // the document's tag and a 2-byte length
    EXPECT_EQ(r.ByteSizeLong(), bytes);
    return r.SerializeAsString();
  };
  const std::vector<std::pair<const char*, bool>> methods = {
      {"Summarize", false}, {"SummarizeStream", true}, {"SummarizeBatch", false}, {"ListModels", false}};
  for (const auto& [method, streaming] : methods) {
    SCOPED_TRACE(method);
    std::string pushback;
    const grpc::Status status = raw_call(server, method, body_of(2049), streaming, &pushback);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_EQ(status.error_message(),
              "Received message larger than max (2049 vs. 2048): this server accepts request messages of up to 2048 "
              "bytes (its --max-message-bytes); shorten the document (or send fewer in a batch) or raise the "
              "server's limit");
    EXPECT_EQ(pushback, "-1");
    EXPECT_EQ(server::testing::sample(metrics.scrape_text(), "srformer_requests_unrouted_total",
                                      {{"method", method}, {"reason", "too_large"}}),
              1.0);
  }
  EXPECT_EQ(metrics.scrape_text().find("srformer_requests_total{"), std::string::npos);
  const grpc::Status at_limit = raw_call(server, "Summarize", body_of(2048), false);
  EXPECT_TRUE(at_limit.ok()) << at_limit.error_message();
}

// Random bodies (fixed seed) through every method: each gets OK or a refusal that names the problem
// (INVALID_ARGUMENT, NOT_FOUND for a random model name), never another code, and the server stays up.
TEST(Validation, RandomBodiesGetOkOrARefusalAndTheServerStaysUp) {
  TestServer server;
  std::mt19937 rng(7);
  const std::vector<std::pair<const char*, bool>> methods = {
      {"Summarize", false}, {"SummarizeStream", true}, {"SummarizeBatch", false}, {"ListModels", false}};
  std::map<grpc::StatusCode, int> seen;
  for (int i = 0; i < 400; ++i) {
    std::string body(rng() % 48, '\0');
    for (auto& c : body) c = static_cast<char>(rng() & 0xFF);
    const auto& [method, streaming] = methods[static_cast<size_t>(i) % methods.size()];
    const grpc::Status status = raw_call(server, method, body, streaming);
    ++seen[status.error_code()];
    const bool expected = status.ok() || status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                          status.error_code() == grpc::StatusCode::NOT_FOUND;
    EXPECT_TRUE(expected) << method << " body #" << i << ": code " << status.error_code() << ": "
                          << status.error_message();
    if (!status.ok()) {
      EXPECT_FALSE(status.error_message().empty()) << method << " body #" << i;
    }
  }
  EXPECT_GT(seen[grpc::StatusCode::INVALID_ARGUMENT], 0);
  grpc::ClientContext ctx;
  v1::SummarizeResponse resp;
  EXPECT_TRUE(server.stub().Summarize(&ctx, make_request("still here"), &resp).ok());
}

// Options at their edges against the fake model (tests/server/edge_options.h; RealModel runs them on a
// real tiny SRformer T5).
TEST(Validation, OptionsAtTheirEdgesAreServedOrRefusedNeverInternal) {
  FakeServerOptions so;
  so.config.max_new_tokens_cap = 64;
  TestServer server(so);
  auto seen = send_edge_option_requests(server.stub(), 300, 11);
  EXPECT_GT(seen[grpc::StatusCode::OK], 0);
  EXPECT_GT(seen[grpc::StatusCode::INVALID_ARGUMENT], 0);
}

TEST(Validation, ADocumentThatIsNotUtf8IsInvalidArgument) {
  EXPECT_THROW(server::validate_document("ok \xFF"), server::RequestError);
  try {
    server::validate_document("ok \xFF");
  } catch (const server::RequestError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("byte offset 3"), std::string::npos) << e.what();
  }
}

TEST(Validation, DefaultsComeFromTheModelConfig) {
  ModelConfig config;
  config.max_length = 62;
  config.min_length = 11;
  config.num_beams = 4;
  config.length_penalty = 2.0;
  config.no_repeat_ngram_size = 3;
  config.early_stopping = EarlyStopping::kWhenFull;
  config.decoder_start_token_id = 2;
  config.eos_token_id = 1;
  config.num_return_sequences = 3;
  server::ServiceLimits limits;
  const auto r = server::resolve_options({}, config, limits);
  EXPECT_EQ(r.options.max_new_tokens, 61);
  EXPECT_EQ(r.options.min_new_tokens, 10);
  EXPECT_EQ(r.options.num_beams, 4);
  EXPECT_DOUBLE_EQ(r.options.length_penalty, 2.0);
  EXPECT_EQ(r.options.no_repeat_ngram_size, 3);
  EXPECT_EQ(r.options.early_stopping, EarlyStopping::kWhenFull);
  EXPECT_EQ(r.options.decoder_start_token_id, 2);
  EXPECT_EQ(r.expected_length, 61);
  EXPECT_EQ(r.options.num_return_sequences, 3);
  v1::GenerationOptions two_beams;  // the config's num_return_sequences, at most one per beam asked for
  two_beams.set_num_beams(2);
  EXPECT_EQ(server::resolve_options(two_beams, config, limits).options.num_return_sequences, 2);
  v1::GenerationOptions p;
  p.set_num_beams(1);
  p.set_max_new_tokens(20);
  p.set_expected_length(50);
  const auto q = server::resolve_options(p, config, limits);
  EXPECT_EQ(q.options.num_beams, 1);
  EXPECT_EQ(q.options.num_return_sequences, 1);
  EXPECT_EQ(q.options.max_new_tokens, 20);
  EXPECT_EQ(q.options.min_new_tokens, 10);
  EXPECT_EQ(q.expected_length, 50);
  // Sampling: HF's top_k of 50 where the config sets none; a checkpoint that samples by default with beams
  // samples its beams (HF's beam sampling), draws that many samples with one beam, and decodes with its
  // beams when a request says not to sample.
  EXPECT_FALSE(r.options.do_sample);
  EXPECT_EQ(r.options.top_k, 50);
  config.do_sample = true;
  config.temperature = 0.7;
  config.top_p = 0.9;
  const auto sampled = server::resolve_options({}, config, limits);
  EXPECT_TRUE(sampled.options.do_sample);
  EXPECT_EQ(sampled.options.num_beams, 4) << "beam sampling with the config's beams";
  EXPECT_EQ(sampled.options.num_return_sequences, 3);
  v1::GenerationOptions one_beam;
  one_beam.set_num_beams(1);
  EXPECT_EQ(server::resolve_options(one_beam, config, limits).options.num_return_sequences, 3)
      << "the config's samples, with one beam";
  server::ServiceLimits two_rows;
  two_rows.max_beams = 2;
  EXPECT_EQ(server::resolve_options({}, config, two_rows).options.num_beams, 2) << "the server's cap";
  EXPECT_EQ(server::resolve_options({}, config, two_rows).options.num_return_sequences, 2) << "one per beam";
  EXPECT_DOUBLE_EQ(sampled.options.temperature, 0.7);
  EXPECT_DOUBLE_EQ(sampled.options.top_p, 0.9);
  v1::GenerationOptions greedy;
  greedy.set_do_sample(false);
  EXPECT_EQ(server::resolve_options(greedy, config, limits).options.num_beams, 4);
  // A default no request could use is refused with the reason, and a request can set it right.
  config.temperature = 0.0;
  EXPECT_THROW((void)server::resolve_options({}, config, limits), server::RequestError);
  v1::GenerationOptions warmer;
  warmer.set_temperature(0.5F);
  EXPECT_DOUBLE_EQ(server::resolve_options(warmer, config, limits).options.temperature, 0.5);
  // Sampling's settings refuse only the requests that sample: a checkpoint's top_p 1.5 or top_k -1 leaves
  // greedy and beam search alone, as in Hugging Face (they were refused too).
  config.temperature = 1.0;
  config.top_p = 1.5;
  config.top_k = -1;
  EXPECT_EQ(server::resolve_options(greedy, config, limits).options.num_beams, 4);
  EXPECT_THROW((void)server::resolve_options({}, config, limits), server::RequestError);
  // A checkpoint's no_repeat_ngram_size -1 is off and its length_penalty 20 matters only with beams, as in
  // Hugging Face: requests that leave them unset were refused; a request's own values still are.
  config.top_p = 1.0;
  config.top_k = 0;
  config.no_repeat_ngram_size = -1;
  config.length_penalty = 20.0;
  EXPECT_THROW((void)server::resolve_options(greedy, config, limits), server::RequestError) << "4 beams";
  v1::GenerationOptions single;
  single.set_num_beams(1);
  EXPECT_EQ(server::resolve_options(single, config, limits).options.no_repeat_ngram_size, 0);
  EXPECT_DOUBLE_EQ(server::resolve_options(single, config, limits).options.length_penalty, 20.0);
  single.set_length_penalty(20.0F);
  EXPECT_THROW((void)server::resolve_options(single, config, limits), server::RequestError);
  single.clear_length_penalty();
  single.set_no_repeat_ngram_size(-1);
  EXPECT_THROW((void)server::resolve_options(single, config, limits), server::RequestError);
}

// Hugging Face's further warpers and the encoder-input settings: a request that leaves them unset gets the
// checkpoint's (generation_config.json's), one that sets them gets its own, the value that turns one off
// included.
TEST(Validation, WarpersAndEncoderInputSettingsComeFromTheRequestElseTheConfig) {
  ModelConfig config;
  config.do_sample = true;
  config.min_p = 0.05;
  config.typical_p = 0.9;
  config.epsilon_cutoff = 3e-4;
  config.eta_cutoff = 1e-3;
  config.encoder_repetition_penalty = 1.5;
  config.encoder_no_repeat_ngram_size = 3;
  const server::ServiceLimits limits;
  const auto d = server::resolve_options({}, config, limits).options;
  EXPECT_DOUBLE_EQ(d.min_p, 0.05);
  EXPECT_DOUBLE_EQ(d.typical_p, 0.9);
  EXPECT_DOUBLE_EQ(d.epsilon_cutoff, 3e-4);
  EXPECT_DOUBLE_EQ(d.eta_cutoff, 1e-3);
  EXPECT_DOUBLE_EQ(d.encoder_repetition_penalty, 1.5);
  EXPECT_EQ(d.encoder_no_repeat_ngram_size, 3);
  v1::GenerationOptions p;
  p.set_min_p(0.25F);
  p.set_typical_p(0.5F);
  p.set_epsilon_cutoff(0.125F);
  p.set_eta_cutoff(0.0625F);
  p.set_encoder_repetition_penalty(0.5F);
  p.set_encoder_no_repeat_ngram_size(2);
  const auto own = server::resolve_options(p, config, limits).options;
  EXPECT_DOUBLE_EQ(own.min_p, 0.25);
  EXPECT_DOUBLE_EQ(own.typical_p, 0.5);
  EXPECT_DOUBLE_EQ(own.epsilon_cutoff, 0.125);
  EXPECT_DOUBLE_EQ(own.eta_cutoff, 0.0625);
  EXPECT_DOUBLE_EQ(own.encoder_repetition_penalty, 0.5);
  EXPECT_EQ(own.encoder_no_repeat_ngram_size, 2);
  v1::GenerationOptions off;
  off.set_min_p(0);
  off.set_typical_p(1);
  off.set_epsilon_cutoff(0);
  off.set_eta_cutoff(0);
  off.set_encoder_repetition_penalty(1);
  off.set_encoder_no_repeat_ngram_size(0);
  const auto none = server::resolve_options(off, config, limits).options;
  EXPECT_EQ(std::tie(none.min_p, none.typical_p, none.epsilon_cutoff, none.eta_cutoff, none.encoder_repetition_penalty,
                     none.encoder_no_repeat_ngram_size),
            std::make_tuple(0.0, 1.0, 0.0, 0.0, 1.0, int64_t{0}));
  EXPECT_FALSE(reads_encoder_input(none)) << "the engine gives the options no copy of the input";
  // A checkpoint's encoder_repetition_penalty no request can use (0) is refused with the reason unless the
  // request sets its own, as repetition_penalty.
  config.encoder_repetition_penalty = 0.0;
  try {
    (void)server::resolve_options({}, config, limits);
    ADD_FAILURE() << "encoder_repetition_penalty 0 taken";
  } catch (const server::RequestError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("encoder_repetition_penalty is 0"), std::string::npos) << e.what();
  }
  v1::GenerationOptions fixed;
  fixed.set_encoder_repetition_penalty(1.0F);
  EXPECT_DOUBLE_EQ(server::resolve_options(fixed, config, limits).options.encoder_repetition_penalty, 1.0);
}

// Diverse beam search's settings: a request that leaves them unset gets the checkpoint's, one that sets them its
// own; num_beams a request sets must suit the checkpoint's groups (as in Hugging Face), and one beam ignores them.
TEST(Validation, GroupBeamSearchSettingsComeFromTheRequestElseTheConfig) {
  ModelConfig config;
  config.num_beams = 4;
  config.num_beam_groups = 2;
  config.diversity_penalty = 0.5;
  const server::ServiceLimits limits;
  const auto d = server::resolve_options({}, config, limits).options;
  EXPECT_EQ(d.num_beams, 4);
  EXPECT_EQ(d.num_beam_groups, 2);
  EXPECT_DOUBLE_EQ(d.diversity_penalty, 0.5);
  v1::GenerationOptions p;
  p.set_num_beam_groups(4);
  p.set_diversity_penalty(2.5F);
  const auto own = server::resolve_options(p, config, limits).options;
  EXPECT_EQ(own.num_beam_groups, 4);
  EXPECT_DOUBLE_EQ(own.diversity_penalty, 2.5);
  v1::GenerationOptions plain;
  plain.set_num_beam_groups(1);
  plain.set_diversity_penalty(0);
  const auto beams = server::resolve_options(plain, config, limits).options;
  EXPECT_EQ(std::tie(beams.num_beam_groups, beams.diversity_penalty), std::make_tuple(int64_t{1}, 0.0));
  v1::GenerationOptions three;
  three.set_num_beams(3);
  try {
    (void)server::resolve_options(three, config, limits);
    ADD_FAILURE() << "3 beams in the checkpoint's 2 groups taken";
  } catch (const server::RequestError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("num_beam_groups is 2 but num_beams (3) must be a multiple of it"),
              std::string::npos)
        << e.what();
  }
  v1::GenerationOptions greedy;
  greedy.set_num_beams(1);
  EXPECT_EQ(server::resolve_options(greedy, config, limits).options.num_beams, 1) << "greedy: the groups ignored";
  // The server's cap keeps the model's beams a multiple of the groups: 12 beams in 3 groups under a cap of 8
  // search 6 (8 refused every request that left num_beams unset), and the request's own groups count.
  config.num_beams = 12;
  config.num_beam_groups = 3;
  server::ServiceLimits eight;
  eight.max_beams = 8;
  const auto capped = server::resolve_options({}, config, eight).options;
  EXPECT_EQ(std::tie(capped.num_beams, capped.num_beam_groups), std::make_tuple(int64_t{6}, int64_t{3}));
  v1::GenerationOptions four_groups;
  four_groups.set_num_beam_groups(4);
  EXPECT_EQ(server::resolve_options(four_groups, config, eight).options.num_beams, 8);
  v1::GenerationOptions nine_groups;
  nine_groups.set_num_beam_groups(9);
  EXPECT_THROW((void)server::resolve_options(nine_groups, config, eight), server::RequestError)
      << "more groups than the cap allows beams";
}

// A checkpoint's srformer.expected_length is the L of every request that sets none, whatever its
// max_new_tokens; without one, L follows max_new_tokens.
// A request's early_stopping_mode, else its early_stopping, else the config's (here true).
TEST(Validation, EarlyStoppingComesFromTheModeTheBoolOrTheConfig) {
  ModelConfig config;
  config.num_beams = 4;
  config.early_stopping = EarlyStopping::kWhenFull;
  const server::ServiceLimits limits;
  const auto early_stopping = [&](std::optional<bool> flag, v1::EarlyStoppingMode mode) {
    v1::GenerationOptions p;
    if (flag) p.set_early_stopping(*flag);
    p.set_early_stopping_mode(mode);
    return server::resolve_options(p, config, limits).options.early_stopping;
  };
  EXPECT_EQ(early_stopping(std::nullopt, v1::EARLY_STOPPING_MODE_UNSPECIFIED), EarlyStopping::kWhenFull);
  EXPECT_EQ(early_stopping(false, v1::EARLY_STOPPING_MODE_UNSPECIFIED), EarlyStopping::kHeuristic);
  EXPECT_EQ(early_stopping(std::nullopt, v1::EARLY_STOPPING_MODE_NEVER), EarlyStopping::kNever);
  EXPECT_EQ(early_stopping(false, v1::EARLY_STOPPING_MODE_NEVER), EarlyStopping::kNever) << "never is not true";
  EXPECT_EQ(early_stopping(std::nullopt, v1::EARLY_STOPPING_MODE_HEURISTIC), EarlyStopping::kHeuristic);
  EXPECT_EQ(early_stopping(true, v1::EARLY_STOPPING_MODE_WHEN_FULL), EarlyStopping::kWhenFull);
  EXPECT_THROW(early_stopping(false, v1::EARLY_STOPPING_MODE_WHEN_FULL), server::RequestError);
  EXPECT_THROW(early_stopping(true, v1::EARLY_STOPPING_MODE_HEURISTIC), server::RequestError);
}

TEST(Validation, DefaultExpectedLengthIsTheCheckpointsElseMaxNewTokens) {
  ModelConfig config;
  server::ServiceLimits limits;
  v1::GenerationOptions twenty;
  twenty.set_max_new_tokens(20);
  EXPECT_EQ(server::resolve_options(twenty, config, limits).expected_length, 20);
  config.srformer.expected_length = 33;
  EXPECT_EQ(server::resolve_options(twenty, config, limits).expected_length, 33);
  EXPECT_EQ(server::resolve_options({}, config, limits).expected_length, 33);
  twenty.set_expected_length(5);
  EXPECT_EQ(server::resolve_options(twenty, config, limits).expected_length, 5) << "the request's own L wins";
  // The model's L is taken when sent back even past 4x the cap (ListModels advertises it as the default).
  limits.max_new_tokens_cap = 5;
  config.srformer.expected_length = 32;
  v1::GenerationOptions advertised;
  advertised.set_max_new_tokens(5);
  advertised.set_expected_length(32);
  EXPECT_EQ(server::resolve_options(advertised, config, limits).expected_length, 32);
  advertised.set_expected_length(33);
  try {
    server::resolve_options(advertised, config, limits);
    ADD_FAILURE() << "expected_length 33 over the bound";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("between 1 and 32, got 33; leave it unset for the model's 32"),
              std::string::npos)
        << e.what();
  }
}

// ListModels' defaults, sent back as a request's options, resolve to the same options.
TEST(Validation, DefaultsAsRequestOptionsResolveToThemselves) {
  ModelConfig config;
  config.max_length = 41;
  config.num_beams = 1;
  config.do_sample = true;
  config.temperature = 0.7;
  config.top_p = 0.9;
  config.num_return_sequences = 2;
  config.no_repeat_ngram_size = 3;
  config.early_stopping = EarlyStopping::kNever;
  config.srformer.expected_length = 50;
  config.min_p = 0.05;
  config.encoder_repetition_penalty = 1.25;
  config.encoder_no_repeat_ngram_size = 4;
  // Hugging Face leaves these off (typical_p of 1 or more, cutoffs outside (0, 1)): sent as the values that
  // say so, which a request may send back (1.5 and 2 are refused in one).
  config.typical_p = 1.5;
  config.epsilon_cutoff = 2.0;
  config.eta_cutoff = -1.0;
  config.num_beam_groups = 3;  // ignored with one beam, but sent back as the default it is
  config.diversity_penalty = 0.5;
  server::ServiceLimits limits;
  const auto defaults = server::resolve_options({}, config, limits);
  const auto proto = server::to_proto(defaults);
  EXPECT_EQ(proto.max_new_tokens(), 40);
  EXPECT_FALSE(proto.early_stopping()) << "\"never\" is not true";
  EXPECT_EQ(proto.early_stopping_mode(), v1::EARLY_STOPPING_MODE_NEVER);
  EXPECT_TRUE(proto.do_sample());
  EXPECT_FLOAT_EQ(proto.temperature(), 0.7F);
  EXPECT_EQ(proto.num_return_sequences(), 2);
  EXPECT_EQ(proto.expected_length(), 50);
  EXPECT_FLOAT_EQ(proto.min_p(), 0.05F);
  EXPECT_FLOAT_EQ(proto.typical_p(), 1.0F);
  EXPECT_FLOAT_EQ(proto.epsilon_cutoff(), 0.0F);
  EXPECT_FLOAT_EQ(proto.eta_cutoff(), 0.0F);
  EXPECT_FLOAT_EQ(proto.encoder_repetition_penalty(), 1.25F);
  EXPECT_EQ(proto.encoder_no_repeat_ngram_size(), 4);
  EXPECT_EQ(proto.num_beam_groups(), 3);
  EXPECT_FLOAT_EQ(proto.diversity_penalty(), 0.5F);
  const auto again = server::resolve_options(proto, config, limits);
  EXPECT_EQ(server::to_proto(again).SerializeAsString(), proto.SerializeAsString());
  const auto& a = defaults.options;
  const auto& b = again.options;
  EXPECT_EQ(std::tie(a.max_new_tokens, a.min_new_tokens, a.num_beams, a.early_stopping, a.do_sample, a.top_k, a.seed,
                     a.no_repeat_ngram_size, a.num_return_sequences),
            std::tie(b.max_new_tokens, b.min_new_tokens, b.num_beams, b.early_stopping, b.do_sample, b.top_k, b.seed,
                     b.no_repeat_ngram_size, b.num_return_sequences));
  EXPECT_NEAR(b.temperature, a.temperature, 1e-7);  // float on the wire
  EXPECT_NEAR(b.top_p, a.top_p, 1e-7);
  EXPECT_NEAR(b.min_p, a.min_p, 1e-7);
  EXPECT_NEAR(b.encoder_repetition_penalty, a.encoder_repetition_penalty, 1e-7);
  EXPECT_EQ(b.encoder_no_repeat_ngram_size, a.encoder_no_repeat_ngram_size);
  EXPECT_EQ(b.num_beam_groups, a.num_beam_groups);
  EXPECT_DOUBLE_EQ(b.diversity_penalty, a.diversity_penalty);
  // Every field is set: a client that copies them sends no field the server would fill in differently. But
  // bad_words, the request's own words added to the checkpoint's bad_words_ids: none by default.
  std::vector<const google::protobuf::FieldDescriptor*> set;
  proto.GetReflection()->ListFields(proto, &set);
  EXPECT_EQ(static_cast<int>(set.size()), v1::GenerationOptions::descriptor()->field_count() - 1);
  EXPECT_TRUE(proto.bad_words().empty());
}

// Hugging Face's TopPLogitsWarper takes top_p 0 (it keeps the likeliest token alone): a sampling checkpoint
// whose generation_config.json says so could serve no request that left top_p unset, and a request could not
// send 0 ("top_p must be in (0, 1]"). Both are served; ListModels advertises the 0, which a request sends back.
TEST(Validation, ASamplingCheckpointsTopPZeroIsServedAsHuggingFaceTakesIt) {
  ModelConfig config;
  config.do_sample = true;
  config.num_beams = 1;
  config.top_p = 0.0;
  server::ServiceLimits limits;
  try {
    const auto defaults = server::resolve_options({}, config, limits);
    EXPECT_EQ(defaults.options.top_p, 0.0);
    const auto proto = server::to_proto(defaults);
    EXPECT_FLOAT_EQ(proto.top_p(), 0.0F);
    EXPECT_EQ(server::to_proto(server::resolve_options(proto, config, limits)).SerializeAsString(),
              proto.SerializeAsString());
    config.top_p = 0.9;
    v1::GenerationOptions zero;
    zero.set_top_p(0.0F);
    EXPECT_EQ(server::resolve_options(zero, config, limits).options.top_p, 0.0);
  } catch (const server::RequestError& e) {
    ADD_FAILURE() << "top_p 0 was refused: " << e.what();
  }
}

// A checkpoint's setting that acts in no mode its defaults use is checked only where it acts (validate()), so
// it may lie outside a request's range (check_given_options): a greedy checkpoint's top_p 1.5. ListModels
// advertised it as it was, and a request sending the defaults back was refused ("top_p must be in [0, 1]");
// it is advertised as the value that turns it off, as typical_p and the cutoffs are.
TEST(Validation, DefaultsThatDoNotActAreAdvertisedAsARequestMaySendThemBack) {
  ModelConfig config;
  config.do_sample = false;
  config.num_beams = 1;
  config.top_p = 1.5;
  config.top_k = -1;
  config.min_p = 1.5;
  config.typical_p = 0.0;
  config.length_penalty = 40.0;
  server::ServiceLimits limits;
  const auto defaults = server::resolve_options({}, config, limits);
  EXPECT_EQ(defaults.options.top_p, 1.5) << "the checkpoint's own, which greedy search ignores";
  const auto proto = server::to_proto(defaults);
  EXPECT_FLOAT_EQ(proto.top_p(), 1.0F);
  EXPECT_EQ(proto.top_k(), 0);
  EXPECT_FLOAT_EQ(proto.min_p(), 0.0F);
  EXPECT_FLOAT_EQ(proto.typical_p(), 1.0F);
  EXPECT_FLOAT_EQ(proto.length_penalty(), 1.0F);
  try {
    const auto again = server::resolve_options(proto, config, limits);
    EXPECT_EQ(server::to_proto(again).SerializeAsString(), proto.SerializeAsString());
  } catch (const server::RequestError& e) {
    ADD_FAILURE() << "the defaults sent back were refused: " << e.what();
  }
  // Where they act they are the checkpoint's, as validate() took them.
  config.do_sample = true;
  config.top_p = 0.5;
  config.top_k = 7;
  config.min_p = 0.25;
  config.typical_p = 1.0;
  config.num_beams = 2;
  config.length_penalty = -3.0;
  const auto sampled = server::to_proto(server::resolve_options({}, config, limits));
  EXPECT_FLOAT_EQ(sampled.top_p(), 0.5F);
  EXPECT_EQ(sampled.top_k(), 7);
  EXPECT_FLOAT_EQ(sampled.min_p(), 0.25F);
  EXPECT_FLOAT_EQ(sampled.length_penalty(), -3.0F);
}

// BART's learned positions bound what a request may ask for (new token n is decided at position n - 1);
// T5's relative ones do not. The refusal says how many to ask for, and ListModels reports the limit.
TEST(Validation, MaxNewTokensStopsAtABartDecodersPositions) {
  using server::max_new_tokens_limit;
  ModelConfig bart;
  bart.arch = Architecture::kBart;
  bart.max_position_embeddings = 50;
  ModelConfig t5 = bart;
  t5.arch = Architecture::kT5;
  server::ServiceLimits limits, tight;
  limits.max_new_tokens_cap = 64;
  tight.max_new_tokens_cap = 40;
  EXPECT_EQ(max_new_tokens_limit(bart, limits), 50);
  EXPECT_EQ(max_new_tokens_limit(bart, tight), 40);
  EXPECT_EQ(max_new_tokens_limit(t5, limits), 64);
  EXPECT_EQ(server::resolve_options({}, bart, limits).options.max_new_tokens, 50) << "128 by default, cut to 50";
  v1::GenerationOptions p;
  p.set_max_new_tokens(50);
  EXPECT_EQ(server::resolve_options(p, bart, limits).options.max_new_tokens, 50);
  p.set_max_new_tokens(51);
  EXPECT_EQ(server::resolve_options(p, t5, limits).options.max_new_tokens, 51);
  try {
    (void)server::resolve_options(p, bart, limits);
    ADD_FAILURE() << "51 new tokens from 50 positions was accepted";
  } catch (const server::RequestError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("its decoder has 50 positions (config.json's max_position_embeddings); ask "
                                         "for at most 50"),
              std::string::npos)
        << e.what();
  }
}

// Generation defaults no request can use as they are (repetition_penalty 0) are warned about once: two
// warnings, from the server's check and the model library's, said the same thing one after the other.
TEST(Validation, UnusableGenerationDefaultsAreWarnedAboutOnce) {
  FakeServerOptions so;
  FakeModelOptions unusable;
  unusable.repetition_penalty = 0.0;
  so.models = {{"unusable", unusable}};
  LogCapture captured;  // before the server: it outlives the server's threads
  TestServer server(so);
  const std::string log = captured.text();
  const auto said = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(said("are not usable"), 1u) << log;
  EXPECT_EQ(said("repetition_penalty is 0"), 1u) << log;
}

// A model served with a tokenizer larger than its embedding (FakeTokenizer: 259 tokens; this model 100
// rows): a document whose tokens all fit is served, one holding a token past the rows is refused alone,
// before the engine, where it would fail every request encoded beside it. The start-up warning names the
// tokens past the rows (facebook/bart-large-cnn has one, its <mask>); it only said the tokenizer files
// might belong to another checkpoint.
TEST(Validation, ATokenPastTheModelsEmbeddingIsRefusedAndOnlyThatRequest) {
  FakeServerOptions so;
  FakeModelOptions narrow;
  narrow.vocab_size = 100;  // ids 0..99: bytes below 'a' (id = byte + 3)
  so.models = {{"narrow", narrow}};
  LogCapture captured;  // before the server: it outlives the server's threads
  TestServer server(so);
  EXPECT_NE(captured.text().find("its tokenizer has 259 tokens but its embedding 100 rows (config.json's vocab_size), "
                                 "so 'a' (100), 'b' (101), 'c' (102), 'd' (103), 'e' (104) and 154 more have none"),
            std::string::npos)
      << captured.text();
  grpc::ClientContext bad_ctx;
  v1::SummarizeResponse bad;
  const auto refused = server.stub().Summarize(&bad_ctx, make_request("ABC abc", "narrow"), &bad);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("the document holds the token 'a' (id 100), past the 100 rows of model "
                                         "'narrow''s embedding: its tokenizer has 259 tokens"),
            std::string::npos)
      << refused.error_message();
  grpc::ClientContext ok_ctx;
  v1::SummarizeResponse ok;
  const auto served = server.stub().Summarize(&ok_ctx, make_request("ABC DEF", "narrow"), &ok);
  EXPECT_TRUE(served.ok()) << served.error_message();
}

TEST(Validation, InputLimitOfAModelWhoseConfigSetsNoneIsTheServers) {
  using server::effective_max_input_tokens;
  ModelConfig bounded;  // BART's max_position_embeddings, a T5's n_positions
  bounded.max_input_tokens = 1024;
  ModelConfig unbounded;  // a T5 without n_positions
  unbounded.max_input_tokens = 16384;
  unbounded.max_input_tokens_is_fallback = true;
  server::ServiceLimits none, lower, higher;
  lower.max_input_tokens = 512;
  higher.max_input_tokens = 8000;
  // A checkpoint's own limit: --max-input-tokens can only lower it.
  EXPECT_EQ(effective_max_input_tokens(bounded, none), 1024);
  EXPECT_EQ(effective_max_input_tokens(bounded, lower), 512);
  EXPECT_EQ(effective_max_input_tokens(bounded, higher), 1024);
  // None: the server's default, or whatever the operator sets, above or below it.
  EXPECT_EQ(effective_max_input_tokens(unbounded, none), kUnboundedModelInputTokens);
  EXPECT_EQ(effective_max_input_tokens(unbounded, lower), 512);
  EXPECT_EQ(effective_max_input_tokens(unbounded, higher), 8000);
  // A T5's n_positions is advisory (relative positions): the operator's limit, above or below it.
  ModelConfig advisory;
  advisory.arch = Architecture::kT5;
  advisory.max_input_tokens = 1024;
  EXPECT_EQ(effective_max_input_tokens(advisory, none), 1024);
  EXPECT_EQ(effective_max_input_tokens(advisory, lower), 512);
  EXPECT_EQ(effective_max_input_tokens(advisory, higher), 8000);
}

}  // namespace
}  // namespace srformer::testing
