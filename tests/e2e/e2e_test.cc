// End to end: the srformer-server binary with a real tiny SRformer T5, driven by the srformer-client
// binary and by an independent Python grpcio client through server reflection.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <torch/cuda.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "model/generation/generate.h"
#include "model/kernels/bf16_linear.h"
#include "model/seq2seq.h"
#include "model/tokenizer/tokenizer.h"
#include "srformer/v1/summarizer.grpc.pb.h"
#include "tests/e2e/process.h"
#include "tests/metrics/operations_doc.h"
#include "tests/metrics/scrape.h"
#include "tests/server/tiny_real_model.h"

namespace srformer::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kServer = std::string(SRFORMER_BIN_DIR) + "/srformer-server";
const std::string kClient = std::string(SRFORMER_BIN_DIR) + "/srformer-client";
const std::string kTool = std::string(SRFORMER_BIN_DIR) + "/srformer";

class EndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Per process: ctest runs these tests in parallel processes, each with its own server log.
    work_ = fs::temp_directory_path() / ("srformer_e2e_" + std::to_string(::getpid()));
    fs::create_directories(work_);
    model_dir_ = make_tiny_t5_srformer(work_ / "t5");
    for (int i = 0; i < 4; ++i)
      std::ofstream(work_ / ("doc" + std::to_string(i) + ".txt")) << synthetic_text(2 + i, 50 + i);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!work_.empty()) fs::remove_all(work_, ec);  // this process's model copy, documents and server logs
  }
  void SetUp() override {
    if (model_dir_.empty()) GTEST_SKIP() << "fixture t5-srformer not found";
  }
  std::unique_ptr<ServerProcess> start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--model", "tiny=" + model_dir_.string(), "--listen", "127.0.0.1:0", "--metrics-listen", ""};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ServerProcess>(kServer, args, (work_ / "server.log").string());
  }
  static std::string doc(int i) { return (work_ / ("doc" + std::to_string(i) + ".txt")).string(); }
  // `srformer train`'s stop tests: eight short examples in NAME.jsonl, the command that trains on them
  // into NAME-run (the caller adds --steps), and whether a run left a checkpoint it can resume from.
  static fs::path write_train_examples(const std::string& name);
  static std::string train_command(const std::string& name);
  static bool holds_a_checkpoint(const std::string& name);

  // Values, not pointers: where SetUpTestSuite throws (no SentencePiece shim), gtest reports it and still
  // runs SetUp and TearDownTestSuite, which must not dereference what it never set.
  static inline fs::path work_;
  static inline fs::path model_dir_;
};

// generate()'s best hypothesis for `text` on a fresh load of `dir`.
Hypothesis offline_best(const fs::path& dir, const std::string& text, int max_new, int beams,
                        torch::ScalarType dtype = torch::kFloat32) {
  LoadOptions lo;
  lo.dtype = dtype;
  auto model = load_model(dir, lo);
  auto tok = load_tokenizer(dir);
  const auto ids = tok->encode(text);
  const auto input = torch::tensor(ids, torch::kInt64).unsqueeze(0);
  GenerationOptions o;
  o.max_new_tokens = max_new;
  o.num_beams = beams;
  o = with_model_tokens(o, model->config());
  return generate(*model, input, torch::ones_like(input), o, torch::full({1}, int64_t{max_new}, torch::kInt64))
      .at(0)
      .hypotheses.at(0);
}

std::vector<int64_t> offline(const fs::path& dir, const std::string& text, int max_new, int beams,
                             torch::ScalarType dtype = torch::kFloat32) {
  return offline_best(dir, text, max_new, beams, dtype).tokens;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The first run of two or more ASCII letters or digits in `text` ("" when there is none): a word of a
// summary that --bad-word can ban.
std::string first_word(const std::string& text) {
  std::string word;
  for (const char c : text + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += c;
    } else if (word.size() >= 2) {
      break;
    } else {
      word.clear();
    }
  }
  return word.size() >= 2 ? word : "";
}

// The JSON a tool wrote on stdout, expecting it to have exited 0 (an empty object where it did not).
nlohmann::json json_output(const CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

// srformer-client (`client`, through a server) and srformer summarize (`tool`) both refuse `args`, exiting 1: the
// client with the server's INVALID_ARGUMENT saying `served_says`, the offline tool saying `offline_says`.
void expect_both_refuse(const std::string& client, const std::string& tool, const std::string& args,
                        const std::string& served_says, const std::string& offline_says) {
  const auto refused = run_command(client + args + " 2>&1");
  EXPECT_EQ(refused.exit_code, 1) << args;
  EXPECT_NE(refused.out.find("INVALID_ARGUMENT"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find(served_says), std::string::npos) << refused.out;
  const auto offline_refused = run_command(tool + args + " 2>&1");
  EXPECT_EQ(offline_refused.exit_code, 1) << args;
  EXPECT_NE(offline_refused.out.find(offline_says), std::string::npos) << offline_refused.out;
}

// A flag (with its value) both refuse, the server's words and the offline tool's.
struct Refusal {
  std::string flag, served_says, offline_says;
};

// expect_both_refuse for each refusal's flag given before `document`.
void expect_both_refuse_each(const std::string& client, const std::string& tool, const std::string& document,
                             const std::vector<Refusal>& refusals) {
  for (const auto& r : refusals)
    expect_both_refuse(client, tool, r.flag + " " + document, r.served_says, r.offline_says);
}

TEST_F(EndToEnd, ClientJsonStreamHealthAndListModels) {
  auto server = start();
  const std::string t = " --target " + server->target();
  // Exactly one "listening on" line, at info, after the model's warm-up.
  const std::string log = server->log();
  EXPECT_EQ(log.find("listening on"), log.rfind("listening on"));
  EXPECT_LT(log.find("model 'tiny': warmed up in "), log.find("listening on")) << log;

  auto health = run_command(kClient + t + " --health");
  EXPECT_EQ(health.exit_code, 0);
  EXPECT_EQ(health.out, "SERVING\n");
  health = run_command(kClient + t + " --health --json");  // a script reading --json output reads this too
  EXPECT_EQ(health.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(health.out), (nlohmann::json{{"status", "SERVING"}}));

  // --json writes every field of the messages it prints, by their proto names (docs/API.md: usage "the
  // fields of the table above", ListModels' defaults "every field set"): the client names them one by one,
  // and a field added to the proto but not there would be missing.
  const auto field_names = [](const google::protobuf::Descriptor* d) {
    std::set<std::string> names;
    for (int i = 0; i < d->field_count(); ++i) names.insert(d->field(i)->name());
    return names;
  };
  const auto keys = [](const nlohmann::json& j) {
    std::set<std::string> names;
    for (const auto& item : j.items()) names.insert(item.key());
    return names;
  };
  auto models = run_command(kClient + t + " --list-models --json");
  ASSERT_EQ(models.exit_code, 0);
  const auto mj = nlohmann::json::parse(models.out);
  ASSERT_EQ(mj.size(), 1u);
  EXPECT_EQ(keys(mj[0]), field_names(v1::ModelInfo::descriptor()));
  EXPECT_EQ(keys(mj[0]["defaults"]), field_names(v1::GenerationOptions::descriptor()));
  EXPECT_EQ(mj[0]["name"], "tiny");
  EXPECT_EQ(mj[0]["cross_attention"], "srformer");
  EXPECT_EQ(mj[0]["segment_size"], 4);
  // The options a request that sets none gets, by their field names (the tiny model's max_length 20: 19 new
  // tokens, and L follows them).
  EXPECT_EQ(mj[0]["defaults"]["max_new_tokens"], 19);
  EXPECT_EQ(mj[0]["defaults"]["expected_length"], 19);
  EXPECT_EQ(mj[0]["defaults"]["do_sample"], false);
  EXPECT_EQ(mj[0]["defaults"]["length_penalty"], 1.0);
  EXPECT_EQ(mj[0]["defaults"]["early_stopping"], false);
  EXPECT_EQ(mj[0]["defaults"]["early_stopping_mode"], "EARLY_STOPPING_MODE_HEURISTIC");  // enums by name
  EXPECT_EQ(mj[0]["default_expected_length"], 19);

  for (const int beams : {1, 3}) {
    const std::string opts = " --model tiny --max-new-tokens 20 --num-beams " + std::to_string(beams) + " ";
    auto unary = run_command(kClient + t + opts + "--json " + doc(1));
    ASSERT_EQ(unary.exit_code, 0) << unary.out;
    const auto j = nlohmann::json::parse(unary.out);
    const auto best = offline_best(model_dir_, read(doc(1)), 20, beams);
    const auto& ref = best.tokens;
    EXPECT_EQ(j["token_ids"].get<std::vector<int64_t>>(), ref);
    EXPECT_EQ(j["finish_reason"], std::string(best.finish_reason == FinishReason::kEos ? "eos" : "length"));
    EXPECT_GT(j["usage"]["input_tokens"].get<int>(), 0);
    EXPECT_EQ(j["usage"]["output_tokens"].get<size_t>(), ref.size());
    EXPECT_EQ(keys(j), field_names(v1::SummarizeResponse::descriptor()));
    EXPECT_EQ(keys(j["usage"]), field_names(v1::Usage::descriptor()));
    // The offline tool gives the same summary, ids, per-token log-probabilities and score.
    const std::string offline_tool = kTool + " summarize --model " + model_dir_.string() +
                                     " --max-new-tokens 20 --num-beams " + std::to_string(beams);
    auto tool = run_command(offline_tool + " --json " + doc(1));
    ASSERT_EQ(tool.exit_code, 0) << tool.out;
    const auto tj = nlohmann::json::parse(tool.out);
    EXPECT_EQ(tj["summary"], j["summary"]);
    EXPECT_EQ(tj["token_ids"], j["token_ids"]);
    const auto logprobs = j["token_logprobs"].get<std::vector<float>>();
    EXPECT_EQ(tj["token_logprobs"].get<std::vector<float>>(), logprobs);
    EXPECT_EQ(logprobs.size(), ref.size());
    EXPECT_FLOAT_EQ(tj["score"].get<float>(), j["score"].get<float>());
    // ... and the same next best hypotheses.
    const std::string returned = " --num-return-sequences " + std::to_string(beams);
    auto served_more = run_command(kClient + t + opts + returned + " --json " + doc(1));
    ASSERT_EQ(served_more.exit_code, 0) << served_more.out;
    auto tool_more = run_command(offline_tool + returned + " --json " + doc(1));
    ASSERT_EQ(tool_more.exit_code, 0) << tool_more.out;
    const auto sm = nlohmann::json::parse(served_more.out)["alternatives"];
    const auto tm = nlohmann::json::parse(tool_more.out)["alternatives"];
    ASSERT_EQ(sm.size(), static_cast<size_t>(beams - 1));
    ASSERT_EQ(tm.size(), sm.size());
    for (size_t a = 0; a < sm.size(); ++a) {
      EXPECT_EQ(keys(sm[a]), field_names(v1::Alternative::descriptor()));
      EXPECT_EQ(sm[a]["summary"], tm[a]["summary"]);
      EXPECT_EQ(sm[a]["token_ids"], tm[a]["token_ids"]);
      EXPECT_EQ(sm[a]["finish_reason"], tm[a]["finish_reason"]);
      EXPECT_EQ(sm[a]["token_logprobs"].get<std::vector<float>>(), tm[a]["token_logprobs"].get<std::vector<float>>());
    }
    // Without --json the client prints them after the best summary, a line each.
    auto plain = run_command(kClient + t + opts + returned + " " + doc(1));
    ASSERT_EQ(plain.exit_code, 0) << plain.out;
    std::string expected = j["summary"].get<std::string>() + "\n";
    for (size_t a = 0; a < sm.size(); ++a) {
      std::ostringstream line;
      line << "[alternative " << a + 2 << ", score " << sm[a]["score"].get<float>() << "] "
           << sm[a]["summary"].get<std::string>() << "\n";
      expected += line.str();
    }
    EXPECT_EQ(plain.out, expected);
    EXPECT_EQ(run_command(offline_tool + returned + " " + doc(1)).out, expected) << "the offline tool prints the same";

    auto streamed = run_command(kClient + t + opts + "--stream " + doc(1));
    ASSERT_EQ(streamed.exit_code, 0);
    EXPECT_EQ(streamed.out, j["summary"].get<std::string>() + "\n");
  }
  // Options the API carries as float32 are read offline as the server reads them: a length penalty of
  // 0.448 (no float32) gave beam scores 1 ulp apart.
  {
    const std::string opts = " --max-new-tokens 20 --num-beams 4 --length-penalty 0.448 --num-return-sequences 2 ";
    auto served = run_command(kClient + t + " --model tiny" + opts + "--json " + doc(2));
    ASSERT_EQ(served.exit_code, 0) << served.out;
    auto tool = run_command(kTool + " summarize --model " + model_dir_.string() + opts + "--json " + doc(2));
    ASSERT_EQ(tool.exit_code, 0) << tool.out;
    const auto sj = nlohmann::json::parse(served.out), tj = nlohmann::json::parse(tool.out);
    EXPECT_EQ(sj["token_ids"], tj["token_ids"]);
    EXPECT_EQ(sj["score"].get<float>(), tj["score"].get<float>());
    EXPECT_EQ(sj["alternatives"][0]["score"].get<float>(), tj["alternatives"][0]["score"].get<float>());
  }
  // Three samples: served and offline alike, in draw order, the first what one sample with the seed gives.
  {
    const std::string sampling = " --max-new-tokens 20 --do-sample --temperature 1.5 --seed 9 ";
    auto served = run_command(kClient + t + " --model tiny" + sampling + "--num-return-sequences 3 --json " + doc(1));
    ASSERT_EQ(served.exit_code, 0) << served.out;
    const std::string offline_tool = kTool + " summarize --model " + model_dir_.string() + sampling;
    auto tool = run_command(offline_tool + "--num-return-sequences 3 --json " + doc(1));
    ASSERT_EQ(tool.exit_code, 0) << tool.out;
    const auto sj = nlohmann::json::parse(served.out);
    const auto tj = nlohmann::json::parse(tool.out);
    EXPECT_EQ(sj["token_ids"], tj["token_ids"]);
    ASSERT_EQ(sj["alternatives"].size(), 2u);
    ASSERT_EQ(tj["alternatives"].size(), 2u);
    for (size_t a = 0; a < 2; ++a) EXPECT_EQ(sj["alternatives"][a]["token_ids"], tj["alternatives"][a]["token_ids"]);
    auto one = run_command(kClient + t + " --model tiny" + sampling + "--json " + doc(1));
    ASSERT_EQ(one.exit_code, 0) << one.out;
    EXPECT_EQ(nlohmann::json::parse(one.out)["token_ids"], sj["token_ids"]);
  }
  // stdin input and a bad request: exit code 1 with the server's message.
  auto piped = run_command("printf '   ' | " + kClient + t + " - 2>&1");
  EXPECT_EQ(piped.exit_code, 1);
  // The status by name, as grpcurl prints it, then the server's message.
  EXPECT_EQ(piped.out.rfind("srformer-client: INVALID_ARGUMENT: document ", 0), 0u) << piped.out;
}

// The client's --batch: one SummarizeBatch call, a summary per FILE in order, each what it gives alone.
// An empty FILE fails the whole call; with --partial it fails alone (its error on stderr, exit status 1).
TEST_F(EndToEnd, ClientBatchAndPartialBatch) {
  auto server = start();
  const std::string base = kClient + " --target " + server->target() + " --model tiny --max-new-tokens 12 --batch ";
  const std::string blank = (work_ / "blank.txt").string();
  std::ofstream(blank) << "   ";
  const std::string errors = (work_ / "batch-errors.txt").string();

  auto whole = run_command(base + "--json " + doc(1) + " " + doc(2));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  const auto wj = nlohmann::json::parse(whole.out);
  ASSERT_EQ(wj.size(), 2u);
  EXPECT_EQ(wj[0]["token_ids"].get<std::vector<int64_t>>(), offline(model_dir_, read(doc(1)), 12, 1));
  EXPECT_EQ(wj[1]["token_ids"].get<std::vector<int64_t>>(), offline(model_dir_, read(doc(2)), 12, 1));

  auto refused = run_command(base + doc(1) + " " + blank + " 2>&1");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.out.rfind("srformer-client: INVALID_ARGUMENT: requests[1]: document contains only whitespace", 0),
            0u)
      << refused.out;
  EXPECT_NE(refused.out.find(" (requests[1] is " + blank + ")\n"), std::string::npos)
      << "names the FILE: " << refused.out;

  auto partial = run_command(base + "--json --partial " + doc(1) + " " + blank + " " + doc(2) + " 2>" + errors);
  EXPECT_EQ(partial.exit_code, 1);
  const auto pj = nlohmann::json::parse(partial.out);
  ASSERT_EQ(pj.size(), 3u);
  EXPECT_EQ(pj[0]["token_ids"], wj[0]["token_ids"]);
  EXPECT_EQ(pj[2]["token_ids"], wj[1]["token_ids"]);
  EXPECT_EQ(pj[1]["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_NE(pj[1]["error"]["message"].get<std::string>().find("only whitespace"), std::string::npos) << pj[1];
  EXPECT_EQ(read(errors),
            "srformer-client: " + blank + ": INVALID_ARGUMENT: " + pj[1]["error"]["message"].get<std::string>() + "\n");
  // Plain text: the failed FILE's line is empty, so line i is still FILE i's summary.
  auto plain = run_command(base + "--partial " + doc(1) + " " + blank + " " + doc(2) + " 2>/dev/null");
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_EQ(plain.out, wj[0]["summary"].get<std::string>() + "\n\n" + wj[1]["summary"].get<std::string>() + "\n");

  auto lone = run_command(kClient + " --target " + server->target() + " --partial " + doc(1) + " 2>&1");
  EXPECT_EQ(lone.exit_code, 2);
  EXPECT_NE(lone.out.find("--partial goes with --batch"), std::string::npos) << lone.out;
  auto streamed = run_command(base + "--stream " + doc(1) + " 2>&1");
  EXPECT_EQ(streamed.exit_code, 2);
  EXPECT_NE(streamed.out.find("--batch and --stream do not go together"), std::string::npos) << streamed.out;
}

// --batch --request-id ID gives each FILE its own id, ID-0, ID-1, ... as --load does: every item went out with
// the same id, and the server's log lines of the items could not be told apart.
TEST_F(EndToEnd, BatchItemsGetARequestIdEach) {
  auto server = start();
  auto r = run_command(kClient + " --target " + server->target() +
                       " --batch --json --request-id b7 --max-new-tokens 4 " + doc(1) + " " + doc(2) + " " + doc(1));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u) << r.out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string id = "b7-" + std::to_string(i);
    EXPECT_EQ(j[i]["request_id"], id);
    EXPECT_NE(server->log().find("request " + id + ": SummarizeBatch"), std::string::npos) << server->log();
  }
}

// bf16 on the CPU (AMX or AVX512-BF16): the server says so, and each summary, decoded among others, equals the offline
// bf16 one.
TEST_F(EndToEnd, Bf16OnTheCpuServesWhatOfflineBf16Gives) {
  if (!kernels::cpu_bf16_available()) {
    GTEST_SKIP() << "this CPU has neither AMX nor AVX512-BF16: the server refuses --dtype bf16 here";
  }
  auto server = start({"--dtype", "bf16"});
  const std::string t = " --target " + server->target();
  auto models = run_command(kClient + t + " --list-models --json");
  ASSERT_EQ(models.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(models.out)[0]["dtype"], "bf16");
  for (const int beams : {1, 3}) {
    std::vector<std::future<CommandResult>> runs;
    for (int i = 0; i < 4; ++i) {
      runs.push_back(std::async(std::launch::async, [&, i] {
        return run_command(kClient + t + " --model tiny --max-new-tokens 20 --json --num-beams " +
                           std::to_string(beams) + " " + doc(i));
      }));
    }
    for (int i = 0; i < 4; ++i) {
      const auto r = runs[i].get();
      ASSERT_EQ(r.exit_code, 0) << r.out;
      const auto ids = nlohmann::json::parse(r.out)["token_ids"].get<std::vector<int64_t>>();
      EXPECT_EQ(ids, offline(model_dir_, read(doc(i)), 20, beams, torch::kBFloat16)) << "doc " << i;
    }
  }
}

TEST_F(EndToEnd, LoadGeneratorReportsThroughputAndLatency) {
  auto server = start();
  // doc0 named twice: requests take the files in turn, so it gets half of them.
  auto r = run_command(kClient + " --target " + server->target() + " --load --concurrency 4 --requests 24 --json" +
                       " --max-new-tokens 16 " + doc(0) + " " + doc(1) + " " + doc(0) + " " + doc(3));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["requests_ok"], 24);
  EXPECT_EQ(j["requests_failed"], 0);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["requests_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["ttft_ms"]["p50"].get<double>(), 0.0);
  EXPECT_LE(j["ttft_ms"]["p50"].get<double>(), j["ttft_ms"]["p99"].get<double>());
  EXPECT_GT(j["inter_token_ms"]["count"].get<int>(), 0);
  // Each distinct document's own figures, by where it first appears among the files.
  const auto& by = j["by_document"];
  ASSERT_EQ(by.size(), 3u) << j.dump();
  const std::vector<std::pair<int, int>> expected = {{0, 12}, {1, 6}, {3, 6}};  // (position = doc number, requests)
  for (size_t d = 0; d < by.size(); ++d) {
    EXPECT_EQ(by[d]["document"], expected[d].first);
    EXPECT_EQ(by[d]["requests_ok"], expected[d].second);
    EXPECT_EQ(by[d]["bytes"].get<size_t>(), read(doc(expected[d].first)).size());
    EXPECT_EQ(by[d]["latency_ms"]["count"], expected[d].second);
    EXPECT_LE(by[d]["ttft_ms"]["p50"].get<double>(), by[d]["latency_ms"]["p50"].get<double>());
  }
}

// Every state budget is logged, none too: an operator (and bench/server_state_budget.sh) reads which one runs.
TEST_F(EndToEnd, TheStateBudgetIsLoggedWhateverItIs) {
  auto none = start({"--max-state-memory", "0"});
  EXPECT_NE(none->log().find("decoder state budget: none (--max-state-memory 0)"), std::string::npos) << none->log();
  auto fixed = start({"--max-state-memory", "64M"});
  EXPECT_NE(fixed->log().find("decoder state budget: 64 MiB per model (--max-state-memory)"), std::string::npos)
      << fixed->log();
}

// Samples 2 ... N come in the final message only: the report counted the streamed first one (8 of 24
// tokens here). --request-id gives each request of the run its own id.
TEST_F(EndToEnd, LoadGeneratorCountsEverySequenceAndNumbersRequestIds) {
  auto server = start();
  auto r = run_command(kClient + " --target " + server->target() +
                       " --load --requests 2 --json --request-id run7 --do-sample --seed 5 --num-return-sequences 3"
                       " --min-new-tokens 8 --max-new-tokens 8 " +
                       doc(1));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["output_tokens"], 2 * 3 * 8) << r.out;
  EXPECT_EQ(j["inter_token_ms"]["count"], 2 * 7) << "timings are the streamed summary's";
  const std::string log = server->log();
  EXPECT_NE(log.find("request run7-0: SummarizeStream"), std::string::npos) << log;
  EXPECT_NE(log.find("request run7-1: SummarizeStream"), std::string::npos) << log;
}

// A FILE whose name is not UTF-8 (Latin-1 here) is named in --json's by_document with U+FFFD for its bad byte:
// the report's dump threw ("invalid UTF-8 byte"), and the client exited 1 with the run's report lost.
TEST_F(EndToEnd, LoadReportInJsonNamesAFileWhoseNameIsNotUtf8) {
  auto server = start();
  const fs::path latin1 = work_ / "caf\xe9.txt";
  fs::copy_file(doc(1), latin1, fs::copy_options::overwrite_existing);
  auto r = run_command(kClient + " --target " + server->target() + " --load --requests 2 --json --max-new-tokens 4 " +
                       doc(0) + " '" + latin1.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["requests_ok"], 2);
  ASSERT_EQ(j["by_document"].size(), 2u) << r.out;
  EXPECT_EQ(j["by_document"][1]["file"], (work_ / "caf\xef\xbf\xbd.txt").string());
  EXPECT_EQ(j["by_document"][1]["requests_ok"], 1);
}

// Stdin named more than once is read once: the second read found it drained and sent an empty document, which
// the load report counted as failures of "-" beside the successes of "-".
TEST_F(EndToEnd, StdinNamedTwiceGivesItsTextToBoth) {
  auto server = start();
  const std::string client = kClient + " --target " + server->target() + " --model tiny --max-new-tokens 8 ";
  const std::string piped = "cat " + doc(1) + " | ";
  auto batch = run_command(piped + client + "--batch - " + doc(1) + " -");
  ASSERT_EQ(batch.exit_code, 0) << batch.out;
  const auto one = run_command(client + doc(1));
  ASSERT_EQ(one.exit_code, 0) << one.out;
  EXPECT_EQ(batch.out, one.out + one.out + one.out);
  auto load = run_command(piped + client + "--load --requests 4 --json - -");
  ASSERT_EQ(load.exit_code, 0) << load.out;
  const auto report = nlohmann::json::parse(load.out);
  EXPECT_EQ(report["requests_ok"], 4) << load.out;
  EXPECT_EQ(report["requests_failed"], 0) << load.out;
  // So is any FILE that can be read once, named twice: /dev/stdin, a pipe.
  auto dev_stdin = run_command(piped + client + "--batch /dev/stdin /dev/stdin");
  ASSERT_EQ(dev_stdin.exit_code, 0) << dev_stdin.out;
  EXPECT_EQ(dev_stdin.out, one.out + one.out);
  auto fifo = run_command(piped + client + "--load --requests 4 --json /dev/stdin /dev/stdin");
  ASSERT_EQ(fifo.exit_code, 0) << fifo.out;
  EXPECT_EQ(nlohmann::json::parse(fifo.out)["requests_ok"], 4) << fifo.out;
  // And stdin by two of its names: "-" and /dev/stdin were two FILEs, the second sent as an empty document.
  for (const char* names : {"- /dev/stdin", "/dev/stdin -"}) {
    auto both = run_command(piped + client + "--batch " + names);
    ASSERT_EQ(both.exit_code, 0) << names << ": " << both.out;
    EXPECT_EQ(both.out, one.out + one.out) << names;
    auto load_both = run_command(piped + client + "--load --requests 4 --json " + names);
    ASSERT_EQ(load_both.exit_code, 0) << names << ": " << load_both.out;
    EXPECT_EQ(nlohmann::json::parse(load_both.out)["requests_ok"], 4) << load_both.out;
  }
}

// A call refused for its document ("document is empty; ...") names the FILE it was read from, as --batch does
// (naming_the_file): the server knows no file, and a script summarizing many FILEs, one call each, was left
// to find which one was meant.
TEST_F(EndToEnd, ARefusedDocumentIsNamedByItsFile) {
  auto server = start();
  const std::string client = kClient + " --target " + server->target() + " --model tiny ";
  const std::string empty = (work_ / "empty.txt").string();
  std::ofstream{empty};
  const std::string why = "INVALID_ARGUMENT: document is empty; send the text to summarize in the 'document' field";
  for (const char* flags : {"", "--stream "}) {
    auto r = run_command(client + flags + empty + " 2>&1");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "srformer-client: " + why + " (read from " + empty + ")\n") << flags;
    auto piped = run_command("printf '' | " + client + flags + "- 2>&1");
    EXPECT_EQ(piped.out, "srformer-client: " + why + " (read from stdin)\n") << flags;
  }
  // A batch names a FILE of stdin so too: "srformer-client: -: ..." and "(requests[1] is -)" read as stray dashes.
  auto partial = run_command("printf '' | " + client + "--batch --partial " + doc(0) + " - 2>&1 >/dev/null");
  EXPECT_EQ(partial.exit_code, 1);
  EXPECT_EQ(partial.out, "srformer-client: stdin: " + why + "\n");
  auto whole = run_command("printf '' | " + client + "--batch " + doc(0) + " - 2>&1");
  EXPECT_EQ(whole.exit_code, 1);
  EXPECT_EQ(whole.out,
            "srformer-client: INVALID_ARGUMENT: requests[1]: document is empty; send the text to summarize "
            "in the 'document' field (requests[1] is stdin)\n");
  auto json = run_command(client + "--json " + empty + " 2>/dev/null");
  EXPECT_EQ(nlohmann::json::parse(json.out)["error"]["message"],
            "document is empty; send the text to summarize in the 'document' field (read from " + empty + ")");
  // Other failures are the server's or the connection's, not the document's: as they were.
  auto unknown = run_command(kClient + " --target " + server->target() + " --model nosuch " + doc(0) + " 2>&1");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_EQ(unknown.out.find("(read from"), std::string::npos) << unknown.out;
}

// Output that cannot be written (a full disk: /dev/full) fails the run, said on stderr; it exited 0 with the
// summary, the model list or the load report lost.
TEST_F(EndToEnd, OutputThatCannotBeWrittenFailsTheRun) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  auto server = start();
  const std::string target = kClient + " --target " + server->target() + " ";
  const std::string client = target + "--model tiny --max-new-tokens 4 ";
  // A batch's lines past stdio's 4 KiB buffer: the write fails while the client still makes calls, whose
  // errno replaced the failure's by the exit check ("Input/output error").
  std::string batch = target + "--model tiny --max-new-tokens 16 --min-new-tokens 16 --batch";
  for (int i = 0; i < 200; ++i) batch += " " + doc(i % 4);
  for (const std::string& args :
       std::vector<std::string>{client + doc(0), client + "--stream " + doc(0), target + "--list-models",
                                client + "--load --requests 2 " + doc(0),
                                client + "--load --requests 2 --json " + doc(0), client + "--help", batch}) {
    auto r = run_command(args + " 2>&1 >/dev/full");
    EXPECT_EQ(r.exit_code, 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find("srformer-client: cannot write to stdout: No space left on device"), std::string::npos)
        << args << ": " << r.out;
  }
  auto written = run_command(client + doc(0) + " 2>&1");
  EXPECT_EQ(written.exit_code, 0) << written.out;
  EXPECT_EQ(written.out.find("cannot write"), std::string::npos) << written.out;
}

// So do the server's --help and the offline tool's texts: they exited 0 with the text lost, silently.
TEST_F(EndToEnd, ServerAndToolOutputThatCannotBeWrittenFails) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string summarize = kTool + " summarize --model " + model_dir_.string() + " --max-new-tokens 4 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {kServer + " --help", "srformer-server"},
      {kTool + " --help", "srformer"},
      {kTool + " inspect --help", "srformer"},
      {kTool + " eval --help", "srformer"},
      {kTool + " inspect " + model_dir_.string() + " --input-tokens 40 --new-tokens 4", "srformer"},
      {summarize + doc(0), "srformer"},
      {summarize + "--stream " + doc(0), "srformer"},
      {summarize + "--json " + doc(0), "srformer"},
  };
  for (const auto& [args, program] : cases) {
    auto r = run_command(args + " 2>&1 >/dev/full");
    EXPECT_EQ(r.exit_code, 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find(program + ": cannot write to stdout: No space left on device"), std::string::npos)
        << args << ": " << r.out;
  }
  // Output that arrives raises nothing (the other tests run these commands too).
  auto written = run_command(summarize + "--stream " + doc(0) + " 2>&1 >/dev/null");
  EXPECT_EQ(written.exit_code, 0) << written.out;
  EXPECT_EQ(written.out.find("cannot write"), std::string::npos) << written.out;
}

// `srformer summarize --stream` stops at the first streamed piece that does not reach stdout: it went on
// generating every token, nowhere to go (srformer-client cancels its call there). A run of 4096 tokens
// whose first write fails costs about what a run of one token costs, far from the whole run.
TEST_F(EndToEnd, ToolStreamStopsGeneratingWhenStdoutFails) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string summarize = kTool + " summarize --model " + model_dir_.string() + " --stream ";
  const auto failed =
      run_command(summarize + "--min-new-tokens 4096 --max-new-tokens 4096 " + doc(0) + " 2>&1 >/dev/full");
  EXPECT_EQ(failed.exit_code, 1) << failed.out;
  EXPECT_NE(failed.out.find("srformer: cannot write to stdout: No space left on device"), std::string::npos)
      << failed.out;
  // The first piece of text fails its write; a few tokens may give no text before it.
  static const std::regex kStopped("summarize stopped after ([0-9]+) generated tokens");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(failed.out, m, kStopped)) << failed.out;
  EXPECT_LT(std::stoll(m[1].str()), 64) << failed.out;
}

// Polls `probe` every 100 ms until it returns true or `timeout` passes.
template <typename Probe>
bool eventually(Probe probe, std::chrono::seconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (probe()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return probe();
}

TEST_F(EndToEnd, SigtermDrainsInFlightRequestsAndExitsZero) {
  auto server = start({"--shutdown-grace-ms", "20000", "--max-batch-rows", "2", "--max-beams", "2"});
  // Enough queued work that some is in flight when the signal arrives, and not much more: each request sent
  // once the server is gone fails UNAVAILABLE and its worker backs off, up to 1 s (400 requests took ~45 s).
  constexpr int kRequests = 48;
  const std::string cmd = kClient + " --target " + server->target() + " --load --concurrency 8 --requests " +
                          std::to_string(kRequests) + " --json --max-new-tokens 64 --min-new-tokens 64 " + doc(3);
  auto load = std::async(std::launch::async, [&] { return run_command(cmd); });
  // Signalled once a request has finished: the load is surely running (a fixed wait was too short for
  // a slow-starting client, e.g. under ASan, which then found the port closed).
  ASSERT_TRUE(
      eventually([&] { return server->log().find("SummarizeStream model=tiny in=") != std::string::npos; }, 60s))
      << server->log();
  server->signal(SIGTERM);
  EXPECT_EQ(server->wait(60s), 0) << server->log();
  const auto r = load.get();
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["requests_ok"].get<int>() + j["requests_failed"].get<int>(), kRequests);
  EXPECT_GT(j["requests_ok"].get<int>(), 0) << r.out;
  for (const auto& [msg, n] : j["errors"].items()) {
    // gRPC core itself cancels calls that reach the transport as Shutdown begins and were never
    // handed to a handler (grpc/grpc#41785): status CANCELLED with the bare message "CANCELLED",
    // never ours ("the request was cancelled"). At most one per concurrent client stream.
    if (msg == "CANCELLED CANCELLED") {
      EXPECT_LE(n.get<int>(), 8) << "more calls cancelled by gRPC's shutdown than streams were open";
      continue;
    }
    EXPECT_EQ(msg.rfind("UNAVAILABLE ", 0), 0u) << "only UNAVAILABLE is acceptable after SIGTERM: " << msg;
  }
  const std::string log = server->log();
  EXPECT_NE(log.find("received SIGTERM"), std::string::npos);
  EXPECT_NE(log.find("stopped"), std::string::npos);
  // The health check now fails (nothing listens).
  EXPECT_NE(run_command(kClient + " --target " + server->target() + " --health --deadline-ms 500").exit_code, 0);
}

// A hang-up (the terminal that started the server closed) drains and exits 0 as SIGTERM does; it killed
// the server at once (exit 129), with nothing in the log.
TEST_F(EndToEnd, SighupDrainsAndExitsZero) {
  auto server = start();
  server->signal(SIGHUP);
  EXPECT_EQ(server->wait(60s), 0) << server->log();
  EXPECT_NE(server->log().find("received SIGHUP; draining"), std::string::npos) << server->log();
}

int free_port();  // below

// A server forked with standard streams the fixture's start() cannot give it (start() owns its stderr):
// `in_child` arranges them between fork and exec.
struct ForkedServer {
  pid_t pid = -1;
  int status = 0;
  std::string address;
  int metrics_port = 0;
  bool reaped = false;

  ForkedServer(const fs::path& model_dir, std::string listen, const std::function<void()>& in_child)
      : address(std::move(listen)), metrics_port(free_port()) {
    const std::string model = "tiny=" + model_dir.string();
    const std::string metrics_listen = "127.0.0.1:" + std::to_string(metrics_port);
    pid = fork();
    if (pid == 0) {
      in_child();
      execl(kServer.c_str(), kServer.c_str(), "--model", model.c_str(), "--listen", address.c_str(), "--metrics-listen",
            metrics_listen.c_str(), "--warm-up", "false", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ForkedServer(const ForkedServer&) = delete;
  ForkedServer& operator=(const ForkedServer&) = delete;
  ~ForkedServer() {  // a test that failed part-way leaves no server behind
    if (pid > 0 && !reaped) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  bool exited() { return reaped = reaped || waitpid(pid, &status, WNOHANG) == pid; }
  std::string how_it_ended() const {
    return (WIFSIGNALED(status) ? "died by signal " : "exited ") +
           std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
  std::string health_command() const { return kClient + " --target " + address + " --health --deadline-ms 2000 2>&1"; }
  // "" once its health check answers (within 60 s); else why.
  std::string wait_until_serving() {
    for (int i = 0; i < 600; ++i) {
      if (exited()) return "the server never served; it " + how_it_ended();
      if (run_command(health_command()).exit_code == 0) return "";
      std::this_thread::sleep_for(100ms);
    }
    return "the server never served within 60 s";
  }
  // "" when SIGTERM ends it with status 0 (within 60 s); else how it ended.
  std::string stop() {
    kill(pid, SIGTERM);
    for (int i = 0; i < 600; ++i) {
      if (exited()) return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "" : how_it_ended();
      std::this_thread::sleep_for(100ms);
    }
    return "the server did not stop within 60 s of SIGTERM";
  }
};

// The server's log is its stderr: where that is a pipe whose reader has gone (`srformer-server ... 2>&1 | head`,
// a log shipper restarted), its next line killed it by SIGPIPE (exit 141), while it started or while it served.
// The lines lost so are counted in srformer_log_lines_dropped_total.
TEST_F(EndToEnd, TheServerServesOnWhenItsLogPipeHasNoReader) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ForkedServer forked(model_dir_, "unix:" + (work_ / "log_pipe.sock").string(), [&] {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    signal(SIGPIPE, SIG_DFL);  // as a shell starts it, whatever this test process does with SIGPIPE
  });
  ASSERT_GT(forked.pid, 0);
  close(fds[0]);  // no reader from the start: every line the server logs meets a closed pipe
  close(fds[1]);
  ASSERT_EQ(forked.wait_until_serving(), "");
  // Each request logs a line or more.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(
        run_command(kClient + " --target " + forked.address + " --model tiny --max-new-tokens 4 " + doc(1)).exit_code,
        0);
  }
  EXPECT_EQ(run_command(forked.health_command()).exit_code, 0);
  // The lines lost are counted (the start's and the requests'): nothing said they were lost before.
  namespace scrape = server::testing;
  const std::string scraped = scrape::http_body(scrape::http_get(forked.metrics_port, "/metrics"));
  EXPECT_GE(scrape::sample(scraped, "srformer_log_lines_dropped_total", {}).value_or(0), 5) << scraped;
  EXPECT_EQ(forked.stop(), "");  // its drain logs too
}

// Started with its standard streams closed (`2>&-`, `<&- >&- 2>&-`, a supervisor that closes them), the server
// held gRPC's descriptors under those numbers, opened by libgrpc's initializer before main and by the server as
// it started (its wakeup eventfds, its epoll descriptor, a socket), and its log went into whichever took fd 2. A
// closed one stays closed now: the log goes nowhere (its lines counted as dropped) and the server serves on.
TEST_F(EndToEnd, AServerStartedWithItsStandardStreamsClosedLogsIntoNoOtherFile) {
  ForkedServer forked(model_dir_, "unix:" + (work_ / "closed_streams.sock").string(), [] {
    for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) close(fd);
  });
  ASSERT_GT(forked.pid, 0);
  ASSERT_EQ(forked.wait_until_serving(), "");
  auto summary = run_command(kClient + " --target " + forked.address + " --model tiny --max-new-tokens 4 " + doc(1));
  EXPECT_EQ(summary.exit_code, 0) << summary.out;
  EXPECT_FALSE(summary.out.empty());
  // Each of them /dev/null, held so that no descriptor of gRPC's (nor a client's socket) takes its number.
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    EXPECT_EQ(fs::read_symlink("/proc/" + std::to_string(forked.pid) + "/fd/" + std::to_string(fd)).string(),
              "/dev/null")
        << "fd " << fd;
  }
  // The log went nowhere, counted as lines lost (the start's and the request's).
  namespace scrape = server::testing;
  const std::string scraped = scrape::http_body(scrape::http_get(forked.metrics_port, "/metrics"));
  EXPECT_GE(scrape::sample(scraped, "srformer_log_lines_dropped_total", {}).value_or(0), 3) << scraped;
  EXPECT_EQ(forked.stop(), "");
}

// "stopped" is the log's last line: the engines' closing figures (decode steps, encoder calls) came after it.
TEST_F(EndToEnd, StoppedIsTheLastLineOfTheLog) {
  auto server = start();
  server->signal(SIGTERM);
  EXPECT_EQ(server->wait(60s), 0) << server->log();
  const std::string log = server->log();
  const auto last = log.rfind('\n', log.size() - 2);
  EXPECT_NE(log.find("decode steps"), std::string::npos) << log;
  EXPECT_NE(log.substr(last == std::string::npos ? 0 : last + 1).find(" stopped"), std::string::npos) << log;
}

// SIGHUP ignored when the server starts (nohup, so that it outlives its terminal) and SIGINT ignored (a shell
// script's background job: the script's Ctrl-C is not its own) stay ignored; the server drained on them all
// the same, so `nohup srformer-server ... &` stopped when its terminal closed.
TEST_F(EndToEnd, AHangUpOrInterruptIgnoredOnEntryStaysIgnored) {
  const std::string log = (work_ / "nohup.log").string();
  // All three at once: sigwait takes the lowest pending first, SIGHUP, where it is not ignored.
  const auto r = run_command("bash -c 'trap \"\" HUP INT; " + kServer + " --model tiny=" + model_dir_.string() +
                             " --listen 127.0.0.1:0 --metrics-listen \"\" --warm-up false > " + log +
                             " 2>&1 & pid=$!; for i in $(seq 600); do grep -q \"listening on\" " + log +
                             " && break; sleep 0.1; done; kill -HUP $pid; kill -INT $pid; kill -TERM $pid; wait $pid; "
                             "echo rc=$?'");
  const std::string text = read(log);
  EXPECT_EQ(r.out, "rc=0\n") << text;
  EXPECT_NE(text.find("received SIGTERM; draining"), std::string::npos) << text;
  EXPECT_EQ(text.find("received SIGHUP"), std::string::npos) << text;
  EXPECT_EQ(text.find("received SIGINT"), std::string::npos) << text;
}

// The server re-executes itself through /proc/self/exe for its OpenMP policy (model/openmp_env.h), which named
// the process "exe": `pgrep srformer-server` found nothing, and ps, top and `ss -p` said exe.
TEST_F(EndToEnd, TheServerKeepsItsNameThroughItsReexec) {
  auto server = start();
  // What pgrep, ps and top read.
  EXPECT_EQ(read("/proc/" + std::to_string(server->pid()) + "/comm"), "srformer-server\n");
}

// /proc/PID/environ: the environment the process's image was executed with, which libgomp read as it loaded.
std::vector<std::string> exec_environment(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::vector<std::string> vars;
  for (std::string var; std::getline(in, var, '\0');) vars.push_back(var);
  return vars;
}

bool holds(const std::vector<std::string>& vars, const std::string& var) {
  return std::find(vars.begin(), vars.end(), var) != vars.end();
}

// The server's OpenMP threads sleep when they wait (model/openmp_env.h): its image runs with
// OMP_WAIT_POLICY=PASSIVE. Spinning (GOMP_SPINCOUNT=10000, the default before) cost 1.6-12x the
// tokens/s on busy shared cores (docs/BENCHMARKS.md, session 56). An operator's own setting is kept.
TEST_F(EndToEnd, TheServerWaitsPassivelyUnlessTheOperatorChoseAPolicy) {
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "SRFORMER_KEEP_OMP_POLICY"}) {
    if (std::getenv(name) != nullptr) GTEST_SKIP() << name << " is set in this test's environment";
  }
  {
    auto server = start();
    const auto vars = exec_environment(server->pid());
    EXPECT_TRUE(holds(vars, "OMP_WAIT_POLICY=PASSIVE")) << server->log();
    EXPECT_NE(server->log().find("OpenMP wait policy: passive"), std::string::npos) << server->log();
  }
  ::setenv("GOMP_SPINCOUNT", "10000", 1);
  auto server = start();
  ::unsetenv("GOMP_SPINCOUNT");
  const auto vars = exec_environment(server->pid());
  EXPECT_TRUE(holds(vars, "GOMP_SPINCOUNT=10000"));
  EXPECT_FALSE(
      std::any_of(vars.begin(), vars.end(), [](const std::string& v) { return v.rfind("OMP_WAIT_POLICY=", 0) == 0; }));
  EXPECT_NE(server->log().find("OpenMP wait policy: spin 10000, then sleep"), std::string::npos) << server->log();
}

// gRPC unlinks a Unix socket's file before it binds: a second start on a running server's socket cut that
// server off (its socket file gone), even a start that then failed to load its model.
TEST_F(EndToEnd, ASecondServerOnALiveUnixSocketIsRefusedAndTheFirstKeepsServing) {
  const auto socket = work_ / "live.sock";
  const std::string address = "unix:" + socket.string();
  auto first = start({"--listen", address});
  const std::string health = kClient + " --target " + address + " --health --deadline-ms 5000 2>&1";
  ASSERT_EQ(run_command(health).exit_code, 0);
  for (const std::string& model : {std::string("/nonexistent"), model_dir_.string()}) {
    const auto second = run_command(kServer + " --model other=" + model + " --listen " + address +
                                    " --metrics-listen '' --warm-up false 2>&1");
    EXPECT_EQ(second.exit_code, 1) << second.out;
    EXPECT_NE(second.out.find("a running process accepts connections on " + socket.string()), std::string::npos)
        << second.out;
    EXPECT_TRUE(fs::exists(socket));
    EXPECT_EQ(run_command(health).exit_code, 0) << "the first server was cut off";
  }
  // A stale socket (its server gone) is no obstacle.
  first->signal(SIGKILL);
  first->wait(30s);
  ASSERT_TRUE(fs::exists(socket)) << "the test needs a stale socket file";
  auto third = start({"--listen", address});
  EXPECT_EQ(run_command(health).exit_code, 0);
}

// Random requests (tests/e2e/random_requests.py: every option, valid and invalid values, unary and
// streaming, a few short deadlines) 32 at a time, then each determined one again alone and in partial_results
// batches of 8: only client errors with a message, streams that match their summaries, and bit for bit the
// same answer (or error code) alone and in a batch as among the others (until session 36 a document padded in its
// encode group got other last bits, so scores, log-probabilities and near-ties could depend on the batch).
TEST_F(EndToEnd, RandomRequestsGiveTheSameAnswersAmongOthersAsAlone) {
  if (run_command("/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null").exit_code != 0) {
    GTEST_SKIP() << "python3-grpcio / python3-protobuf not installed (deploy/setup-deps.sh)";
  }
  for (const bool bf16 : {false, true}) {
    if (bf16 && !kernels::cpu_bf16_available()) continue;  // the server refuses bf16 on this CPU
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto server = start({"--max-input-tokens", "300", "--max-beams", "4", "--dtype", bf16 ? "bf16" : "fp32"});
    auto r = run_command("/usr/bin/python3 " + std::string(SRFORMER_SOURCE_DIR) + "/tests/e2e/random_requests.py " +
                         server->target() + " tiny --requests 160 --concurrency 32 --seed " + (bf16 ? "2" : "1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_GE(j["codes"].value("OK", 0), 60) << "too few requests were valid to say much: " << r.out;
    EXPECT_GE(j["codes"].value("INVALID_ARGUMENT", 0), 10) << r.out;
    EXPECT_GE(j["replayed"].get<int>(), 100) << r.out;
    EXPECT_GE(j["batched"].get<int>(), 100) << "partial_results batches: " << r.out;
  }
}

// Both reflection versions: v1, which current tools ask for first, and v1alpha, which older ones use.
TEST_F(EndToEnd, PythonGrpcioClientThroughReflection) {
  if (run_command("/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null").exit_code != 0) {
    GTEST_SKIP() << "python3-grpcio / python3-protobuf not installed (deploy/setup-deps.sh)";
  }
  auto server = start();
  const auto ref = offline(model_dir_, read(doc(2)), 16, 1);
  for (const std::string version : {"v1", "v1alpha"}) {
    SCOPED_TRACE("grpc.reflection." + version);
    auto r = run_command("/usr/bin/python3 " + std::string(SRFORMER_SOURCE_DIR) +
                         "/tests/e2e/python_reflection_client.py " + server->target() + " " + doc(2) + " " + version);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    const auto services = j["services"].get<std::vector<std::string>>();
    for (const char* name : {"srformer.v1.Summarizer", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                             "grpc.reflection.v1alpha.ServerReflection"}) {
      EXPECT_NE(std::find(services.begin(), services.end(), name), services.end()) << name;
    }
    EXPECT_EQ(j["models"], nlohmann::json::array({"tiny"}));
    EXPECT_EQ(j["unary"]["token_ids"].get<std::vector<int64_t>>(), ref);
    EXPECT_EQ(j["stream"]["token_ids"].get<std::vector<int64_t>>(), ref);
    EXPECT_EQ(j["stream"]["text"], j["unary"]["summary"]);
    EXPECT_EQ(j["stream"]["final_summary"], j["unary"]["summary"]);
    EXPECT_EQ(j["whitespace_error"]["code"], "INVALID_ARGUMENT");
    // The health service it lists is described too, and called from what reflection said of it.
    EXPECT_EQ(j["health"], "SERVING");
  }
}

// The metrics port the server logged ("metrics on HOST:PORT/metrics"); 0 when absent.
int metrics_port(const ServerProcess& server) {
  std::smatch m;
  const std::string log = server.log();
  static const std::regex re("metrics on [^ ]*:([0-9]+)/metrics");
  return std::regex_search(log, m, re) ? std::stoi(m[1]) : 0;
}

// A free loopback port (bound, read, released).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : 0;
}

// A Summarizer that answers from canned texts and statuses, for what the real server with a tiny model cannot be
// made to do on demand (summaries with line breaks, a refusal of every stream as a server shutting down gives).
class CannedSummarizer final : public v1::Summarizer::Service {
 public:
  std::vector<std::string> summaries;             // SummarizeBatch's, in turn
  grpc::Status stream_status = grpc::Status::OK;  // SummarizeStream's
  std::atomic<int> streams{0};                    // SummarizeStream calls answered
  bool hang = false;                // every call answers nothing until it is cancelled (a server that stopped)
  int answer_streams = 0;           // with hang: the first this many SummarizeStream calls are answered all the same
  v1::SummarizeResponse unary;      // Summarize's
  int refuse_unary = 0;             // the first this many Summarize calls are refused, as a server shutting down does
  std::atomic<int> unary_calls{0};  // Summarize calls answered, refusals included
  std::vector<v1::SummarizeStreamResponse> stream_messages;  // SummarizeStream's, before its status

  grpc::Status Summarize(grpc::ServerContext* context, const v1::SummarizeRequest*,
                         v1::SummarizeResponse* response) override {
    if (unary_calls++ < refuse_unary) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down");
    while (hang && !context->IsCancelled()) std::this_thread::sleep_for(10ms);
    *response = unary;
    return grpc::Status::OK;
  }

  grpc::Status SummarizeBatch(grpc::ServerContext* context, const v1::SummarizeBatchRequest* request,
                              v1::SummarizeBatchResponse* response) override {
    while (hang && !context->IsCancelled()) std::this_thread::sleep_for(10ms);
    if (hang) return grpc::Status::CANCELLED;
    for (int i = 0; i < request->requests_size(); ++i)
      response->add_responses()->set_summary(summaries.at(static_cast<size_t>(i) % summaries.size()));
    return grpc::Status::OK;
  }
  grpc::Status SummarizeStream(grpc::ServerContext* context, const v1::SummarizeRequest*,
                               grpc::ServerWriter<v1::SummarizeStreamResponse>* writer) override {
    const int n = streams++;
    for (const auto& message : stream_messages) writer->Write(message);
    while (hang && n >= answer_streams && !context->IsCancelled()) std::this_thread::sleep_for(10ms);
    return stream_status;
  }
  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest*,
                          v1::ListModelsResponse*) override {
    while (hang && !context->IsCancelled()) std::this_thread::sleep_for(10ms);
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
  }
};

// `service` served on a port of 127.0.0.1; the port in `port`.
std::unique_ptr<grpc::Server> serve(grpc::Service& service, int& port) {
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  return builder.BuildAndStart();
}

// --batch prints a line per FILE: a summary with a line break spread over two lines, and the next FILE's
// summary was read from the line after the first. Its line breaks and backslashes are escaped now.
TEST_F(EndToEnd, BatchOutputKeepsALinePerFileWhenASummaryHasALineBreak) {
  CannedSummarizer canned;
  canned.summaries = {"first line\nsecond line", "a \\n and a\r\n", "plain"};
  int port = 0;
  const auto server = serve(canned, port);
  ASSERT_GT(port, 0);
  const std::string client = kClient + " --target 127.0.0.1:" + std::to_string(port) + " --batch ";
  const std::string files = doc(0) + " " + doc(1) + " " + doc(2);
  auto plain = run_command(client + files);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(plain.out, "first line\\nsecond line\na \\\\n and a\\r\\n\nplain\n");
  auto json = run_command(client + "--json " + files);
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(j[i]["summary"], canned.summaries[i]);
  server->Shutdown();
}

// --num-return-sequences prints the summary, then a line per further result: an alternative with a line break
// (a byte-level BPE model's "\n") spread over two lines, the second read as no alternative at all. Its line
// breaks are escaped now, as --batch's; the summary before them stays as it is.
TEST_F(EndToEnd, EachAlternativeIsOneLine) {
  CannedSummarizer canned;
  canned.unary.set_summary("best\nsummary");
  auto* second = canned.unary.add_alternatives();
  second->set_summary("second\none \\ here");
  second->set_score(-0.5f);
  auto* third = canned.unary.add_alternatives();
  third->set_summary("third\r");
  third->set_score(-1.25f);
  v1::SummarizeStreamResponse token, final;
  token.mutable_token()->set_text("best\nsummary");
  *final.mutable_final() = canned.unary;
  canned.stream_messages = {token, final};
  int port = 0;
  const auto server = serve(canned, port);
  ASSERT_GT(port, 0);
  const std::string client = kClient + " --target 127.0.0.1:" + std::to_string(port) + " --num-return-sequences 3 ";
  const std::string expected =
      "best\nsummary\n[alternative 2, score -0.5] second\\none \\\\ here\n[alternative 3, score -1.25] third\\r\n";
  auto unary = run_command(client + doc(0));
  ASSERT_EQ(unary.exit_code, 0) << unary.out;
  EXPECT_EQ(unary.out, expected);
  auto stream = run_command(client + "--stream " + doc(0));
  ASSERT_EQ(stream.exit_code, 0) << stream.out;
  EXPECT_EQ(stream.out, expected);
  auto json = run_command(client + "--json " + doc(0));
  ASSERT_EQ(json.exit_code, 0) << json.out;
  EXPECT_EQ(nlohmann::json::parse(json.out)["alternatives"][0]["summary"], "second\none \\ here");
  server->Shutdown();
}

// --retries did nothing for a request past what gRPC keeps to send again (256 KiB by default): a document of a
// few hundred KB refused by a server shutting down (or with a full queue) failed at once, the flag ignored. It is
// retried now as a short one is.
TEST_F(EndToEnd, ALongDocumentIsRetriedAsAShortOneIs) {
  const auto long_doc = work_ / "300KB.txt";
  std::ofstream(long_doc) << std::string(300'000, 'a');
  for (const std::string& file : {doc(0), long_doc.string()}) {
    SCOPED_TRACE(file);
    CannedSummarizer canned;
    canned.refuse_unary = 2;
    canned.unary.set_summary("retried");
    int port = 0;
    const auto server = serve(canned, port);
    ASSERT_GT(port, 0);
    auto r = run_command(kClient + " --target 127.0.0.1:" + std::to_string(port) + " --retries 2 " + file + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out, "retried\n");
    EXPECT_EQ(canned.unary_calls.load(), 3);
    server->Shutdown();
  }
  fs::remove(long_doc);
}

// --retries sends a stream again only until its first token has come (docs/API.md, "Retries"): one refused
// before any token (a server shutting down) is retried, one that failed after a token is not, and no token is
// printed twice.
TEST_F(EndToEnd, RetriesSendAStreamAgainOnlyBeforeItsFirstToken) {
  for (const bool token_first : {false, true}) {
    SCOPED_TRACE(token_first ? "after a token" : "before any token");
    CannedSummarizer canned;
    canned.stream_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down");
    if (token_first) {
      v1::SummarizeStreamResponse token;
      token.mutable_token()->set_text("once");
      canned.stream_messages = {token};
    }
    int port = 0;
    const auto server = serve(canned, port);
    ASSERT_GT(port, 0);
    auto r = run_command(kClient + " --target 127.0.0.1:" + std::to_string(port) + " --retries 2 --stream " + doc(0) +
                         " 2>/dev/null");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, token_first ? "once\n" : "");
    EXPECT_EQ(canned.streams.load(), token_first ? 1 : 3);
    server->Shutdown();
  }
}

// Started with stdin or stdout closed (`<&-`, `>&-`), the client read its document from, or wrote its summary
// to, whatever libgrpc opened first under that number: its wakeup eventfd as stdin ("cannot read stdin: Resource
// temporarily unavailable", or eight bytes of its counter sent as the document), its epoll descriptor as stdout
// ("cannot write to stdout: Invalid argument"). A closed one is closed now: the document cannot be read, the
// output not written, each said as such and no call made for a document never read.
TEST_F(EndToEnd, AClosedStdinOrStdoutIsNoOtherFile) {
  CannedSummarizer canned;
  canned.unary.set_summary("canned");
  canned.summaries = {"canned"};
  v1::SummarizeStreamResponse token;
  token.mutable_token()->set_text("canned");
  canned.stream_messages = {token};
  int port = 0;
  const auto server = serve(canned, port);
  ASSERT_GT(port, 0);
  const std::string client = kClient + " --target 127.0.0.1:" + std::to_string(port) + " ";
  for (const std::string& call : {std::string(""), std::string("--stream "), std::string("--batch ")}) {
    SCOPED_TRACE(call);
    auto r = run_command(client + call + "- 2>&1 <&-");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "srformer-client: cannot read stdin: Bad file descriptor\n");
    auto written = run_command(client + call + doc(0) + " 2>&1 >&-");
    EXPECT_EQ(written.exit_code, 1);
    EXPECT_EQ(written.out, "srformer-client: cannot write to stdout: Bad file descriptor\n");
  }
  EXPECT_EQ(canned.unary_calls.load(), 1);  // the unary call with its FILE, not one for the closed stdin
  auto json = run_command(client + "--json 2>/dev/null <&-");
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_EQ(json.out, "{\"error\":{\"code\":null,\"message\":\"cannot read stdin: Bad file descriptor\"}}\n");
  server->Shutdown();
}

// A server that refuses every stream with UNAVAILABLE, as one shutting down (or a proxy without a backend)
// does, for the load generator's tests of its backoff.
struct UnavailableServer {
  CannedSummarizer canned;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  UnavailableServer() {
    canned.stream_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down");
    server = serve(canned, port);
  }
  ~UnavailableServer() {
    if (server) server->Shutdown();
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(port); }
};

// The load generator against a target that refuses every call with UNAVAILABLE waits between attempts,
// doubling from 50 ms to 1 s: it made ~190,000 attempts a second before.
TEST_F(EndToEnd, TheLoadGeneratorBacksOffFromATargetThatRefusesEveryCall) {
  const UnavailableServer unavailable;
  ASSERT_GT(unavailable.port, 0);
  auto r = run_command(kClient + " --target " + unavailable.target() + " --load --concurrency 2 --duration 2 --json " +
                       doc(0) + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 1) << r.out;  // every request failed
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["requests_ok"], 0);
  EXPECT_GT(report["requests_failed"].get<int64_t>(), 0);
  EXPECT_EQ(report["requests_failed"], unavailable.canned.streams.load());
  EXPECT_EQ(report["stopped_early"], false) << "UNAVAILABLE may pass";
  // About 6 per worker in 2 s with the backoff (50+100+200+400+800 ms, then the end); thousands without.
  EXPECT_LT(report["requests_failed"].get<int64_t>(), 100) << r.out;
}

// A target that refuses the connection (here: nothing listens) fails the run at once, with no report: the run
// used up its --requests or --duration (each stream backing off as from a server shutting down) and reported
// them all as UNAVAILABLE.
TEST_F(EndToEnd, TheLoadGeneratorFailsAtOnceWhenItCannotConnect) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string target = "127.0.0.1:" + std::to_string(port);
  const std::string errors = (work_ / "connect-errors.txt").string();
  auto r = run_command(kClient + " --target " + target + " --load --concurrency 2 --requests 6 --json " + doc(0) +
                       " 2>" + errors);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out, "") << "no report of a run that did not start";
  const std::string said = read(errors);
  EXPECT_EQ(said.rfind("srformer-client: cannot connect to " + target + ": UNAVAILABLE: ", 0), 0u) << said;
  EXPECT_NE(said.find("Connection refused"), std::string::npos) << said;
}

// A FILE that cannot be read is told before the connection check: it was told only after it, which to a target
// that does not answer took 10 s, and to one that refuses said "cannot connect" and nothing of the FILE.
TEST_F(EndToEnd, TheLoadGeneratorNamesAFileItCannotReadBeforeConnecting) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string missing = (work_ / "no-such-file.txt").string();
  auto r = run_command(kClient + " --target 127.0.0.1:" + std::to_string(port) + " --load --requests 1 " + doc(0) +
                       " " + missing + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out, "srformer-client: cannot read '" + missing + "': No such file or directory\n");
}

// While no request has succeeded, a run whose every FILE was refused with an error that sending it again does
// not change stops: an unknown --model went on at full speed, 2,000 refusals a second, to the end of the run.
// A FILE refused so beside one that succeeds is sent on.
TEST_F(EndToEnd, TheLoadGeneratorStopsWhenEveryRequestIsRefusedForGood) {
  auto server = start();
  const std::string client = kClient + " --target " + server->target() + " --load --concurrency 2 ";
  auto unknown = run_command(client + "--json --requests 1000 --model nope " + doc(0) + " 2>/dev/null");
  EXPECT_EQ(unknown.exit_code, 1) << unknown.out;
  const auto u = nlohmann::json::parse(unknown.out);
  EXPECT_EQ(u["stopped_early"], true) << unknown.out;
  EXPECT_EQ(u["requests_ok"], 0);
  // The first refusal stops the run; the other stream has at most one request in flight then.
  EXPECT_GE(u["requests_failed"].get<int64_t>(), 1) << unknown.out;
  EXPECT_LE(u["requests_failed"].get<int64_t>(), 2) << unknown.out;
  ASSERT_EQ(u["errors"].size(), 1u) << unknown.out;
  EXPECT_EQ(u["errors"].begin().key().rfind("NOT_FOUND unknown model 'nope'", 0), 0u) << unknown.out;
  // Options out of range, two FILEs: once both are refused.
  auto options = run_command(client + "--json --duration 5 --num-beams 99 " + doc(0) + " " + doc(1) + " 2>/dev/null");
  EXPECT_EQ(options.exit_code, 1) << options.out;
  const auto o = nlohmann::json::parse(options.out);
  EXPECT_EQ(o["stopped_early"], true) << options.out;
  EXPECT_EQ(o["errors"].begin().key().rfind("INVALID_ARGUMENT ", 0), 0u) << options.out;
  auto text = run_command(client + "--requests 1000 --model nope " + doc(0));
  EXPECT_EQ(text.exit_code, 1) << text.out;
  EXPECT_NE(text.out.find("; stopped early: every FILE was refused with an error that sending it again does not "
                          "change\n"),
            std::string::npos)
      << text.out;
  // A blank FILE is refused for good, but the other one succeeds: the run goes to its end.
  const std::string blank = (work_ / "load-blank.txt").string();
  std::ofstream(blank) << "   ";
  auto mixed = run_command(client + "--json --requests 6 --max-new-tokens 2 " + doc(0) + " " + blank + " 2>/dev/null");
  EXPECT_EQ(mixed.exit_code, 1) << mixed.out;
  const auto m = nlohmann::json::parse(mixed.out);
  EXPECT_EQ(m["stopped_early"], false) << mixed.out;
  EXPECT_EQ(m["requests_ok"], 3) << mixed.out;
  EXPECT_EQ(m["requests_failed"], 3) << mixed.out;
  // Its errors name it: "document contains only whitespace" alone left the mix's FILEs to be tried one by one.
  ASSERT_EQ(m["errors"].size(), 1u) << mixed.out;
  EXPECT_EQ(m["errors"].begin().key(),
            "INVALID_ARGUMENT document contains only whitespace; send the text to summarize (read from " + blank + ")")
      << mixed.out;
}

// A run whose every request met its --deadline-ms (a server that stopped answering, or one too slow for the
// deadline) went on to the end of --requests: 1000 requests of 200 ms on 2 streams took 100 s, to report
// 1000 DEADLINE_EXCEEDED. It stops once max(10, 2 x concurrency) requests have failed with the same code and
// none succeeded in between, and stderr says what to change.
TEST_F(EndToEnd, TheLoadGeneratorStopsWhenEveryRequestMeetsItsDeadline) {
  CannedSummarizer hanging;
  hanging.hang = true;
  int port = 0;
  const auto server = serve(hanging, port);
  ASSERT_GT(port, 0);
  const std::string errors = (work_ / "deadline-errors.txt").string();
  const std::string client = "timeout 30 " + kClient + " --target 127.0.0.1:" + std::to_string(port) +
                             " --load --concurrency 2 --requests 1000 --deadline-ms 200 " + doc(0);
  auto r = run_command(client + " --json 2>" + errors);
  ASSERT_EQ(r.exit_code, 1) << r.out;
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["stopped_early"], true) << r.out;
  EXPECT_EQ(report["stopped_because"], "10 requests failed with DEADLINE_EXCEEDED and none succeeded in between")
      << r.out;
  EXPECT_EQ(report["requests_ok"], 0) << r.out;
  // The tenth failure stops the run; the other stream has at most one request in flight then.
  EXPECT_GE(report["requests_failed"].get<int64_t>(), 10) << r.out;
  EXPECT_LE(report["requests_failed"].get<int64_t>(), 11) << r.out;
  EXPECT_LT(report["wall_s"].get<double>(), 10.0) << r.out;
  EXPECT_EQ(read(errors),
            "srformer-client: stopped the load: 10 requests failed with DEADLINE_EXCEEDED and none succeeded in "
            "between (each took its --deadline-ms 200: raise it, or lower --concurrency)\n");
  auto text = run_command(client + " 2>/dev/null");
  EXPECT_EQ(text.exit_code, 1) << text.out;
  EXPECT_NE(text.out.find("; stopped early: 10 requests failed with DEADLINE_EXCEEDED and none succeeded in "
                          "between\n"),
            std::string::npos)
      << text.out;
  // Without a deadline nothing fails: --duration bounds a --requests run in time, whichever comes first.
  auto bounded =
      run_command("timeout 30 " + kClient + " --target 127.0.0.1:" + std::to_string(port) +
                  " --load --concurrency 2 --requests 1000 --duration 1 --grace 0 --json " + doc(0) + " 2>/dev/null");
  EXPECT_EQ(bounded.exit_code, 1) << bounded.out;
  const auto b = nlohmann::json::parse(bounded.out);
  EXPECT_EQ(b["requests_cut"], 2) << bounded.out;
  EXPECT_EQ(b["stopped_because"], nullptr) << bounded.out;
  server->Shutdown();
}

// A target that is another gRPC server (a wrong port) answers UNIMPLEMENTED with no message: the health check
// said "srformer-client: health check failed: " and nothing more, a summary "srformer-client: UNIMPLEMENTED: ".
TEST_F(EndToEnd, ATargetThatIsNoSrformerServerIsNamed) {
  grpc::reflection::v1::ServerReflection::Service reflection;  // some other service: no Summarizer, no health
  grpc::ServerBuilder builder;
  builder.RegisterService(&reflection);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  const auto other = builder.BuildAndStart();
  ASSERT_GT(port, 0);
  const std::string target = "127.0.0.1:" + std::to_string(port);
  const std::string hint = " (the server at " + target + " does not serve this call: is it an srformer-server?)";
  auto health = run_command(kClient + " --target " + target + " --health 2>&1");
  EXPECT_EQ(health.exit_code, 1);
  EXPECT_EQ(health.out, "srformer-client: health check failed: UNIMPLEMENTED" + hint + "\n");
  auto summary = run_command(kClient + " --target " + target + " " + doc(0) + " 2>&1");
  EXPECT_EQ(summary.exit_code, 1);
  EXPECT_EQ(summary.out, "srformer-client: UNIMPLEMENTED" + hint + "\n");
  other->Shutdown();
}

// --health --json with no answer (nothing listening) printed nothing on stdout, its error on stderr only: a probe
// reading the JSON found no object to read. It says {"status": null, "error": ...} now, exit 1 as before.
TEST_F(EndToEnd, HealthInJsonSaysSoWhenNoAnswerComes) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  auto r = run_command(kClient + " --target 127.0.0.1:" + std::to_string(port) +
                       " --health --json --deadline-ms 3000 2>/dev/null");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  ASSERT_FALSE(r.out.empty());
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["status"].is_null()) << r.out;
  EXPECT_EQ(j["error"]["code"], "UNAVAILABLE") << r.out;
  EXPECT_NE(j["error"]["message"].get<std::string>().find("Connection refused"), std::string::npos) << r.out;
}

// A script reading --json read nothing on stdout when a summary, a whole --batch or --list-models failed (only
// --health said so). Now each prints one value that says so: {"error": {"code", "message"}}, exit 1 as before.
TEST_F(EndToEnd, JsonSaysSoWhenTheCallFails) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string client = kClient + " --target 127.0.0.1:" + std::to_string(port) + " --json --deadline-ms 3000 ";
  for (const std::string& call : {doc(0), "--stream " + doc(0), "--batch " + doc(0) + " " + doc(1),
                                  "--batch --partial " + doc(0), std::string("--list-models")}) {
    SCOPED_TRACE(call);
    auto r = run_command(client + call + " 2>/dev/null");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (!j.is_object()) {
      ADD_FAILURE() << "not one JSON object: " << r.out;
      continue;
    }
    // With --stream also the tokens that came before the failure: none here.
    const bool stream = call.rfind("--stream", 0) == 0;
    EXPECT_EQ(j.size(), stream ? 2u : 1u) << r.out;
    if (stream) {
      EXPECT_EQ(j["stream"], nlohmann::json::array()) << r.out;
    }
    EXPECT_EQ(j["error"]["code"], "UNAVAILABLE") << r.out;
    EXPECT_NE(j["error"]["message"].get<std::string>().find("Connection refused"), std::string::npos) << r.out;
  }
  // stderr says it as before
  auto r = run_command(client + "--list-models 2>&1 >/dev/null");
  EXPECT_EQ(r.out.rfind("srformer-client: UNAVAILABLE: ", 0), 0u) << r.out;
}

// With --json, a FILE that could not be read (or a --ca file) printed nothing on stdout, its error on stderr only,
// where a failed call prints {"error": ...}: a script reading the JSON found nothing to read. It prints the
// error object too now, its code null (no call was made), exit 1 as before.
TEST_F(EndToEnd, JsonSaysSoWhenAFileCannotBeRead) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string missing = (work_ / "json-missing.txt").string();
  const std::string client = kClient + " --target 127.0.0.1:" + std::to_string(port) + " --json ";
  const std::string why = "cannot read '" + missing + "': No such file or directory";
  for (const std::string& call : {missing, "--stream " + missing, "--batch " + doc(0) + " " + missing,
                                  "--list-models --tls --ca " + missing, "--health --tls --ca " + missing}) {
    SCOPED_TRACE(call);
    auto r = run_command(client + call + " 2>/dev/null");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "not one JSON object: " << r.out;
    EXPECT_TRUE(j["error"]["code"].is_null()) << r.out;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(missing), std::string::npos) << r.out;
    // --health's object says its status, as when no answer comes.
    const bool health = call.rfind("--health", 0) == 0;
    EXPECT_EQ(j.size(), health ? 2u : 1u) << r.out;
    if (health) {
      EXPECT_TRUE(j.contains("status") && j["status"].is_null()) << r.out;
    }
  }
  auto r = run_command(client + missing + " 2>&1 >/dev/null");  // stderr says it as before
  EXPECT_EQ(r.out, "srformer-client: " + why + "\n");
  // --load prints a report or, for a run that did not start, nothing.
  auto load = run_command(client + "--load --requests 1 " + missing + " 2>/dev/null");
  EXPECT_EQ(load.exit_code, 1);
  EXPECT_EQ(load.out, "");
}

// A FILE without end (/dev/zero) or a mistaken huge one was read up to 2 GiB, and as much memory taken, before
// the client refused it; the server (4 MiB by default) would have refused far less. The client stops at its
// own bound now, 64 MiB unless --max-document-bytes says otherwise, and says which flag raises it. (Under
// 1.5 GB of address space the old read ended in std::bad_alloc instead.)
TEST_F(EndToEnd, TheClientRefusesADocumentPastItsBoundAsSoonAsItIsPast) {
#ifdef SRFORMER_SANITIZER
  GTEST_SKIP() << "a sanitizer's shadow memory does not fit under ulimit -v";
#endif
  const int port = free_port();  // nothing is sent
  ASSERT_GT(port, 0);
  const std::string client = "ulimit -v 1500000 && " + kClient + " --target 127.0.0.1:" + std::to_string(port) + " ";
  for (const std::string& call : {std::string(""), std::string("--stream "), std::string("--batch ")}) {
    auto r = run_command(client + call + "/dev/zero 2>&1");
    EXPECT_EQ(r.exit_code, 1) << call;
    EXPECT_EQ(r.out,
              "srformer-client: cannot read '/dev/zero': it holds more than 67108864 bytes, the most one input may "
              "have (--max-document-bytes raises it)\n")
        << call;
  }
  auto load = run_command(client + "--load --requests 1 " + doc(0) + " /dev/zero 2>&1");
  EXPECT_EQ(load.exit_code, 1);
  EXPECT_NE(load.out.find("cannot read '/dev/zero': it holds more than 67108864 bytes"), std::string::npos) << load.out;
  const auto size = read(doc(0)).size();
  auto small = run_command(client + "--max-document-bytes " + std::to_string(size - 1) + " " + doc(0) + " 2>&1");
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_EQ(small.out, "srformer-client: cannot read '" + doc(0) + "': it holds more than " + std::to_string(size - 1) +
                           " bytes, the most one input may have (--max-document-bytes raises it)\n");
}

// --max-document-bytes bounds each FILE, not a batch of them: 33 FILEs of 64 MiB were read, copied into one
// message (4 GB of memory) and then aborted the client ("assertion failed: serializer_(msg_).ok()": protobuf
// serializes no message past 2 GiB - 1). They are refused before they are copied, saying what to do.
TEST_F(EndToEnd, ABatchPastWhatGrpcCarriesIsRefusedBeforeItIsSent) {
#ifdef SRFORMER_SANITIZER
  GTEST_SKIP() << "a sanitizer's shadow memory does not fit under ulimit -v";
#endif
  const int port = free_port();  // nothing is sent
  ASSERT_GT(port, 0);
  const auto big = work_ / "64MiB.txt";
  std::ofstream(big) << std::string(std::size_t{64} << 20, 'a');
  std::string files;
  for (int i = 0; i < 33; ++i) files += " " + big.string();  // read once, sent 33 times
  auto r = run_command("ulimit -v 1500000 && " + kClient + " --target 127.0.0.1:" + std::to_string(port) + " --batch" +
                       files + " 2>&1");
  fs::remove(big);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out,
            "srformer-client: the 33 FILEs of --batch come to 2214592512 bytes, more than 2147483647, the largest "
            "message gRPC carries; send them in several --batch calls\n");
}

// --stream --json with a stream that failed partway (a deadline mid-summary, a server that went away) printed
// only {"error": ...}: the tokens already received were lost. The error object carries them as "stream", as
// a summary's does; the text output keeps printing them before its line break.
TEST_F(EndToEnd, StreamJsonFailingPartwayKeepsTheTokensReceived) {
  CannedSummarizer canned;
  for (const std::string text : {"two", " tokens"}) {
    v1::SummarizeStreamResponse token;
    token.mutable_token()->set_text(text);
    token.mutable_token()->set_token_id(static_cast<int32_t>(text.size()));
    canned.stream_messages.push_back(token);
  }
  canned.stream_status = grpc::Status(grpc::StatusCode::INTERNAL, "the model failed");
  int port = 0;
  const auto server = serve(canned, port);
  ASSERT_GT(port, 0);
  const std::string client = kClient + " --target 127.0.0.1:" + std::to_string(port) + " --stream ";
  auto json = run_command(client + "--json " + doc(0) + " 2>/dev/null");
  EXPECT_EQ(json.exit_code, 1) << json.out;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["error"]["code"], "INTERNAL") << json.out;
  EXPECT_EQ(j["error"]["message"], "the model failed") << json.out;
  ASSERT_EQ(j["stream"].size(), 2u) << json.out;
  EXPECT_EQ(j["stream"][0]["text"], "two");
  EXPECT_EQ(j["stream"][1]["text"], " tokens");
  EXPECT_EQ(j["stream"][1]["token_id"], 7);
  auto text = run_command(client + doc(0) + " 2>&1");
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_EQ(text.out, "two tokens\nsrformer-client: INTERNAL: the model failed\n");
  server->Shutdown();
}

// A deadline that passed said "DEADLINE_EXCEEDED: Deadline Exceeded" alike of a target that never connected
// (here: a socket that listens and never answers, as a wrong port behind a firewall that drops) and of a
// server that was slow, which a longer --deadline-ms helps; --health, with its 3 s unless --deadline-ms, said
// nothing of the wait either. The hint tells them apart.
TEST_F(EndToEnd, ADeadlineSaysWhetherTheTargetEverConnected) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ASSERT_EQ(listen(fd, 4), 0);  // connections complete in the kernel; nothing ever answers them
  const std::string silent = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  const std::string never =
      " (no connection to " + silent + " came up within 500 ms: is the server up at that address?)\n";
  const std::string client = kClient + " --target " + silent + " --deadline-ms 500 ";
  EXPECT_EQ(run_command(client + doc(0) + " 2>&1").out,
            "srformer-client: DEADLINE_EXCEEDED: Deadline Exceeded" + never);
  EXPECT_EQ(run_command(client + "--list-models 2>&1").out,
            "srformer-client: DEADLINE_EXCEEDED: Deadline Exceeded" + never);
  const auto health = run_command(client + "--health 2>&1");
  EXPECT_EQ(health.exit_code, 1);
  EXPECT_EQ(health.out, "srformer-client: health check failed: DEADLINE_EXCEEDED: Deadline Exceeded" + never);
  close(fd);

  CannedSummarizer hanging;  // connects, then never finishes
  hanging.hang = true;
  int port = 0;
  const auto server = serve(hanging, port);
  ASSERT_GT(port, 0);
  const auto slow = run_command(kClient + " --target 127.0.0.1:" + std::to_string(port) +
                                " --deadline-ms 500 --stream " + doc(0) + " 2>&1");
  EXPECT_EQ(slow.exit_code, 1);
  EXPECT_EQ(slow.out,
            "srformer-client: DEADLINE_EXCEEDED: Deadline Exceeded (the server did not finish within 500 ms; "
            "--deadline-ms gives it longer)\n");
  server->Shutdown();
}

// Without --deadline-ms every call waits as long as its server takes: against one that accepted the call and
// never answered, the client (each of its modes) waited for ever without a word. After 10 s with nothing
// from the server it says so on stderr, once, and goes on waiting; with a deadline it says nothing of it. Only
// to a terminal: a script's stderr (a log, cron's mail) got the line for every long summary.
TEST_F(EndToEnd, ACallWithoutADeadlineSaysSoWhenNoAnswerComes) {
  if (run_command("command -v script >/dev/null").exit_code != 0) GTEST_SKIP() << "no script(1) to give a terminal";
  CannedSummarizer hanging;
  hanging.hang = true;
  int port = 0;
  const auto server = serve(hanging, port);
  ASSERT_GT(port, 0);
  const std::string target = "127.0.0.1:" + std::to_string(port);
  // The last with a deadline past the notice's 10 s: it ends the call instead, in its own words only.
  const std::vector<std::string> modes = {doc(0),
                                          "--stream " + doc(0),
                                          "--batch " + doc(0) + " " + doc(1),
                                          "--list-models",
                                          "--load --requests 3 --concurrency 2 " + doc(0),
                                          "--deadline-ms 11000 " + doc(0)};
  // All at once, each cut by timeout(1) after 12 s (the server has no health service: --load's connection
  // check has its answer, UNIMPLEMENTED, at once): on a terminal, script(1)'s, whose output is stderr's (with
  // the terminal's \r\n), and with stderr to a file.
  std::string command;
  const auto said = [&](size_t i, bool terminal) {
    return (work_ / ("silent-" + std::to_string(i) + (terminal ? "-tty" : "") + ".txt")).string();
  };
  for (size_t i = 0; i < modes.size(); ++i) {
    const std::string run = "timeout 12 " + kClient + " --target " + target + " " + modes[i] + " >/dev/null";
    command += "script -qec '" + run + "' /dev/null </dev/null >" + said(i, true) + " & ";
    command += run + " 2>" + said(i, false) + " & ";
  }
  run_command(command + "wait");
  const auto on_terminal = [](const std::string& line) { return line.substr(0, line.size() - 1) + "\r\n"; };
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(read(said(i, true)), on_terminal("srformer-client: no answer from " + target +
                                               " in 10 s; still waiting, as the call has no deadline (--deadline-ms "
                                               "N ends it after N ms; Ctrl-C ends it now)\n"))
        << modes[i];
  }
  EXPECT_EQ(read(said(4, true)),
            on_terminal("srformer-client: no request has finished and no token has come from " + target +
                        " in 10 s (2 in flight); still waiting, as the requests have no deadline (--deadline-ms N "
                        "bounds each; Ctrl-C ends the run with its report)\n"));
  const std::string deadline =
      "srformer-client: DEADLINE_EXCEEDED: Deadline Exceeded (the server did not finish within 11000 ms; "
      "--deadline-ms gives it longer)\n";
  EXPECT_EQ(read(said(5, true)), on_terminal(deadline));
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(read(said(i, false)), "") << modes[i];
  EXPECT_EQ(read(said(5, false)), deadline);
  server->Shutdown();
}

// A --concurrency the system cannot start threads for (a pids or memory limit; here 4096 stacks of 8 MiB in
// 3 GB of address space) ended in std::terminate, the started threads left joinable: "terminate called
// without an active exception", exit 134. Now the run fails with what to change.
TEST_F(EndToEnd, TheLoadGeneratorSaysSoWhenItCannotStartItsStreams) {
#ifdef SRFORMER_SANITIZER
  GTEST_SKIP() << "a sanitizer's shadow memory does not fit under ulimit -v";
#endif
  const UnavailableServer unavailable;  // a target to connect to
  ASSERT_GT(unavailable.port, 0);
  auto r = run_command("ulimit -s 8192 && ulimit -v 3000000 && " + kClient + " --target " + unavailable.target() +
                       " --load --concurrency 4096 --requests 4096 " + doc(0) + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out.rfind("srformer-client: cannot start --concurrency 4096 streams: the system refused thread ", 0), 0u)
      << r.out;
  EXPECT_NE(r.out.find("; lower --concurrency or raise the limit\n"), std::string::npos) << r.out;
}

// Ctrl-C ends a run with the report of what finished, exit 130; but a SIGINT ignored on entry (a shell
// script's background job: POSIX shells start them so, for the script's Ctrl-C is not theirs) stays ignored.
// The load generator set its own handler over it, and such a run ended early, "interrupted", exit 130.
TEST_F(EndToEnd, TheLoadGeneratorTakesCtrlCUnlessItIsIgnored) {
  if (run_command("env --default-signal=INT true").exit_code != 0) GTEST_SKIP() << "env without --default-signal";
  const UnavailableServer unavailable;
  ASSERT_GT(unavailable.port, 0);
  const std::string run = kClient + " --target " + unavailable.target() + " --load --duration 2 --json " + doc(0) +
                          " 2>/dev/null & pid=$!; sleep 1; kill -INT $pid; wait $pid";
  auto taken = run_command("env --default-signal=INT " + run);  // as from a terminal
  EXPECT_EQ(taken.exit_code, 130) << taken.out;
  EXPECT_EQ(nlohmann::json::parse(taken.out)["interrupted"], true) << taken.out;
  auto ignored = run_command("trap '' INT; " + run);
  EXPECT_EQ(ignored.exit_code, 1) << ignored.out;  // every request failed: UNAVAILABLE
  EXPECT_EQ(nlohmann::json::parse(ignored.out)["interrupted"], false) << ignored.out;
}

// After --duration the run waited for the calls in flight however long they took: a server that stopped
// answering held it for ever. They have --grace seconds now, then are cancelled and counted as cut.
TEST_F(EndToEnd, TheLoadGeneratorCutsCallsStillInFlightAfterItsDurationAndGrace) {
  CannedSummarizer hanging;
  hanging.hang = true;
  int port = 0;
  const auto server = serve(hanging, port);
  ASSERT_GT(port, 0);
  const std::string client = "timeout 60 " + kClient + " --target 127.0.0.1:" + std::to_string(port) +
                             " --load --concurrency 2 --duration 1 --grace 1 " + doc(0);
  auto r = run_command(client + " --json 2>/dev/null");
  ASSERT_EQ(r.exit_code, 1) << r.out;  // none succeeded
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["requests_cut"], 2) << r.out;
  EXPECT_EQ(report["requests_ok"], 0) << r.out;
  EXPECT_EQ(report["requests_failed"], 0) << r.out;
  EXPECT_GE(report["wall_s"].get<double>(), 2.0) << r.out;
  EXPECT_LT(report["wall_s"].get<double>(), 5.0) << r.out;
  auto text = run_command(client + " --grace 0 2>/dev/null");
  EXPECT_EQ(text.exit_code, 1) << text.out;
  EXPECT_NE(text.out.find("\ncut: 2 still in flight 0 s after the end of --duration, cancelled (--grace)\n"),
            std::string::npos)
      << text.out;
  server->Shutdown();
}

// srformer-client without a FILE reads stdin: from a terminal it waited without a word for text the user did
// not know to type, and `srformer-client --target HOST:PORT` looked hung. It says so on stderr now; a pipe's
// stdin, as scripts give it, gets no such line.
TEST_F(EndToEnd, ReadingTheDocumentFromATerminalSaysSo) {
  if (run_command("command -v script >/dev/null").exit_code != 0) GTEST_SKIP() << "no script(1) to give a terminal";
  CannedSummarizer canned;
  canned.unary.set_summary("canned summary");
  int port = 0;
  const auto server = serve(canned, port);
  ASSERT_GT(port, 0);
  const std::string client = kClient + " --target 127.0.0.1:" + std::to_string(port);
  // script(1) runs the client on a terminal, which takes the text typed and Ctrl-D (\004) as its end.
  const auto typed = run_command("printf 'some text\\n\\004' | timeout 20 script -qec '" + client + "' /dev/null");
  EXPECT_EQ(typed.exit_code, 0) << typed.out;
  EXPECT_NE(typed.out.find("srformer-client: reading the document from the terminal (stdin): type or paste it, "
                           "then Ctrl-D on a line of its own; or give a FILE (--help)"),
            std::string::npos)
      << typed.out;
  EXPECT_NE(typed.out.find("canned summary"), std::string::npos) << typed.out;
  const auto piped = run_command("printf 'some text' | " + client + " 2>&1");
  EXPECT_EQ(piped.exit_code, 0);
  EXPECT_EQ(piped.out, "canned summary\n");
  server->Shutdown();
}

// A request still in flight --grace seconds after the end of --duration is one the server did not finish in the
// time the run gave it: the run exited 0 all the same once another had succeeded, though its report counted
// requests_cut. That is exit 1 now, as a failed request is; with --grace 0, which asks for the calls in flight
// to be cut at the end, cuts are what was asked and the exit status stays 0.
TEST_F(EndToEnd, ALoadWhoseRequestsWereCutAfterTheGraceExitsOne) {
  CannedSummarizer slow;  // answers three streams, then stops answering
  slow.hang = true;
  slow.answer_streams = 3;
  v1::SummarizeStreamResponse final;
  final.mutable_final()->set_summary("done");
  slow.stream_messages = {final};
  int port = 0;
  const auto server = serve(slow, port);
  ASSERT_GT(port, 0);
  const std::string client = "timeout 30 " + kClient + " --target 127.0.0.1:" + std::to_string(port) +
                             " --load --concurrency 1 --duration 1 --json " + doc(0);
  for (const std::string grace : {"1", "0"}) {
    slow.streams = 0;
    auto r = run_command(client + " --grace " + grace + " 2>/dev/null");
    const auto report = nlohmann::json::parse(r.out);
    EXPECT_EQ(report["requests_ok"], 3) << r.out;
    EXPECT_EQ(report["requests_failed"], 0) << r.out;
    EXPECT_EQ(report["requests_cut"], 1) << r.out;
    EXPECT_EQ(r.exit_code, grace == "0" ? 0 : 1) << "--grace " << grace << ": " << r.out;
  }
  server->Shutdown();
}

// SIGTERM (timeout(1), a cancelled CI job, a stopped container) ended a run with no report at all: what it had
// measured was lost. It ends the run as Ctrl-C does now, the report printed, exit 143; ignored on entry, it
// stays ignored.
TEST_F(EndToEnd, TheLoadGeneratorReportsWhenTerminated) {
  if (run_command("env --default-signal=TERM true").exit_code != 0) GTEST_SKIP() << "env without --default-signal";
  const UnavailableServer unavailable;
  ASSERT_GT(unavailable.port, 0);
  const std::string run = kClient + " --target " + unavailable.target() + " --load --duration 2 --json " + doc(0) +
                          " 2>/dev/null & pid=$!; sleep 1; kill -TERM $pid; wait $pid";
  auto taken = run_command("env --default-signal=TERM sh -c '" + run + "'");
  EXPECT_EQ(taken.exit_code, 143) << taken.out;
  ASSERT_FALSE(taken.out.empty()) << "no report";
  EXPECT_EQ(nlohmann::json::parse(taken.out)["interrupted"], true) << taken.out;
  auto ignored = run_command("trap '' TERM; " + run);
  EXPECT_EQ(ignored.exit_code, 1) << ignored.out;  // every request failed: UNAVAILABLE
  EXPECT_EQ(nlohmann::json::parse(ignored.out)["interrupted"], false) << ignored.out;
}

// After the run's last request it waited its backoff (up to a second) before ending, and wall_s, the
// denominator of the report's rates, counted that wait. Seven refused requests in a row wait 50 + 100 + 200 +
// 400 + 800 + 1000 ms between them (2.55 s at least); a wait after the seventh would add 1000 ms more.
TEST_F(EndToEnd, TheLoadGeneratorEndsWithItsLastRequestNotAfterABackoff) {
  const UnavailableServer unavailable;
  ASSERT_GT(unavailable.port, 0);
  auto r = run_command(kClient + " --target " + unavailable.target() + " --load --concurrency 1 --requests 7 --json " +
                       doc(0) + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 1) << r.out;
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["requests_failed"], 7);
  const double wall_s = report["wall_s"].get<double>();
  EXPECT_GE(wall_s, 2.55) << "the backoffs between the requests";
  EXPECT_LT(wall_s, 3.55) << "a backoff after the last request";
}

// wall_s, the denominator of the report's rates, was read after the run's watch thread had ended, which polls
// every 50 ms from the run's start: a run's wall time went on to the next poll (a run of one 0.5 ms request
// reported 50 ms, 20 requests/s). It ends with the last request now: a run of one request lasts little longer
// than that request.
TEST_F(EndToEnd, TheLoadGeneratorsWallTimeEndsWithItsLastRequest) {
  CannedSummarizer canned;
  v1::SummarizeStreamResponse token, final;
  token.mutable_token()->set_token_id(5);
  final.mutable_final()->set_summary("done");
  canned.stream_messages = {token, final};
  int port = 0;
  const auto server = serve(canned, port);
  ASSERT_GT(port, 0);
  const std::string client = kClient + " --target 127.0.0.1:" + std::to_string(port) +
                             " --load --concurrency 1 --requests 1 --json " + doc(0) + " 2>/dev/null";
  // One run may be slowed by a busy machine; with the poll's wait every one was over by 10 ms or more.
  int slow = 0;
  std::string runs;
  for (int i = 0; i < 10; ++i) {
    const auto r = run_command(client);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto report = nlohmann::json::parse(r.out);
    const double over_ms = 1000.0 * report["wall_s"].get<double>() - report["latency_ms"]["p50"].get<double>();
    EXPECT_GE(over_ms, 0.0) << r.out;
    if (over_ms > 10.0) ++slow;
    runs += r.out;
  }
  EXPECT_LE(slow, 3) << runs;
  server->Shutdown();
}

TEST_F(EndToEnd, MetricsOfARunningServerFollowRealRequests) {
  namespace scrape = server::testing;
  auto server = start({"--metrics-listen", "127.0.0.1:0"});
  const int port = metrics_port(*server);
  ASSERT_GT(port, 0) << server->log();
  const scrape::LabelSet ok{{"model", "tiny"}, {"method", "SummarizeStream"}, {"code", "OK"}};
  const scrape::LabelSet tiny{{"model", "tiny"}};
  auto body = [&] { return scrape::http_body(scrape::http_get(port, "/metrics")); };
  EXPECT_EQ(scrape::sample(body(), "srformer_requests_total", ok).value_or(0), 0);
  // The model's weights, set at load: its parameters, and the packed copies (0 where the CPU packs none).
  const std::string loaded = body();
  EXPECT_GT(scrape::sample(loaded, "srformer_weight_bytes", {{"model", "tiny"}, {"form", "parameters"}}).value_or(0),
            0);
  EXPECT_GE(scrape::sample(loaded, "srformer_weight_bytes", {{"model", "tiny"}, {"form", "packed"}}).value_or(-1), 0);
  // The default state budget (--max-state-memory auto): half the memory available after loading.
  EXPECT_GT(scrape::sample(loaded, "srformer_state_budget_bytes", tiny).value_or(0), 0);
  // The warm-up request (--warm-up, on by default) was no client's: no series counts it.
  EXPECT_EQ(scrape::sample(loaded, "srformer_rows_joined_total", tiny), 0);
  EXPECT_EQ(scrape::sample(loaded, "srformer_generated_tokens_total", tiny), 0);
  EXPECT_EQ(scrape::sample(loaded, "srformer_requests_in_flight", tiny), 0);

  // Six streamed requests of exactly 8 tokens each (min = max new tokens).
  auto r = run_command(kClient + " --target " + server->target() + " --load --concurrency 3 --requests 6 --json" +
                       " --max-new-tokens 8 --min-new-tokens 8 " + doc(0) + " " + doc(1));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(nlohmann::json::parse(r.out)["requests_ok"], 6);
  std::string text;
  ASSERT_TRUE(eventually(
      [&] {
        // A step's tokens are counted once the step ends, after its results went out: wait for both.
        text = body();
        return scrape::sample(text, "srformer_requests_total", ok).value_or(0) == 6 &&
               scrape::sample(text, "srformer_generated_tokens_total", tiny).value_or(0) >= 48;
      },
      10s))
      << text;
  EXPECT_EQ(scrape::sample(text, "srformer_generated_tokens_total", tiny), 48);
  EXPECT_EQ(scrape::sample(text, "srformer_time_to_first_token_seconds_count", tiny), 6);
  EXPECT_EQ(scrape::sample(text, "srformer_input_tokens_count", tiny), 6);
  EXPECT_GT(scrape::sample(text, "srformer_decode_steps_total", tiny).value_or(0), 8);
  // Every segment switch runs the RAF neuron once per decoder layer.
  const double switches = scrape::sample(text, "srformer_segment_switches_total", tiny).value_or(-1);
  EXPECT_GT(switches, 0);
  const auto layers = static_cast<double>(load_model(model_dir_)->config().decoder_layers);
  EXPECT_EQ(scrape::sample(text, "srformer_raf_updates_total", tiny), switches * layers);
  // Every request has left: nothing in flight, per-request state back to its baseline of zero.
  EXPECT_TRUE(eventually(
      [&] {
        text = body();
        return scrape::sample(text, "srformer_requests_in_flight", tiny) == 0 &&
               scrape::sample(text, "srformer_state_bytes", tiny) == 0 &&
               scrape::sample(text, "srformer_state_held_bytes", tiny) == 0;
      },
      10s))
      << text;
  // What the docs, the dashboard and the alerts rely on, held to a real server's scrape rather than to a
  // Metrics the tests fill: each family is in docs/OPERATIONS.md's table with its type and labels, and each
  // row's family is served, but for those of CUDA builds, of partial_results batches and of live rows.
  const auto section = scrape::operations_metrics_section();
  const auto documented = scrape::documented_families(section);
  const auto served = scrape::scraped_families(text);
  ASSERT_FALSE(documented.empty()) << "docs/OPERATIONS.md has no metrics table";
  for (const auto& [family, facts] : served) {
    SCOPED_TRACE(family);
    const auto row = documented.find(family);
    ASSERT_NE(row, documented.end()) << "served but not in docs/OPERATIONS.md's metrics table";
    EXPECT_EQ(row->second.type, facts.type) << "the table's type column";
    if (!facts.labels.empty()) {
      EXPECT_EQ(row->second.labels, facts.labels) << "the table's labels column";
    }
  }
  for (const auto& [family, facts] : documented) {
    const bool cuda_only = family.rfind("srformer_gpu_", 0) == 0 || family.rfind("srformer_torch_cuda_", 0) == 0;
    // Served only after a partial_results batch, and only while rows are live (this scrape is idle).
    const bool not_idle = family == "srformer_batch_items_total" || family == "srformer_raf_fired_ratio";
    if (cuda_only || not_idle) continue;
    const auto it = served.find(family);
    EXPECT_TRUE(it != served.end() && it->second.labels == facts.labels)
        << family << ": in the table, but a running server serves no series of it with its labels";
  }
  std::string out;
  if (scrape::have_program("promtool")) {
    const auto file = work_ / "scrape.prom";
    std::ofstream(file) << text;
    EXPECT_EQ(scrape::run_command("promtool check metrics < " + file.string(), out), 0) << out;
  }
}

// A request over --max-message-bytes reaches the service, which refuses it (gRPC's own limit refused it
// before, unlogged and uncounted): one warning line naming the method, the peer and the sizes,
// srformer_requests_unrouted_total{reason="too_large"}, a message that says what to do, and no retry
// although the client retries RESOURCE_EXHAUSTED (the pushback says not to).
TEST_F(EndToEnd, RequestsOverTheMessageLimitAreLoggedCountedAndExplained) {
  namespace scrape = server::testing;
  auto server = start({"--metrics-listen", "127.0.0.1:0", "--max-message-bytes", "4096"});
  const int port = metrics_port(*server);
  ASSERT_GT(port, 0) << server->log();
  const auto big = work_ / "big.txt";
  std::ofstream(big) << synthetic_text(200, 9);
  ASSERT_GT(fs::file_size(big), 4096u);
  const std::string client = kClient + " --target " + server->target() + " --retries 3 ";
  for (const auto& [flags, method] : std::vector<std::pair<std::string, std::string>>{
           {"", "Summarize"}, {"--stream ", "SummarizeStream"}, {"--batch " + doc(0) + " ", "SummarizeBatch"}}) {
    SCOPED_TRACE(method);
    auto r = run_command(client + flags + big.string() + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("RESOURCE_EXHAUSTED: Received message larger than max ("), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("up to 4096 bytes (its --max-message-bytes)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("shorten the document"), std::string::npos) << r.out;
    const std::regex logged(": " + method +
                            " from [^ ]+ refused with RESOURCE_EXHAUSTED: Received message larger than max "
                            "\\([0-9]+ vs\\. 4096\\)");
    EXPECT_TRUE(std::regex_search(server->log(), logged)) << server->log();
    const std::string text = scrape::http_body(scrape::http_get(port, "/metrics"));
    EXPECT_EQ(scrape::sample(text, "srformer_requests_unrouted_total", {{"method", method}, {"reason", "too_large"}}),
              1)
        << "counted once: not retried";
  }
  // It bounds the message, not each document: a batch of FILEs each under it is refused as a whole, saying so.
  const auto half = work_ / "half.txt";
  std::ofstream(half) << std::string(3000, 'a');
  auto batch = run_command(client + "--batch " + half.string() + " " + half.string() + " 2>&1");
  EXPECT_EQ(batch.exit_code, 1) << batch.out;
  EXPECT_NE(batch.out.find("up to 4096 bytes (its --max-message-bytes); shorten the document (or send fewer in a "
                           "batch) or raise the server's limit"),
            std::string::npos)
      << batch.out;
  // The limit is on one message: a short document still goes through.
  EXPECT_EQ(run_command(client + doc(0)).exit_code, 0);
  // Sending it again does not make it fit: the load generator stops at the first refusal of its only FILE
  // (before, it sent it again at once, without the backoff it waits after a full queue).
  auto load = run_command(kClient + " --target " + server->target() + " --load --concurrency 1 --duration 2 --json " +
                          big.string());
  EXPECT_EQ(load.exit_code, 1) << load.out;
  const auto report = nlohmann::json::parse(load.out);
  EXPECT_EQ(report["stopped_early"], true) << load.out;
  EXPECT_EQ(report["requests_failed"], 1) << load.out;
}

TEST_F(EndToEnd, RefusedRequestsAreCountedAndLoggedOnceInValidJsonLines) {
  namespace scrape = server::testing;
  auto server = start({"--metrics-listen", "127.0.0.1:0", "--log-json"});
  const int port = metrics_port(*server);
  ASSERT_GT(port, 0) << server->log();
  auto body = [&] { return scrape::http_body(scrape::http_get(port, "/metrics")); };
  // Refused by validation (over the beam cap), unary and streamed, with a request id that holds a quote
  // and a newline; and a model this server does not hold.
  const std::string client = kClient + " --target " + server->target();
  auto beams = run_command(client + " --num-beams 99 --request-id 'say \"hi\"\n twice' " + doc(0) + " 2>&1");
  EXPECT_NE(beams.exit_code, 0);
  EXPECT_NE(beams.out.find("INVALID_ARGUMENT"), std::string::npos) << beams.out;
  auto streamed = run_command(client + " --stream --num-beams 99 " + doc(0) + " 2>&1");
  EXPECT_NE(streamed.exit_code, 0);
  auto unknown = run_command(client + " --model nope " + doc(0) + " 2>&1");
  EXPECT_NE(unknown.out.find("NOT_FOUND"), std::string::npos) << unknown.out;
  // A long model name of two-byte characters, cut for the log on a character's boundary (the cut through
  // one made the line invalid UTF-8, so invalid JSON), and a request id of 100 bytes, logged whole.
  std::string accents = "r3-";  // 3 bytes: a cut at 64 falls inside a character
  for (int i = 0; i < 40; ++i) accents += "\xC3\xA9";
  const std::string long_id = "id-" + std::string(97, 'L');
  auto long_names = run_command(client + " --model '" + accents + "' --request-id " + long_id + " " + doc(0) + " 2>&1");
  EXPECT_NE(long_names.out.find("NOT_FOUND"), std::string::npos) << long_names.out;
  const std::string text = body();
  EXPECT_EQ(scrape::sample(text, "srformer_requests_rejected_total", {{"model", "tiny"}, {"reason", "invalid"}}), 2)
      << text;
  for (const std::string method : {"Summarize", "SummarizeStream"}) {
    EXPECT_EQ(scrape::sample(text, "srformer_requests_total",
                             {{"model", "tiny"}, {"method", method}, {"code", "INVALID_ARGUMENT"}}),
              1)
        << method;
  }
  EXPECT_EQ(scrape::sample(text, "srformer_requests_in_flight", {{"model", "tiny"}}), 0);
  // The requested name of a model the server does not hold is the client's text: never a label.
  EXPECT_EQ(text.find("\"nope\""), std::string::npos);
  // One log line per refusal, each line one JSON object.
  const std::string log = server->log();
  int refused = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not one JSON object: " << line;
    const std::string msg = j.at("msg");
    if (msg.find(" refused with ") == std::string::npos) continue;
    ++refused;
    if (msg.find("NOT_FOUND") != std::string::npos && msg.find("model=nope") == std::string::npos) {
      EXPECT_EQ(msg.rfind("request " + long_id + ": Summarize model=" + accents.substr(0, 63) + "... (83 bytes)", 0), 0)
          << msg;
    }
    if (msg.rfind("request say", 0) == 0) {
      // The client's id as it sent it, as on the lines of requests that ran (escaped in the file).
      EXPECT_EQ(msg.rfind("request say \"hi\"\n twice: Summarize model=tiny refused with INVALID_ARGUMENT", 0), 0)
          << msg;
    }
  }
  EXPECT_EQ(refused, 4) << log;
  EXPECT_NE(log.find(R"(request say \"hi\"\n twice)"), std::string::npos) << "escaped in the file: " << log;
}

TEST_F(EndToEnd, RealPrometheusScrapesTheServer) {
  namespace scrape = server::testing;
  if (!scrape::have_program("prometheus")) {
    GTEST_SKIP() << "prometheus not installed (Debian package `prometheus`, see deploy/setup-deps.sh)";
  }
  auto server = start({"--metrics-listen", "127.0.0.1:0"});
  const int port = metrics_port(*server);
  ASSERT_GT(port, 0) << server->log();
  auto r = run_command(kClient + " --target " + server->target() + " --max-new-tokens 4 " + doc(3));
  ASSERT_EQ(r.exit_code, 0) << r.out;

  const auto dir = work_ / "prometheus";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "prometheus.yml") << "global:\n  scrape_interval: 1s\nscrape_configs:\n"
                                        << "  - job_name: srformer\n    static_configs:\n"
                                        << "      - targets: ['127.0.0.1:" << port << "']\n";
  const int web = free_port();
  ASSERT_GT(web, 0);
  // Prometheus logs to stderr; ServerProcess waits for a "listening on" line, so start it by hand.
  const std::string cmd = "prometheus --config.file=" + (dir / "prometheus.yml").string() +
                          " --storage.tsdb.path=" + (dir / "data").string() +
                          " --web.listen-address=127.0.0.1:" + std::to_string(web) + " >" + (dir / "log").string() +
                          " 2>&1 & echo $!";
  const auto started = run_command(cmd);
  const int pid = std::stoi(started.out);
  auto query = [&](const std::string& q) {
    return scrape::http_body(scrape::http_get(web, "/api/v1/query?query=" + q));
  };
  std::string answer;
  // The server's unary request is counted; Prometheus sees the target up and the series with its labels.
  const bool seen = eventually(
      [&] {
        answer = query("srformer_requests_total%7Bmethod%3D%22Summarize%22%2Ccode%3D%22OK%22%7D");
        return answer.find("\"value\":[") != std::string::npos && answer.find("\"1\"]") != std::string::npos;
      },
      60s);
  const std::string up = query("up%7Bjob%3D%22srformer%22%7D");
  kill(pid, SIGTERM);  // not our child (started through the shell): wait until it is gone
  eventually([&] { return kill(pid, 0) != 0; }, 10s);
  EXPECT_TRUE(seen) << answer << "\n" << read((dir / "log").string());
  EXPECT_NE(up.find("\"1\"]"), std::string::npos) << up;
}

TEST_F(EndToEnd, NodeGrpcJsExampleClient) {
  // examples/node/summarize.js with @grpc/grpc-js + @grpc/proto-loader from tests/reference
  // (installed by tests/reference/install.sh): the proto alone is enough for another language.
  const std::string src = SRFORMER_SOURCE_DIR;
  const std::string modules = src + "/tests/reference/node_modules";
  if (run_command("command -v node").exit_code != 0 || !fs::exists(modules + "/@grpc/grpc-js")) {
    GTEST_SKIP() << "node or @grpc/grpc-js missing (tests/reference/install.sh installs them)";
  }
  auto server = start();
  const std::string node =
      "NODE_PATH=" + modules + " node " + src + "/examples/node/summarize.js --target " + server->target() + " ";
  auto refused = run_command(node + "--max-new-tokens 0 " + doc(2) + " 2>&1");  // errors by their names
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_NE(refused.out.find("error: INVALID_ARGUMENT: "), std::string::npos) << refused.out;
  auto unary = run_command(node + "--max-new-tokens 64 " + doc(2));
  ASSERT_EQ(unary.exit_code, 0) << unary.out;
  auto stream = run_command(node + "--max-new-tokens 64 --stream " + doc(2));
  ASSERT_EQ(stream.exit_code, 0) << stream.out;
  // Asked for 64 new tokens, as our own client, which gives the reference answer.
  auto ours = run_command(kClient + " --target " + server->target() + " --max-new-tokens 64 --json " + doc(2));
  ASSERT_EQ(ours.exit_code, 0) << ours.out;
  const auto ref = nlohmann::json::parse(ours.out);
  const std::string summary = ref["summary"];
  ASSERT_FALSE(summary.empty());
  // Unary prints the summary, then the usage as JSON; streaming prints the text deltas, then usage.
  EXPECT_EQ(unary.out.substr(0, summary.size() + 1), summary + "\n") << unary.out;
  EXPECT_EQ(stream.out.substr(0, summary.size() + 1), summary + "\n") << stream.out;
  const auto usage = nlohmann::json::parse(unary.out.substr(unary.out.rfind('{')));
  EXPECT_EQ(std::to_string(ref["usage"]["output_tokens"].get<int64_t>()), usage["output_tokens"].dump());
  // A --max-new-tokens that is not an int32 is refused before any call (Number() sent 'abc' as 0, 1.5 as
  // 1, and protobufjs wrapped 2^32 + 5 to 5), as is a flag without its value; a missing file is a line,
  // not a stack trace (exit 2 for all, as the Python example).
  for (const std::string bad : {"abc", "1.5", "4294967301"}) {
    auto r = run_command(node + "--max-new-tokens " + bad + " " + doc(2) + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("error: --max-new-tokens takes a whole number (int32), not '" + bad + "'"), std::string::npos)
        << r.out;
  }
  auto no_value = run_command(node + doc(2) + " --max-new-tokens 2>&1");
  EXPECT_EQ(no_value.exit_code, 2) << no_value.out;
  EXPECT_NE(no_value.out.find("error: --max-new-tokens needs a value"), std::string::npos) << no_value.out;
  auto missing = run_command(node + "/nonexistent/file.txt 2>&1");
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_NE(missing.out.find("error: cannot read /nonexistent/file.txt: No such file or directory\n"),
            std::string::npos)
      << missing.out;
  EXPECT_EQ(missing.out.find("    at "), std::string::npos) << missing.out;
  // Flags as the Python example takes them: '--flag=value' is the same request as '--flag value' (it was
  // ignored), --num-beams is sent (0: the server says why it refuses it), and an unknown flag is refused
  // by its name (it was taken as the FILE: 'cannot read --num-bems').
  auto equals = run_command(node + "--max-new-tokens=64 " + doc(2));
  ASSERT_EQ(equals.exit_code, 0) << equals.out;
  EXPECT_EQ(equals.out.substr(0, summary.size() + 1), summary + "\n") << equals.out;
  auto beams = run_command(node + "--num-beams=0 " + doc(2) + " 2>&1");
  EXPECT_EQ(beams.exit_code, 1) << beams.out;
  EXPECT_NE(beams.out.find("error: INVALID_ARGUMENT: "), std::string::npos) << beams.out;
  auto unknown = run_command(node + "--num-bems 4 " + doc(2) + " 2>&1");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("error: unknown flag '--num-bems'"), std::string::npos) << unknown.out;
  auto two = run_command(node + doc(2) + " " + doc(2) + " 2>&1");
  EXPECT_EQ(two.exit_code, 2) << two.out;
  EXPECT_NE(two.out.find("error: one FILE at a time"), std::string::npos) << two.out;
  // No deadline unless --deadline-ms gives one, as the Python example and srformer-client: against a server
  // that never answers, it ends the call; out of 0..a day, or not a whole number, it is refused.
  CannedSummarizer hanging;
  hanging.hang = true;
  int port = 0;
  const auto silent = serve(hanging, port);
  ASSERT_GT(port, 0);
  const std::string to_silent = "NODE_PATH=" + modules + " node " + src +
                                "/examples/node/summarize.js --target 127.0.0.1:" + std::to_string(port) + " ";
  for (const std::string stream : {"", "--stream "}) {
    auto r = run_command(to_silent + stream + "--deadline-ms 300 " + doc(2) + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << stream << r.out;
    EXPECT_NE(r.out.find("error: DEADLINE_EXCEEDED: "), std::string::npos) << stream << r.out;
  }
  for (const std::string ms : {"-1", "86400001", "99999999999999999999", "1.5"}) {
    auto r = run_command(node + "--deadline-ms " + ms + " " + doc(2) + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << ms << ": " << r.out;
    EXPECT_NE(r.out.find("error: --deadline-ms must be from 0 (no deadline) to 86400000 (a day), got " + ms),
              std::string::npos)
        << r.out;
  }
  auto no_deadline = run_command(node + "--deadline-ms=0 --max-new-tokens 64 " + doc(2));
  ASSERT_EQ(no_deadline.exit_code, 0) << no_deadline.out;
  EXPECT_EQ(no_deadline.out.substr(0, summary.size() + 1), summary + "\n") << no_deadline.out;
  silent->Shutdown();
  // A document past gRPC's retry buffer (1 MiB a call in @grpc/grpc-js unless the channel sets it) is retried as a
  // short one is: it was sent once, whatever the retry policy said (docs/API.md, "Retries").
  const auto long_doc = work_ / "2MB.txt";
  std::ofstream(long_doc) << std::string(2'000'000, 'a');
  CannedSummarizer refusing;
  refusing.refuse_unary = 2;
  refusing.unary.set_summary("retried");
  const auto refuser = serve(refusing, port);
  ASSERT_GT(port, 0);
  auto retried = run_command("NODE_PATH=" + modules + " node " + src +
                             "/examples/node/summarize.js --target 127.0.0.1:" + std::to_string(port) + " " +
                             long_doc.string() + " 2>&1");
  EXPECT_EQ(retried.exit_code, 0) << retried.out;
  EXPECT_EQ(retried.out.rfind("retried\n", 0), 0u) << retried.out;
  EXPECT_EQ(refusing.unary_calls.load(), 3);
  refuser->Shutdown();
  fs::remove(long_doc);
}

TEST_F(EndToEnd, PythonExampleClient) {
  // examples/python/summarize.py with Debian's python3-grpcio: unary and streaming print our client's summary,
  // and the message classes it generates for itself leave nothing behind in its temporary directory.
  if (run_command("/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null").exit_code != 0) {
    GTEST_SKIP() << "python3-grpcio / python3-protobuf not installed (deploy/setup-deps.sh)";
  }
  auto server = start();
  const auto tmp = work_ / "python_example_tmp";
  fs::create_directories(tmp);
  const std::string python = "TMPDIR=" + tmp.string() + " /usr/bin/python3 " + std::string(SRFORMER_SOURCE_DIR) +
                             "/examples/python/summarize.py --target " + server->target() + " --max-new-tokens 24 ";
  auto unary = run_command(python + doc(2));
  ASSERT_EQ(unary.exit_code, 0) << unary.out;
  auto stream = run_command(python + "--stream " + doc(2));
  ASSERT_EQ(stream.exit_code, 0) << stream.out;
  auto ours = run_command(kClient + " --target " + server->target() + " --max-new-tokens 24 --json " + doc(2));
  ASSERT_EQ(ours.exit_code, 0) << ours.out;
  const std::string summary = nlohmann::json::parse(ours.out)["summary"];
  ASSERT_FALSE(summary.empty());
  EXPECT_EQ(unary.out, summary + "\n");
  EXPECT_EQ(stream.out, summary + "\n");
  EXPECT_TRUE(fs::is_empty(tmp)) << "the generated message classes were left in " << tmp;
  auto refused = run_command(python + "/dev/null 2>&1");
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_NE(refused.out.find("error: INVALID_ARGUMENT: document is empty"), std::string::npos) << refused.out;
  // --max-new-tokens 0 is sent (the server says why it refuses it; it was dropped as unset), and a
  // missing file is a line, not a traceback.
  auto zero = run_command(python + "--max-new-tokens 0 " + doc(2) + " 2>&1");
  EXPECT_EQ(zero.exit_code, 1) << zero.out;
  EXPECT_NE(zero.out.find("error: INVALID_ARGUMENT: "), std::string::npos) << zero.out;
  auto missing = run_command(python + "/nonexistent/file.txt 2>&1");
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_NE(missing.out.find("error: cannot read /nonexistent/file.txt"), std::string::npos) << missing.out;
  // A value past int32 is refused as argparse refuses 'abc' (protobuf's ValueError was a traceback).
  for (const std::string flag : {"--max-new-tokens 4294967301", "--num-beams -99999999999"}) {
    auto r = run_command(python + flag + " " + doc(2) + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.out;
    EXPECT_NE(r.out.find("is out of int32's range"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("Traceback"), std::string::npos) << r.out;
  }
  // A call has no deadline unless --deadline-ms gives one, as srformer-client's (a fixed 120 s one failed long
  // CPU summaries): against a server that never answers, it ends the call; out of 0..a day it is refused.
  CannedSummarizer hanging;
  hanging.hang = true;
  int port = 0;
  const auto silent = serve(hanging, port);
  ASSERT_GT(port, 0);
  const std::string to_silent = "TMPDIR=" + tmp.string() + " /usr/bin/python3 " + std::string(SRFORMER_SOURCE_DIR) +
                                "/examples/python/summarize.py --target 127.0.0.1:" + std::to_string(port) + " ";
  for (const std::string stream : {"", "--stream "}) {
    auto r = run_command(to_silent + stream + "--deadline-ms 300 " + doc(2) + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << stream << r.out;
    EXPECT_NE(r.out.find("error: DEADLINE_EXCEEDED: "), std::string::npos) << stream << r.out;
  }
  for (const std::string ms : {"-1", "86400001", "99999999999999999999"}) {
    auto r = run_command(python + "--deadline-ms " + ms + " " + doc(2) + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << ms << ": " << r.out;
    EXPECT_NE(r.out.find("must be from 0 (no deadline) to 86400000 (a day), got " + ms), std::string::npos) << r.out;
  }
  silent->Shutdown();
  // A document past gRPC's per-call retry buffer (256 KiB unless the channel sets it) is retried as a short one
  // is: it was sent once, whatever the retry policy said (docs/API.md, "Retries").
  const auto long_doc = work_ / "2MB.txt";
  std::ofstream(long_doc) << std::string(2'000'000, 'a');
  CannedSummarizer refusing;
  refusing.refuse_unary = 2;
  refusing.unary.set_summary("retried");
  const auto refuser = serve(refusing, port);
  ASSERT_GT(port, 0);
  auto retried = run_command("TMPDIR=" + tmp.string() + " /usr/bin/python3 " + std::string(SRFORMER_SOURCE_DIR) +
                             "/examples/python/summarize.py --target 127.0.0.1:" + std::to_string(port) + " " +
                             long_doc.string() + " 2>&1");
  EXPECT_EQ(retried.exit_code, 0) << retried.out;
  EXPECT_EQ(retried.out.rfind("retried\n", 0), 0u) << retried.out;
  EXPECT_EQ(refusing.unary_calls.load(), 3);
  refuser->Shutdown();
  fs::remove(long_doc);
}

TEST_F(EndToEnd, TlsServerWithTheClientsTlsOptions) {
  if (run_command("command -v openssl").exit_code != 0) GTEST_SKIP() << "openssl not installed (setup-deps.sh)";
  const auto dir = work_ / "tls";
  fs::create_directories(dir);
  const std::string cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  auto made = run_command(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
      "subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
      key + " -out " + cert + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  auto server = start({"--tls-cert", cert, "--tls-key", key});
  const std::string t = " --target " + server->target();
  auto health = run_command(kClient + t + " --tls --ca " + cert + " --health");
  EXPECT_EQ(health.exit_code, 0) << health.out;
  EXPECT_EQ(health.out, "SERVING\n");
  // Plaintext against TLS: gRPC's "Socket closed", with the client's hint.
  auto plaintext = run_command(kClient + t + " --max-new-tokens 2 --deadline-ms 5000 " + doc(0) + " 2>&1");
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext.out;
  EXPECT_NE(plaintext.out.find("(does the server use TLS? then --tls, with --ca FILE"), std::string::npos)
      << plaintext.out;
  // The load generator says so too, before its run (its error tally gave gRPC's words alone).
  auto load = run_command(kClient + t + " --load --requests 1 --json " + doc(0) + " 2>&1");
  EXPECT_EQ(load.exit_code, 1) << load.out;
  EXPECT_EQ(load.out.rfind("srformer-client: cannot connect to " + server->target() + ": UNAVAILABLE: ", 0), 0u)
      << load.out;
  EXPECT_NE(load.out.find("(does the server use TLS? then --tls, with --ca FILE"), std::string::npos) << load.out;
  auto unary = run_command(kClient + t + " --tls --ca " + cert + " --max-new-tokens 12 --json " + doc(0));
  ASSERT_EQ(unary.exit_code, 0) << unary.out;
  EXPECT_EQ(nlohmann::json::parse(unary.out)["token_ids"].get<std::vector<int64_t>>(),
            offline(model_dir_, read(doc(0)), 12, 1));
  // A plaintext client cannot talk to it.
  EXPECT_NE(run_command(kClient + t + " --health --deadline-ms 3000 2>&1").exit_code, 0);
  // --tls without --ca trusts gRPC's default roots (the system's bundle; here the variable gRPC reads first): it
  // was refused, "--tls needs --ca FILE", which sent a user of a server with a public certificate after the
  // system's bundle. The self-signed certificate is no CA the system trusts: said so, with what to give.
  auto default_roots = run_command("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=" + cert + " " + kClient + t + " --tls --health");
  EXPECT_EQ(default_roots.exit_code, 0) << default_roots.out;
  EXPECT_EQ(default_roots.out, "SERVING\n");
  auto system_roots = run_command(kClient + t + " --tls --health --deadline-ms 5000 2>&1");
  EXPECT_EQ(system_roots.exit_code, 1) << system_roots.out;
  EXPECT_NE(system_roots.out.find("(the server's certificate did not verify against the system's CAs: signed by a "
                                  "private CA? then --ca FILE with that CA)"),
            std::string::npos)
      << system_roots.out;
  // That line alone: gRPC's own log line of the handshake ("E1129 ... ssl_transport_security.cc:1501] Handshake
  // failed ...") came first, a second error in another format.
  EXPECT_EQ(system_roots.out.rfind("srformer-client: health check failed: UNAVAILABLE: ", 0), 0u) << system_roots.out;
  EXPECT_EQ(std::count(system_roots.out.begin(), system_roots.out.end(), '\n'), 1) << system_roots.out;
  // A certificate for the server's DNS name, checked on 127.0.0.1 (the image's health check): only with
  // --tls-server-name naming it.
  {
    const std::string named_cert = (dir / "named.pem").string(), named_key = (dir / "named-key.pem").string();
    made = run_command(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=summarizer.example -addext "
        "subjectAltName=DNS:summarizer.example -keyout " +
        named_key + " -out " + named_cert + " 2>&1");
    ASSERT_EQ(made.exit_code, 0) << made.out;
    auto named = start({"--tls-cert", named_cert, "--tls-key", named_key});
    const std::string nt = " --target " + named->target() + " --tls --ca " + named_cert;
    EXPECT_NE(run_command(kClient + nt + " --health --deadline-ms 3000 2>&1").exit_code, 0);
    auto overridden = run_command(kClient + nt + " --tls-server-name summarizer.example --health 2>&1");
    EXPECT_EQ(overridden.exit_code, 0) << overridden.out;
    EXPECT_EQ(overridden.out, "SERVING\n");
    auto plain = run_command(kClient + " --target " + named->target() + " --tls-server-name x --health 2>&1");
    EXPECT_EQ(plain.exit_code, 2) << plain.out;
  }
  // Mutual TLS: with --tls-client-ca the server takes only clients that show a certificate it signed.
  {
    auto mutual = start({"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", cert});
    const std::string mt = " --target " + mutual->target() + " --tls --ca " + cert;
    EXPECT_NE(run_command(kClient + mt + " --health --deadline-ms 3000 2>&1").exit_code, 0);
    auto with_cert = run_command(kClient + mt + " --cert " + cert + " --key " + key + " --health 2>&1");
    EXPECT_EQ(with_cert.exit_code, 0) << with_cert.out;
    EXPECT_EQ(with_cert.out, "SERVING\n");
    // A key that is not the certificate's: gRPC said only "empty address list".
    auto wrong_key =
        run_command(kClient + mt + " --cert " + cert + " --key " + (dir / "named-key.pem").string() + " --health 2>&1");
    EXPECT_EQ(wrong_key.exit_code, 1) << wrong_key.out;
    EXPECT_NE(wrong_key.out.find("is --key " + (dir / "named-key.pem").string() + " the private key of --cert " + cert),
              std::string::npos)
        << wrong_key.out;
    // Without gRPC's three log lines before it (one a dump of the channel's arguments).
    EXPECT_EQ(wrong_key.out.rfind("srformer-client: health check failed: UNAVAILABLE: empty address list", 0), 0u)
        << wrong_key.out;
    EXPECT_EQ(std::count(wrong_key.out.begin(), wrong_key.out.end(), '\n'), 1) << wrong_key.out;
    auto half_client = run_command(kClient + mt + " --cert " + cert + " --health 2>&1");
    EXPECT_EQ(half_client.exit_code, 2) << half_client.out;
    EXPECT_NE(half_client.out.find("--key"), std::string::npos) << half_client.out;
    // A certificate its CA did not sign: the server closes the handshake, and gRPC said only "Socket closed".
    const std::string other = (dir / "named.pem").string();
    auto unsigned_client = run_command(kClient + mt + " --cert " + other + " --key " +
                                       (dir / "named-key.pem").string() + " --health 2>&1");
    EXPECT_EQ(unsigned_client.exit_code, 1) << unsigned_client.out;
    EXPECT_NE(unsigned_client.out.find("Socket closed (the server refused the TLS handshake: is --cert " + other +
                                       " signed by the CA of its --tls-client-ca, and still valid?)\n"),
              std::string::npos)
        << unsigned_client.out;
  }
  // Half a TLS configuration, or a file that is not PEM, is refused with the flag to fix.
  auto half = run_command(kServer + " --model tiny=" + model_dir_.string() + " --tls-cert " + cert + " 2>&1");
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_NE(half.out.find("--tls-key"), std::string::npos) << half.out;
  auto bad = run_command(kServer + " --model tiny=" + model_dir_.string() + " --metrics-listen '' --listen " +
                         "127.0.0.1:0 --tls-cert " + doc(0) + " --tls-key " + key + " 2>&1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.out.find("--tls-cert"), std::string::npos) << bad.out;
  // A key that is not the certificate's: said so, naming both files, before the models load (it said "is
  // the port in use?" after loading and warming them up, then "do they not belong together?").
  auto mismatched =
      run_command(kServer + " --model tiny=" + model_dir_.string() + " --metrics-listen '' --listen " +
                  "127.0.0.1:0 --tls-cert " + cert + " --tls-key " + (dir / "named-key.pem").string() + " 2>&1");
  EXPECT_EQ(mismatched.exit_code, 1) << mismatched.out;
  EXPECT_NE(mismatched.out.find("named-key.pem is not the private key of --tls-cert " + cert), std::string::npos)
      << mismatched.out;
  EXPECT_EQ(mismatched.out.find("model tiny:"), std::string::npos) << mismatched.out;
  // A key as the client CA, a directory as the certificate: named with the flag (they were blamed on the
  // port, or read as "basic_filebuf::underflow").
  auto key_as_ca =
      run_command(kServer + " --model tiny=" + model_dir_.string() + " --metrics-listen '' --listen 127.0.0.1:0" +
                  " --tls-cert " + cert + " --tls-key " + key + " --tls-client-ca " + key + " 2>&1");
  EXPECT_EQ(key_as_ca.exit_code, 1) << key_as_ca.out;
  EXPECT_NE(key_as_ca.out.find("--tls-client-ca " + key + " holds no PEM certificate"), std::string::npos)
      << key_as_ca.out;
  auto dir_as_cert = run_command(kServer + " --model tiny=" + model_dir_.string() +
                                 " --metrics-listen '' --listen 127.0.0.1:0 --tls-cert " + dir.string() +
                                 " --tls-key " + key + " 2>&1");
  EXPECT_NE(dir_as_cert.out.find("--tls-cert: cannot read '" + dir.string() + "': it is a directory"),
            std::string::npos)
      << dir_as_cert.out;
  // The client checks its own PEM files the same way (gRPC said "empty address list").
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {" --tls --ca " + key, "--ca " + key + " holds no PEM certificate"},
           {" --tls --ca " + cert + " --cert " + key + " --key " + cert, "--cert " + key + " holds no PEM certificate"},
           {" --tls --ca " + cert + " --cert " + cert + " --key " + cert,
            "--key " + cert + " holds no PEM private key"}}) {
    auto r = run_command(kClient + " --target 127.0.0.1:1" + flags + " --health 2>&1");
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.out.find(says), std::string::npos) << flags << ": " << r.out;
  }
}

// `srformer inspect` gives, beside the state a request holds, the estimate the server's memory budget
// counts for it: the two agree, the estimate from above (the footprint's own test checks every variant).
TEST_F(EndToEnd, InspectEstimatesTheStateItMeasures) {
  auto r = run_command(std::string(SRFORMER_BIN_DIR) + "/srformer inspect " + model_dir_.string() +
                       " --input-tokens 40 --new-tokens 10");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto measured = j["state"]["bytes_after_new_tokens"].get<int64_t>();
  const auto estimated = j["state"]["estimated_bytes"].get<int64_t>();
  EXPECT_GT(measured, 0);
  // An upper bound: it counts the self-attention caches' most room (here one slot more than they hold).
  EXPECT_GE(estimated, measured) << r.out;
  EXPECT_LE(estimated - measured, measured / 20) << r.out;
  EXPECT_GT(j["state_footprint"]["per_encoder_position"].get<int64_t>(), 0);
  EXPECT_TRUE(j["state_footprint"]["inputs_shared_by_beams"].get<bool>());  // an SRformer model: slots
  EXPECT_TRUE(j["max_new_tokens"].is_null()) << "a T5's relative positions set no limit: " << r.out;

  // Without --new-tokens: the model's own default (config.json's max_length 20: 19 new tokens, as
  // ListModels' defaults say), not a fixed 128; the expected length follows it.
  auto defaults =
      run_command(std::string(SRFORMER_BIN_DIR) + "/srformer inspect " + model_dir_.string() + " --input-tokens 40");
  ASSERT_EQ(defaults.exit_code, 0) << defaults.out;
  const auto d = nlohmann::json::parse(defaults.out);
  const auto config = nlohmann::json::parse(read((model_dir_ / "config.json").string()));
  EXPECT_EQ(d["state"]["new_tokens"], config["max_length"].get<int64_t>() - 1) << defaults.out;
  EXPECT_EQ(d["state"]["expected_length"], d["state"]["new_tokens"]) << defaults.out;
  auto help = run_command(std::string(SRFORMER_BIN_DIR) + "/srformer inspect --help");
  EXPECT_NE(help.out.find("N to the model's own default max new"), std::string::npos) << help.out;

  // --expected-length L as a request's: 10 steps of L = 1000 stay in segment 0 of the 10 (40 tokens, s = 4),
  // where L = 10 visits all ten, so its switch table holds one entry instead of ten; the server's bounds.
  const std::string inspect =
      std::string(SRFORMER_BIN_DIR) + "/srformer inspect " + model_dir_.string() + " --input-tokens 40 --new-tokens 10";
  auto long_l = run_command(inspect + " --expected-length 1000");
  ASSERT_EQ(long_l.exit_code, 0) << long_l.out;
  const auto l = nlohmann::json::parse(long_l.out);
  EXPECT_EQ(l["state"]["expected_length"], 1000);
  EXPECT_EQ(j["state"]["expected_length"], 10);
  EXPECT_LT(l["state"]["bytes_at_start"].get<int64_t>(), j["state"]["bytes_at_start"].get<int64_t>()) << l.dump();
  EXPECT_GE(l["state"]["estimated_bytes"].get<int64_t>(), l["state"]["bytes_after_new_tokens"].get<int64_t>());
  auto bad = run_command(inspect + " --expected-length 0 2>&1");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_NE(bad.out.find("--expected-length must be between 1 and "), std::string::npos) << bad.out;
}

// A T5's n_positions is the length it was made for, not what its relative positions can read (an SRformer
// fine-tuned on long documents keeps T5's 512): --max-input-tokens may raise it, in the server and in
// `srformer summarize` alike, and both give the same summary of a document past it.
TEST_F(EndToEnd, AT5sNPositionsIsAdvisoryAndTheFlagRaisesIt) {
  const fs::path dir = work_ / "t5_n_positions";
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(model_dir_)) {
    fs::copy_file(f.path(), dir / f.path().filename(), fs::copy_options::overwrite_existing);
  }
  nlohmann::json config;
  std::ifstream(dir / "config.json") >> config;
  config["n_positions"] = 16;
  std::ofstream(dir / "config.json") << config.dump();
  const std::string summarize = kTool + " summarize --model " + dir.string() + " --max-new-tokens 8 --json ";
  auto refused = run_command(summarize + doc(3) + " 2>&1");  // ~60 words: past 16 tokens
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_NE(refused.out.find("over the limit of 16; pass --truncate to cut it or --max-input-tokens to raise it"),
            std::string::npos)
      << refused.out;
  auto offline_run = run_command(summarize + "--max-input-tokens 400 " + doc(3));
  ASSERT_EQ(offline_run.exit_code, 0) << offline_run.out;
  const auto offline_json = nlohmann::json::parse(offline_run.out);
  EXPECT_GT(offline_json["usage"]["input_tokens"].get<int>(), 16) << offline_run.out;

  ServerProcess server(kServer,
                       {"--model", "long=" + dir.string(), "--listen", "127.0.0.1:0", "--metrics-listen", "",
                        "--max-input-tokens", "400"},
                       (work_ / "server_n_positions.log").string());
  EXPECT_NE(server.log().find("serving inputs of up to 400 tokens (--max-input-tokens), over the 16"),
            std::string::npos)
      << server.log();
  const std::string t = " --target " + server.target();
  auto models = run_command(kClient + t + " --list-models --json");
  ASSERT_EQ(models.exit_code, 0) << models.out;
  EXPECT_EQ(nlohmann::json::parse(models.out)[0]["max_input_tokens"], 400);
  auto served = run_command(kClient + t + " --max-new-tokens 8 --json " + doc(3));
  ASSERT_EQ(served.exit_code, 0) << served.out;
  EXPECT_EQ(nlohmann::json::parse(served.out)["token_ids"], offline_json["token_ids"]);
}

// Document files are read alike by the client and the offline tool, and refused alike: a UTF-8 byte-order
// mark (Windows editors write one) is dropped by both, so the served and the offline summary are those of
// the text without it; a UTF-16 file is refused by the server and by `srformer summarize` with the reason.
TEST_F(EndToEnd, ClientAndOfflineToolReadAndRefuseDocumentFilesAlike) {
  // A byte-level BPE model reads U+FEFF as tokens of its own (SentencePiece's normalization drops it).
  const std::string bart = (work_ / "bom_bart").string();
  const auto made = run_command(kTool + " init-model --arch bart --layers 1 --d-model 16 --heads 2 --d-ff 24 " +
                                "--vocab 300 " + bart + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  auto server = start({"--model", "bart=" + bart});
  const std::string client = kClient + " --target " + server->target() + " --model bart --max-new-tokens 8 --json ";
  const std::string tool = kTool + " summarize --model " + bart + " --max-new-tokens 8 --json ";
  const std::string text = read(doc(2));
  const std::string with_bom = (work_ / "bom.txt").string(), utf16 = (work_ / "utf16.txt").string();
  std::ofstream(with_bom, std::ios::binary) << "\xEF\xBB\xBF" << text;
  {
    std::ofstream out(utf16, std::ios::binary);
    out << "\xFF\xFE";
    for (const char c : text) out << c << '\0';
  }
  const auto tokenizer = load_tokenizer(bart);
  ASSERT_NE(tokenizer->encode("\xEF\xBB\xBF" + text), tokenizer->encode(text)) << "the mark would change the input";
  const auto input_tokens = [](const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["usage"]["input_tokens"] : nlohmann::json();
  };
  const auto summary = [](const CommandResult& r) {
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["token_ids"] : nlohmann::json();
  };
  const auto plain = run_command(client + "--retries 2 " + doc(2));  // a retry policy changes no answer
  EXPECT_EQ(input_tokens(plain), tokenizer->encode(text).size());
  for (const auto& command : {client + with_bom, tool + with_bom, tool + doc(2)}) {
    const auto r = run_command(command);
    EXPECT_EQ(input_tokens(r), input_tokens(plain)) << command;
    EXPECT_EQ(summary(r), summary(plain)) << command;
  }

  expect_both_refuse(client, tool, utf16,
                     "INVALID_ARGUMENT: document is not valid UTF-8 (bad byte sequence at byte offset 0: it starts "
                     "with a UTF-16 byte-order mark",
                     "the document (" + utf16 +
                         ") is not valid UTF-8 (bad byte sequence at byte offset 0: it starts with a UTF-16 "
                         "byte-order mark, the text is UTF-16); re-encode it as UTF-8");
  for (const auto& command : {client, tool}) {
    const auto directory = run_command(command + work_.string() + " 2>&1");
    EXPECT_EQ(directory.exit_code, 1);
    EXPECT_NE(directory.out.find("cannot read '" + work_.string() + "': it is a directory"), std::string::npos)
        << directory.out;
  }
  const auto blank = run_command("printf '\\302\\240 \\n' | " + tool + "- 2>&1");
  EXPECT_EQ(blank.exit_code, 1);
  EXPECT_NE(blank.out.find("the document (stdin) contains only whitespace"), std::string::npos) << blank.out;
}

// srformer-client and srformer summarize take Hugging Face's further warpers and the encoder-input settings
// under the same flag names and give the same summaries with them; each changes the summary here, and both
// refuse a bad value saying what to fix.
TEST_F(EndToEnd, ClientAndOfflineToolTakeTheWarperAndEncoderInputFlagsAlike) {
  auto server = start();
  const std::string client = kClient + " --target " + server->target() + " --json ";
  const std::string tool = kTool + " summarize --model " + model_dir_.string() + " --json ";
  const auto token_ids = [](const CommandResult& r) { return json_output(r)["token_ids"]; };
  const std::string sampled = "--max-new-tokens 16 --do-sample --temperature 1.5 --seed ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {sampled, "--min-p 0.5"},
      {sampled, "--typical-p 0.5"},
      {sampled, "--epsilon-cutoff 0.0625"},
      {sampled, "--eta-cutoff 0.5"},
      {"--max-new-tokens 20 --num-beams 2 --seed ", "--encoder-repetition-penalty 4"},
      {"--max-new-tokens 20 --seed ", "--encoder-no-repeat-ngram-size 1"},
  };
  for (const auto& [base, flag] : cases) {
    bool changed = false;
    for (int i = 0; i < 2 && !changed; ++i) {  // once changed, the flag is seen to act: no need for more runs
      const std::string args = base + std::to_string(i) + " " + doc(i);
      const auto served = token_ids(run_command(client + flag + " " + args));
      EXPECT_EQ(token_ids(run_command(tool + flag + " " + args)), served) << flag << ", doc " << i;
      changed = changed || served != token_ids(run_command(client + args));
    }
    EXPECT_TRUE(changed) << flag << " changed no summary";
  }
  // The flag, the server's words, the offline tool's: both refuse a value out of range without --do-sample
  // too, and say the value given (the offline tool took "--top-p 0", "--top-k -1" and "--temperature nan"
  // without a word), in the same words (check_given_options) but for the name.
  const std::vector<Refusal> bad = {
      {"--min-p 1.5", "min_p must be in [0, 1] (0 disables it), got 1.5",
       "--min-p must be in [0, 1] (0 disables it), got 1.5"},
      {"--typical-p 0", "typical_p must be in (0, 1] (1 disables it), got 0",
       "--typical-p must be in (0, 1] (1 disables it), got 0"},
      {"--epsilon-cutoff 1", "epsilon_cutoff must be in [0, 1)",
       "--epsilon-cutoff must be in [0, 1) (0 disables it; Hugging Face suggests 3e-4 to 9e-4), got 1"},
      {"--eta-cutoff -1", "eta_cutoff must be in [0, 1)",
       "--eta-cutoff must be in [0, 1) (0 disables it; Hugging Face suggests 3e-4 to 2e-3), got -1"},
      {"--encoder-repetition-penalty 0", "encoder_repetition_penalty is 0; set it between 1e-4",
       "encoder_repetition_penalty is 0; set it between 1e-4"},
      {"--encoder-no-repeat-ngram-size -1", "encoder_no_repeat_ngram_size must be >= 0 (0 disables it), got -1",
       "--encoder-no-repeat-ngram-size must be >= 0 (0 disables it), got -1"},
      {"--top-p 1.5", "top_p must be in [0, 1] (1 disables it; 0 keeps only the likeliest token), got 1.5",
       "--top-p must be in [0, 1] (1 disables it; 0 keeps only the likeliest token), got 1.5"},
      {"--top-k -1", "top_k must be >= 0 (0 disables it), got -1", "--top-k must be >= 0 (0 disables it), got -1"},
      {"--temperature nan", "temperature must be a finite number, got nan",
       "--temperature must be a finite number, got nan"},
      {"--length-penalty 11", "length_penalty must be between -10 and 10",
       "--length-penalty must be between -10 and 10 (1 scores by mean log-probability, > 1 favours longer "
       "summaries), got 11"},
      // The offline tool said validate()'s "no_repeat_ngram_size is -2; set it >= 0", not the flag.
      {"--no-repeat-ngram-size -2", "no_repeat_ngram_size must be >= 0 (0 disables it), got -2",
       "--no-repeat-ngram-size must be >= 0 (0 disables it), got -2"},
  };
  expect_both_refuse_each(client, tool, doc(0), bad);
}

// srformer-client and srformer summarize take --bad-word WORD alike, repeatable: the summary's first word
// and a phrase banned give the same summary served and offline, another than without them; both refuse the
// model's EOS written out, with the same words.
TEST_F(EndToEnd, ClientAndOfflineToolTakeBadWordAlike) {
  auto server = start();
  const std::string client = kClient + " --target " + server->target() + " --json ";
  const std::string tool = kTool + " summarize --model " + model_dir_.string() + " --json ";
  const std::string args = "--max-new-tokens 20 " + doc(0);
  const auto plain = json_output(run_command(client + args));
  const std::string summary = plain.value("summary", "");
  const std::string word = first_word(summary);
  ASSERT_GE(word.size(), 2u) << "summary: " << summary;
  const std::string flags = "--bad-word " + word + " --bad-word 'the cat' ";
  const auto served = json_output(run_command(client + flags + args));
  EXPECT_EQ(json_output(run_command(tool + flags + args))["token_ids"], served["token_ids"]) << word;
  EXPECT_NE(served["token_ids"], plain["token_ids"]) << "'" << word << "' banned";
  expect_both_refuse(client, tool, "--bad-word '</s>' " + doc(0),
                     "bad_words[0] \"</s>\" holds the end-of-sequence token '</s>'",
                     "--bad-word \"</s>\" holds the end-of-sequence token '</s>'");
}

// srformer-client and srformer summarize take diverse beam search's flags under the same names and give the
// same summaries and alternatives with them; the groups' penalty changes the candidates here, and both refuse
// groups that do not divide the beams, saying what to fix.
TEST_F(EndToEnd, ClientAndOfflineToolTakeTheDiverseBeamSearchFlagsAlike) {
  auto server = start();
  const std::string client = kClient + " --target " + server->target() + " --json ";
  const std::string tool = kTool + " summarize --model " + model_dir_.string() + " --json ";
  // The best sequence and every alternative's.
  const auto candidates = [](const CommandResult& r) {
    auto j = json_output(r);
    nlohmann::json all = nlohmann::json::array({j["token_ids"]});
    for (const auto& a : j["alternatives"]) all.push_back(a["token_ids"]);
    return all;
  };
  const std::string beams = "--max-new-tokens 20 --num-beams 4 --num-return-sequences 4 ";
  const std::string diverse = "--num-beam-groups 4 --diversity-penalty 4 ";
  bool changed = false;
  for (int i = 0; i < 2; ++i) {
    const auto served = candidates(run_command(client + beams + diverse + doc(i)));
    EXPECT_EQ(candidates(run_command(tool + beams + diverse + doc(i))), served) << "doc " << i;
    ASSERT_EQ(served.size(), 4u) << "doc " << i;
    changed = changed || served != candidates(run_command(client + beams + doc(i)));
  }
  EXPECT_TRUE(changed) << "the groups changed no candidates";
  const std::vector<Refusal> bad = {
      {"--num-beams 4 --num-beam-groups 3", "num_beam_groups is 3 but num_beams (4) must be a multiple of it",
       "num_beam_groups is 3 but num_beams (4) must be a multiple of it"},
      {"--num-beams 4 --diversity-penalty 1", "diversity_penalty is 1 with num_beam_groups 1",
       "diversity_penalty is 1 with num_beam_groups 1"},
      {"--num-beams 4 --num-beam-groups 2 --do-sample", "group beam search does not sample",
       "group beam search does not sample"},
      {"--diversity-penalty -1", "diversity_penalty must be a finite number >= 0 (0 disables it), got -1",
       "--diversity-penalty must be a finite number >= 0 (0 disables it), got -1"},
      {"--num-beam-groups 0", "num_beam_groups must be >= 1 (1 is ordinary beam search), got 0",
       "--num-beam-groups must be >= 1 (1 is ordinary beam search), got 0"},
  };
  expect_both_refuse_each(client, tool, doc(0), bad);
}

// srformer-client --json --stream and srformer summarize --json --stream write the same token deltas: each
// {"token_id", "text", "step", "segment", "logprob"} as TokenDelta (the offline tool wrote the first three
// only), and the same usage.segments; greedy, beams and sampling alike.
TEST_F(EndToEnd, ClientAndOfflineToolStreamTheSameJson) {
  auto server = start();
  const std::string client = kClient + " --target " + server->target() + " --json --stream ";
  const std::string tool = kTool + " summarize --model " + model_dir_.string() + " --json --stream ";
  std::set<int64_t> segments;  // the steps' segments seen: the schedule moves through several here
  for (const std::string options :
       {"--max-new-tokens 20 ", "--max-new-tokens 20 --num-beams 4 ",
        "--max-new-tokens 20 --do-sample --temperature 1.5 --seed 3 ", "--max-new-tokens 20 --expected-length 6 "}) {
    for (int i = 0; i < 2; ++i) {
      const auto served = json_output(run_command(client + options + doc(i)));
      const auto offline = json_output(run_command(tool + options + doc(i)));
      ASSERT_TRUE(served.contains("stream")) << options;
      ASSERT_FALSE(served["stream"].empty()) << options;
      EXPECT_EQ(offline["stream"], served["stream"]) << options << "doc " << i;
      EXPECT_EQ(offline["usage"]["segments"], served["usage"]["segments"]) << options << "doc " << i;
      for (const auto& delta : served["stream"]) segments.insert(delta["segment"].get<int64_t>());
    }
  }
  EXPECT_GT(segments.size(), 2u);
}

// `srformer eval` takes every option of the request that acts without sampling under the client's and
// `srformer summarize`'s flag names, and gives each document the summary the server gives it with them (it
// took only --max-new-tokens, --min-new-tokens, --num-beams, --length-penalty and --no-repeat-ngram-size:
// the others were "unknown option"). A bad value is refused in summarize's words, and a sampling flag (or
// --num-return-sequences) saying that eval never samples.
TEST_F(EndToEnd, ClientAndEvalTakeTheSearchFlagsAlike) {
  auto server = start();
  const std::string client = kClient + " --target " + server->target() + " --json ";
  const auto summary = [](const CommandResult& r) { return json_output(r).value("summary", std::string("?")); };
  const fs::path data = work_ / "eval_flags.jsonl";
  {
    std::ofstream out(data);
    for (int i = 0; i < 3; ++i) {
      out << nlohmann::json{{"id", "d" + std::to_string(i)}, {"document", read(doc(i))}, {"summary", "a b c"}}.dump()
          << "\n";
    }
  }
  const std::string eval = kTool + " eval " + model_dir_.string() + " " + data.string() + " --out " +
                           (work_ / "eval_flags.out").string() + " --batch 2 --bootstrap 10 ";
  const auto predictions = [&](const std::string& flags) {
    const auto r = run_command(eval + flags + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << flags << ": " << r.out;
    std::vector<std::string> out;
    std::ifstream in(work_ / "eval_flags.out" / "predictions.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)["prediction"]);
    return out;
  };
  // The first word of doc(0)'s summary, to ban.
  const std::string word = first_word(summary(run_command(client + "--max-new-tokens 20 " + doc(0))));
  ASSERT_GE(word.size(), 2u);
  // The flags, and whether they change a summary here: the tiny model's beams end too rarely for the early
  // stopping modes to (the beam searcher's tests hold what they do).
  const std::vector<std::tuple<std::string, std::string, bool>> cases = {
      {"--max-new-tokens 20 --num-beams 4 --length-penalty 4 ", "--early-stopping", false},
      {"--max-new-tokens 20 --num-beams 4 --length-penalty 4 ", "--early-stopping-never", false},
      {"--max-new-tokens 20 --num-beams 4 ", "--num-beam-groups 4 --diversity-penalty 4", true},
      {"--max-new-tokens 20 ", "--repetition-penalty 4", true},
      {"--max-new-tokens 20 --num-beams 2 ", "--encoder-repetition-penalty 4", true},
      {"--max-new-tokens 20 ", "--encoder-no-repeat-ngram-size 1", true},
      {"--max-new-tokens 20 ", "--bad-word " + word + " --bad-word 'the cat'", true},
      {"--max-new-tokens 20 ", "--expected-length 2", true},
      {"--max-new-tokens 20 ", "--no-sample", false},  // what eval does anyway, taken as summarize takes it
  };
  for (const auto& [base, flag, acts] : cases) {
    std::vector<std::string> served, plain;
    for (int i = 0; i < 3; ++i) {
      served.push_back(summary(run_command(client + base + flag + " " + doc(i))));
      if (acts) plain.push_back(summary(run_command(client + base + doc(i))));
    }
    EXPECT_EQ(predictions(base + flag), served) << flag;
    if (acts) {
      EXPECT_NE(served, plain) << flag << " changed no summary";
    }
  }
  const std::string tool = kTool + " summarize --model " + model_dir_.string() + " ";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--num-beams 4 --num-beam-groups 3", "num_beam_groups is 3 but num_beams (4) must be a multiple of it"},
      {"--diversity-penalty -1", "--diversity-penalty must be a finite number >= 0 (0 disables it), got -1"},
      {"--num-beam-groups 0", "--num-beam-groups must be >= 1 (1 is ordinary beam search), got 0"},
      {"--no-repeat-ngram-size -2", "--no-repeat-ngram-size must be >= 0 (0 disables it), got -2"},
      {"--encoder-no-repeat-ngram-size -1", "--encoder-no-repeat-ngram-size must be >= 0 (0 disables it), got -1"},
      {"--encoder-repetition-penalty 0", "encoder_repetition_penalty is 0; set it between 1e-4"},
      {"--repetition-penalty nan", "repetition_penalty is nan; set it between 1e-4"},
      {"--length-penalty 11", "--length-penalty must be between -10 and 10"},
      {"--bad-word '</s>'", "--bad-word \"</s>\" holds the end-of-sequence token '</s>'"},
      {"--expected-length 0", "--expected-length must be between 1 and "},
      // summarize said validate()'s "max_new_tokens is 0; set it between 1 and 4096", eval this.
      {"--max-new-tokens 0", "--max-new-tokens needs an integer >= 1, got '0'"},
      {"--min-new-tokens -1", "--min-new-tokens needs an integer >= 0, got '-1'"},
      {"--num-beams 0", "--num-beams needs an integer >= 1, got '0'"},
  };
  for (const auto& [flag, says] : bad) {
    const auto offline_refused = run_command(tool + flag + " " + doc(0) + " 2>&1");
    EXPECT_EQ(offline_refused.exit_code, 1) << flag;
    EXPECT_NE(offline_refused.out.find(says), std::string::npos) << offline_refused.out;
    const auto refused = run_command(eval + flag + " 2>&1");
    EXPECT_EQ(refused.exit_code, 1) << flag;
    EXPECT_NE(refused.out.find(says), std::string::npos) << flag << ": " << refused.out;
  }
  for (const std::string flag : {"--do-sample", "--temperature 2", "--top-p 0.5", "--num-return-sequences 2"}) {
    const auto refused = run_command(eval + flag + " 2>&1");
    EXPECT_NE(refused.exit_code, 0) << flag;
    EXPECT_NE(refused.out.find(flag.substr(0, flag.find(' ')) + " does not go with eval, which never samples"),
              std::string::npos)
        << refused.out;
  }
}

// A value the API cannot carry in its field's type is refused alike by srformer-client, srformer summarize and
// (for the options it takes) srformer eval, naming the value typed: the offline tools read 1e40 as inf and
// 1e-50 as 0 and then said "--temperature must be a finite number, got inf", "repetition_penalty is 0", or
// took --top-p 1e-50 and --top-k 4294967296 without a word, where the client says they are out of range.
TEST_F(EndToEnd, ClientAndOfflineToolsRefuseAValueTheApiCannotCarryAlike) {
  const std::string client = kClient + " --target 127.0.0.1:1 ";
  const std::string summarize = kTool + " summarize --model " + model_dir_.string() + " ";
  const fs::path data = work_ / "out_of_range.jsonl";
  std::ofstream(data) << nlohmann::json{{"id", "a"}, {"document", read(doc(0))}, {"summary", "a b"}}.dump() << "\n";
  const std::string eval = kTool + " eval " + model_dir_.string() + " " + data.string() + " --out " +
                           (work_ / "out_of_range").string() + " ";
  // The flag and value, and whether eval takes the flag.
  const std::vector<std::tuple<std::string, std::string, bool>> cases = {
      {"--temperature", "1e40", false},
      {"--top-p", "1e-50", false},
      {"--min-p", "-1e-50", false},
      {"--length-penalty", "1e40", true},
      {"--repetition-penalty", "1e-50", true},
      {"--encoder-repetition-penalty", "-1e39", true},
      {"--diversity-penalty", "1e400", true},
      {"--top-k", "4294967296", false},
      {"--num-beam-groups", "2147483648", true},
      {"--no-repeat-ngram-size", "99999999999999999999", true},
      // eval read these three as int64 ("invalid generation options: max_new_tokens is 4294967299").
      {"--max-new-tokens", "4294967299", true},
      {"--min-new-tokens", "-2147483649", true},
      {"--num-beams", "2147483648", true},
  };
  for (const auto& [flag, value, in_eval] : cases) {
    const std::string type =
        value.find_first_not_of("-0123456789") == std::string::npos ? "an int32 field" : "a float32 field";
    const std::string says = flag + " " + value + " is out of range (" + type + ")";
    std::vector<std::string> commands = {client + flag + " " + value + " " + doc(0),
                                         summarize + flag + " " + value + " " + doc(0)};
    if (in_eval) commands.push_back(eval + flag + " " + value);
    for (const auto& command : commands) {
      const auto r = run_command(command + " 2>&1");
      EXPECT_NE(r.exit_code, 0) << command << ": " << r.out;
      EXPECT_NE(r.out.find(says), std::string::npos) << command << ": " << r.out;
    }
  }
}

// With --log-json (a flag, or the config file's log_json) a configuration the server refuses is told in a
// JSON line as the rest of its log, whether the flag comes before or after the bad one and whatever the
// level; it was plain text ("srformer-server: ..."), which a shipper parsing JSON lines does not read.
TEST_F(EndToEnd, ConfigurationErrorsAreJsonLinesWithLogJson) {
  const auto json_line = [](const std::string& out) {
    const auto j = nlohmann::json::parse(out, nullptr, false);
    return !j.is_discarded() && j.is_object() && j.value("level", "") == "critical" ? j.value("msg", "") : "";
  };
  const std::string file = (work_ / "log-json.json").string();
  std::ofstream(file) << R"({"log_json": true})";
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--log-json --model nodir", "NAME=DIR"},                                    // parsing
           {"--model nodir --log-json true", "NAME=DIR"},                               // after the bad flag
           {"--log-json --log-level off --model x=/m --model x=/n", "is given twice"},  // validate(), level off
           {"--log-json --log-level loud --model x=/m", "--log-level must be"},
           {"--config " + file + " --model x=/m --model x=/n", "is given twice"},  // the file's
           {"--config " + file + " --no-such-flag 1", "unknown flag --no-such-flag"}}) {
    const auto r = run_command(kServer + " " + args + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << args;
    const std::string msg = json_line(r.out);
    EXPECT_NE(msg.find(says), std::string::npos) << args << ": " << r.out;
  }
  // A start that fails after the flags passed (exit 1) is a JSON line as well, also with --log-level off.
  const auto failed_start =
      run_command(kServer + " --log-json --log-level off --model x=/nonexistent/dir --metrics-listen '' --listen " +
                  "127.0.0.1:0 2>&1");
  EXPECT_EQ(failed_start.exit_code, 1);
  EXPECT_NE(json_line(failed_start.out).find("/nonexistent/dir"), std::string::npos) << failed_start.out;
  // Without it, or with --log-json false over the file's true, plain text as before.
  for (const std::string& args :
       std::vector<std::string>{"--model nodir", "--config " + file + " --log-json false --model nodir"}) {
    const auto r = run_command(kServer + " " + args + " 2>&1");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out.rfind("srformer-server: ", 0), 0u) << args << ": " << r.out;
  }
}

TEST_F(EndToEnd, BadFlagsExplainThemselves) {
  auto r = run_command(kServer + " --model nodir 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("NAME=DIR"), std::string::npos);
  r = run_command(kServer + " --model x=/nonexistent/dir --metrics-listen '' --listen 127.0.0.1:0 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("/nonexistent/dir"), std::string::npos) << r.out;
  // A start that fails says why even with logging off (it exited 1 without a word).
  r = run_command(kServer +
                  " --log-level off --model x=/nonexistent/dir --metrics-listen '' --listen 127.0.0.1:0 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("/nonexistent/dir"), std::string::npos) << r.out;
  EXPECT_EQ(run_command(kServer + " --help").exit_code, 0);
  EXPECT_EQ(run_command(kClient + " --help").exit_code, 0);
  r = run_command(kClient + " --retries 5 " + doc(0) + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--retries must be between 0 and 4 (gRPC makes at most 5 attempts), got 5"), std::string::npos)
      << r.out;
  r = run_command(kClient + " --seed -1 " + doc(0) + " 2>&1");  // it was sent as 2^64 - 1
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--seed needs an integer from 0 to 18446744073709551615, got '-1'"), std::string::npos) << r.out;
  // The top of the proto's uint64 range is read (it was refused from 2^63): the flags pass, the call
  // then finds no server.
  r = run_command(kClient + " --target 127.0.0.1:1 --deadline-ms 200 --seed 18446744073709551615 " + doc(0) + " 2>&1");
  EXPECT_EQ(r.out.find("--seed"), std::string::npos) << r.out;
  EXPECT_NE(r.exit_code, 2) << r.out;
  // Values a flag cannot carry, and arguments that were ignored without a word.
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--max-new-tokens 4294967299 " + doc(0), "--max-new-tokens 4294967299 is out of range"},       // ran 3
           {"--load --concurrency 50000 --requests 3 " + doc(0), "--concurrency must be from 1 to 4096"},  // abort
           {"--load --concurrency 1 --duration nan " + doc(0), "--duration must be more than 0"},  // ran forever
           {"--deadline-ms 9223372036854775807 " + doc(0), "--deadline-ms must be from 0 (no deadline) to 86400000"},
           {doc(0) + " " + doc(1), "one FILE at a time (got 2); --batch"},
           {"--health " + doc(0), "--health reads no FILE"},
           {"--tls --insecure --ca " + doc(0) + " " + doc(0), "--insecure (plaintext) and --tls/--ca do not go"}}) {
    r = run_command(kClient + " " + args + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << ": " << r.out;
  }
  r = run_command(kClient + " --deadline-ms -5 " + doc(0) + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--deadline-ms must be from 0 (no deadline) to 86400000 (a day), got -5"), std::string::npos)
      << r.out;
  r = run_command(kClient + " --health --list-models 2>&1");  // one of them ran, silently
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("give one"), std::string::npos) << r.out;
  r = run_command(kServer + " --model tiny=" + model_dir_.string() + " --listen 127.0.0.1:99999 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;  // gRPC would have listened on 34463
  EXPECT_NE(r.out.find("--listen needs HOST:PORT with a port from 0 to 65535"), std::string::npos) << r.out;
}

// A stop signal while the models load ends the server at once, with exit 0: it stayed pending until the
// server listened, so a pod stopped during a minutes-long load waited for it (here: forever, as reading
// a config.json that is a FIFO nobody writes never ends).
TEST_F(EndToEnd, AStopSignalWhileLoadingEndsTheServerAtOnce) {
  const fs::path dir = work_ / "loads_forever";
  fs::create_directories(dir);
  ASSERT_EQ(mkfifo((dir / "config.json").c_str(), 0600), 0);
  const std::string log = (work_ / "loads_forever.log").string();
  // The metrics line comes before the models load; the signal goes after it.
  // A server still there 10 s after the signal is killed (it would hold the test forever).
  const auto r = run_command("bash -c '" + kServer + " --model stuck=" + dir.string() +
                             " --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 > " + log +
                             " 2>&1 & pid=$!; for i in $(seq 300); do grep -q \"metrics on\" " + log +
                             " && break; sleep 0.1; done; kill -TERM $pid; for i in $(seq 100); do kill -0 $pid "
                             "2>/dev/null || break; sleep 0.1; done; if kill -0 $pid 2>/dev/null; then kill -KILL "
                             "$pid; wait $pid; echo still running; else wait $pid; echo rc=$?; fi'");
  EXPECT_EQ(r.out, "rc=0\n") << r.out;
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("received SIGTERM while starting; exiting before serving"), std::string::npos)
      << text.str();
}

// The same while the server reads its --config file, before the models: it took no stop signal then (they
// are blocked from before main() and were first taken once the flags were read), so a config file that does
// not come (a FIFO nobody writes, a hung network mount) left a server that only SIGKILL ended.
TEST_F(EndToEnd, AStopSignalWhileReadingTheConfigFileEndsTheServerAtOnce) {
  const fs::path config = work_ / "config_never_written.json";
  ASSERT_EQ(mkfifo(config.c_str(), 0600), 0);
  const std::string log = (work_ / "config_never_written.log").string();
  const auto signalled = [&](const std::string& flags) {
    // The signal goes once the server waits for a writer to open the FIFO (the kernel's wait_for_partner).
    return run_command("bash -c '" + kServer + flags + " --config " + config.string() + " --listen 127.0.0.1:0 > " +
                       log +
                       " 2>&1 & pid=$!; for i in $(seq 600); do [ \"$(cat /proc/$pid/wchan 2>/dev/null)\" = "
                       "wait_for_partner ] && break; sleep 0.1; done; kill -TERM $pid; for i in $(seq 100); do "
                       "kill -0 $pid 2>/dev/null || break; sleep 0.1; done; if kill -0 $pid 2>/dev/null; then "
                       "kill -KILL $pid; wait $pid; echo still running; else wait $pid; echo rc=$?; fi'");
  };
  const auto r = signalled("");
  EXPECT_EQ(r.out, "rc=0\n") << read(log);
  EXPECT_EQ(read(log), "srformer-server: received SIGTERM while starting; exiting before serving\n");
  // With --log-json the line is JSON, as a configuration error's; it was the plain text above, which a
  // shipper parsing JSON lines does not read.
  const auto json = signalled(" --log-json");
  EXPECT_EQ(json.out, "rc=0\n") << read(log);
  const std::string said = read(log);
  ASSERT_FALSE(said.empty());
  EXPECT_EQ(said.back(), '\n');
  EXPECT_EQ(said.find('\n'), said.size() - 1) << said;  // one line
  const auto line = nlohmann::json::parse(said, nullptr, false);
  ASSERT_TRUE(line.is_object()) << said;
  EXPECT_EQ(line.value("level", ""), "info") << said;
  EXPECT_EQ(line.value("msg", ""), "srformer-server: received SIGTERM while starting; exiting before serving") << said;
  EXPECT_TRUE(line.contains("ts") && line.contains("thread")) << said;
}

// A stop signal as the server's libraries initialize, before its main() (LibTorch's and gRPC's static
// initializers: a second and more on a loaded host), killed it with the signal's default action, exit 143,
// where one a moment later ended the start with exit 0 and a line in the log.
TEST_F(EndToEnd, AStopSignalAsTheLibrariesInitializeEndsTheStartCleanly) {
  const std::string log = (work_ / "signalled_on_load.log").string();
  // Through env, so that timeout (there in case the signal were lost and the server served on) does not
  // load the library itself. An ASan build would refuse a library preloaded before its runtime.
  const auto r = run_command(
      "timeout -s KILL 120 env ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\" "
      "LD_PRELOAD=" SRFORMER_SIGTERM_ON_LOAD " " +
      kServer + " --model tiny=" + model_dir_.string() + " --listen 127.0.0.1:0 --metrics-listen '' > " + log +
      " 2>&1; echo rc=$?");
  EXPECT_EQ(r.out, "rc=0\n") << read(log);
  EXPECT_NE(read(log).find("received SIGTERM while starting; exiting before serving"), std::string::npos) << read(log);
}

// SRFORMER_SPM_PLUGIN naming a file that is not there was skipped without a word: the start failed with
// "set SRFORMER_SPM_PLUGIN to its path. Tried:" and nothing after it, where the variable was set.
TEST_F(EndToEnd, AnSpmPluginPathThatIsNotThereIsNamed) {
  const std::string plugin = (work_ / "nowhere" / "libsrformer_spm.so").string();
  const auto r = run_command("SRFORMER_SPM_PLUGIN=" + plugin + " " + kServer + " --model tiny=" + model_dir_.string() +
                             " --listen 127.0.0.1:0 --metrics-listen '' --warm-up false 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("set SRFORMER_SPM_PLUGIN to its path. Tried:\\n  " + plugin + ": no such file"),
            std::string::npos)
      << r.out;
}

// A second server on a taken port stops before loading its models, saying so; gRPC's default
// SO_REUSEPORT let it start and take half of the first one's connections.
TEST_F(EndToEnd, ASecondServerOnATakenPortStopsAtOnce) {
  auto first = start();
  const auto r = run_command(kServer + " --model tiny=" + model_dir_.string() + " --listen " + first->target() +
                             " --metrics-listen '' 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  // The system's reason, in our line; gRPC's own multi-line error tree (glog style, "E1128 ...
  // chttp2_server.cc") no longer comes first.
  EXPECT_NE(r.out.find("cannot listen on " + first->target() + ": Address already in use"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("chttp2_server.cc"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("model tiny:"), std::string::npos) << "it loaded the model first:\n" << r.out;
  // The first one serves on.
  const auto ok = run_command(kClient + " --target " + first->target() + " --max-new-tokens 2 " + doc(0));
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
}

// `srformer init-model` writes the shape it is asked for, BART included (byte-level tokenizer, no corpus),
// and the model it writes serves; every tool's numeric flag is read whole, and a bad one is refused
// with the flag's name (std::stoll alone said "stoll", took "12x" as 12 and -1 as a seed of 2^64-1).
TEST_F(EndToEnd, OfflineToolsWriteTheShapeAskedAndNameABadFlag) {
  const std::string dir = (work_ / "tiny_bart").string();
  auto made = run_command(kTool + " init-model --arch bart --layers 1 --d-model 16 --heads 2 --d-ff 24 --vocab 300 " +
                          dir + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  auto inspected = run_command(kTool + " inspect " + dir + " --input-tokens 20 --new-tokens 3");
  ASSERT_EQ(inspected.exit_code, 0) << inspected.out;
  const auto j = nlohmann::json::parse(inspected.out);
  EXPECT_EQ(j["architecture"], "bart");
  EXPECT_EQ(j["d_model"], 16);
  EXPECT_EQ(j["heads"], 2);
  EXPECT_EQ(j["layers"], nlohmann::json({1, 1}));
  EXPECT_EQ(j["vocab_size"], 300);
  EXPECT_EQ(j["notes"], nlohmann::json::array()) << inspected.out;
  // Past the model's limits (256 positions) inspect measures at the limits: said, not silently clamped.
  inspected = run_command(kTool + " inspect " + dir + " --input-tokens 100000000 --new-tokens 300 2>&1");
  ASSERT_EQ(inspected.exit_code, 0) << inspected.out;
  EXPECT_NE(inspected.out.find("note: --input-tokens 100000000 is more than the model's input limit of 256: measured "
                               "at 256 input tokens"),
            std::string::npos)
      << inspected.out;
  EXPECT_NE(inspected.out.find("note: --new-tokens 300 is more than the model's 256 decoder positions"),
            std::string::npos)
      << inspected.out;
  inspected = run_command(kTool + " inspect " + dir + " --input-tokens 100000000 --new-tokens 300 2>/dev/null");
  EXPECT_EQ(nlohmann::json::parse(inspected.out)["notes"].size(), 2u) << inspected.out;
  auto summary = run_command(kTool + " summarize --model " + dir + " --max-new-tokens 4 --min-new-tokens 4 --json " +
                             doc(0) + " 2>&1");
  ASSERT_EQ(summary.exit_code, 0) << summary.out;
  EXPECT_EQ(nlohmann::json::parse(summary.out)["token_ids"].size(), 4u) << summary.out;
  // --json with --stream stays one JSON object, the pieces in its "stream" (the text came first).
  auto streamed = run_command(kTool + " summarize --model " + dir +
                              " --max-new-tokens 4 --min-new-tokens 4 --json --stream " + doc(0));
  ASSERT_EQ(streamed.exit_code, 0) << streamed.out;
  const auto sj = nlohmann::json::parse(streamed.out);
  ASSERT_EQ(sj["stream"].size(), 4u) << streamed.out;
  std::string joined;
  for (const auto& piece : sj["stream"]) joined += piece["text"].get<std::string>();
  EXPECT_EQ(joined, sj["summary"].get<std::string>());
  EXPECT_EQ(sj["stream"][3]["step"], 3);
  EXPECT_EQ(sj["stream"][0]["token_id"], sj["token_ids"][0]);

  const std::string t5 = model_dir_.string();
  std::vector<std::pair<std::string, std::string>> refused = {
      {"summarize --model " + t5 + " --max-new-tokens 12x " + doc(0), "--max-new-tokens needs an integer, got '12x'"},
      {"summarize --model " + t5 + " --seed -1 " + doc(0), "--seed needs an integer from 0"},
      {"summarize --model " + t5 + " --temperature hot " + doc(0), "--temperature needs a number, got 'hot'"},
      {"inspect " + t5 + " --input-tokens 0", "--input-tokens needs an integer >= 1"},
      {"inspect " + t5 + " --new-tokens", "--new-tokens needs a value"},
      {"init-model --vocab many --corpus " + doc(0) + " " + dir + "_x", "--vocab needs an integer >= 1, got 'many'"},
      {"init-model --shape bart-base --corpus " + doc(0) + " " + dir + "_x", "needs no corpus"},
      {"init-model --arch bart --vocab 100 " + dir + "_x", "--vocab must be at least 261"},
      {"init-model --arch bart --vocab 2000000000 " + dir + "_x", "--vocab must be at most 65797"},
      {"init-model --shape t5-small --arch bart " + dir + "_x", "not --arch bart"},
      {"init-model --arch bart " + t5, t5 + " exists and is not an empty directory"},
      {"convert " + t5 + " " + dir + "_x --segment-size 0", "--segment-size needs an integer >= 1"},
      // summarize's --model: it was taken for SRC_DIR, and the message named the DST_DIR after it.
      {"convert --model " + t5 + " " + dir + "_x", "convert has no --model: it takes the model as its first argument"},
      {"convert " + t5 + " " + dir + "_x --segments 4", "unknown option '--segments' (see --help)"},
      // Flags that shape a new variant, without one, were dropped without a word.
      {"convert " + t5 + " " + dir + "_x --raf-init-weight-scale 0.01", "give --cross-attention too"},
      {"convert " + t5 + " " + dir + "_x --seed 3", "give --cross-attention too"},
      {"convert " + t5 + " " + dir + "_x --cross-attention full --segment-size 8", "full has no segments"},
      {"convert " + t5 + " " + dir + "_x --cross-attention segmented --segment-size 8 --raf-init-weight-scale 0.1",
       "segmented cross-attention has none"},
      // An SRformer model's RAF parameters are trained: a new start is not what a scale can mean there.
      {"convert " + t5 + " " + dir + "_x --cross-attention srformer --segment-size 8 --raf-init-weight-scale 0.1",
       "so they are trained; --raf-init-weight-scale only sets how new ones start"},
      {"bench --batch 1,x", "--batch needs an integer, got 'x'"},
      {"bench --only bogus", "--only takes decode, encode, cross, linear, search or generate, got 'bogus'"},
      {"bench --model nope", "--model takes bart-base-srformer-s64, bart-base-full or t5-small-srformer-s64"},
      {"summarize --model " + t5 + " --threads 100000 " + doc(0),
       "--threads 100000 is more than 4x the CPUs this process may use"},
      {"summarize --model " + t5 + " " + doc(0) + " " + doc(1), "one document at a time"},
      // The model as inspect, eval and train take it, first: it was taken for a second document.
      {"summarize " + t5 + " " + doc(0), "'" + t5 + "' is a directory: summarize takes the model as --model " + t5},
      {"summarize " + t5, "'" + t5 + "' is a directory: summarize takes the model as --model " + t5},
      {"summarize --model " + t5 + " --expected-length 100000000000 " + doc(0),
       "--expected-length must be between 1 and 16384, got 100000000000"},
      {"inspect " + t5 + " --new-tokens 9000000000", "--new-tokens 9000000000 is more than a request may ask (4096)"},
      {"convert " + t5 + " " + dir + "_x --raf-init-weight-scale 1e300 --cross-attention srformer --segment-size 4",
       "--raf-init-weight-scale must be in [0, 1000]"},
      {"summarize --model " + t5 + " --device gpu " + doc(0), "--device must be cpu, cuda or cuda:N, got 'gpu'"},
      {"eval " + t5 + " " + doc(0) + " --device cuda:x", "--device must be cpu, cuda or cuda:N, got 'cuda:x'"},
      {"bench --device cpu --dtype fp16", "--dtype fp16 is for --device cuda"},
      {"check-fixture " + dir + " --device tpu", "--device must be cpu, cuda or cuda:N, got 'tpu'"},
      // LibTorch keeps a device index in 8 bits: cuda:300 ran on cuda:44, cuda:256 on cuda:0.
      {"summarize --model " + t5 + " --device cuda:300 " + doc(0), "--device cuda:N takes N from 0 to 127"},
      {"bench --device cuda:256 --quick", "--device cuda:N takes N from 0 to 127, got 'cuda:256'"},
      {"train " + t5 + " " + doc(0) + " --out " + dir + "_x --device cuda:300",
       "--device cuda:N takes N from 0 to 127"},
  };
  // Every subcommand words a flag it does not take alike (inspect and init-model said "unexpected argument").
  for (const std::string command :
       {"summarize", "inspect", "init-model", "convert", "eval", "train", "bench", "check-fixture"}) {
    refused.push_back({command + " --x", "unknown option '--x' (see --help)"});
  }
  refused.push_back({"inspect " + t5 + " " + t5, "unexpected argument '" + t5 + "': inspect takes one DIR"});
  refused.push_back(
      {"init-model " + dir + "_x " + dir + "_y", "unexpected argument '" + dir + "_y': init-model takes one OUT_DIR"});
  if (!torch::cuda::is_available()) {  // a CUDA device asked of a build or machine without one
    refused.push_back({"summarize --model " + t5 + " --device cuda " + doc(0), "device cuda: this build or machine"});
    refused.push_back({"bench --device cuda:1 --quick", "device cuda:1: this build or machine has no CUDA"});
  }
  const std::string blank = (work_ / "blank.txt").string();
  std::ofstream(blank) << "  \n\t\n";
  refused.push_back(
      {"init-model --corpus " + blank + " " + dir + "_x", blank + " holds no text to train the tokenizer"});
  // An unreadable corpus said "holds no text ... (only white space)" too.
  const std::string missing = (work_ / "missing.txt").string();
  refused.push_back(
      {"init-model --corpus " + missing + " " + dir + "_x", "cannot read --corpus '" + missing + "': no such file"});
  refused.push_back({"init-model --corpus " + work_.string() + " " + dir + "_x",
                     "cannot read --corpus '" + work_.string() + "': a directory"});
  // A full-attention model has no segments (it printed "segment 8" and wrote none).
  refused.push_back({"init-model --cross-attention full --segment-size 8 --corpus " + doc(0) + " " + dir + "_x",
                     "--cross-attention full has no segments"});
  refused.push_back(
      {"init-model --init-std -1 --corpus " + doc(0) + " " + dir + "_x", "--init-std must be a number > 0"});
  // Ignored without a validation file (--eval-every is the trainer's own check, tests/train).
  refused.push_back({"train " + t5 + " " + doc(0) + " --out " + dir + "_x --eval-examples 5",
                     "--eval-examples needs --validation FILE"});
  refused.push_back(
      {"train " + t5 + " " + doc(0) + " --out " + dir + "_x --eval-batch 4", "--eval-batch needs --validation FILE"});
  // train's --seed takes the whole uint64 range, as the other tools' (it stopped at 2^63 - 1).
  refused.push_back({"train " + t5 + " " + doc(0) + " --out " + dir + "_x --seed 18446744073709551616",
                     "--seed needs an integer from 0 to 18446744073709551615"});
  for (const auto& [args, message] : refused) {
    auto r = run_command(kTool + " " + args + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << ": " << r.out;
  }
  EXPECT_FALSE(fs::exists(dir + "_x")) << "a refused command wrote its output (or left a partial one)";
}

// init-model's text copy of a JSONL corpus that cannot be written whole (a file size limit here, as a full
// disk) fails, naming it and why, and leaves no directory: the write went unchecked, and SentencePiece was
// trained on the part that was written.
TEST_F(EndToEnd, InitModelsCorpusCopyCutShortFailsNamingIt) {
  const auto split = work_ / "large_split.jsonl";
  {
    std::ofstream f(split);
    for (int i = 0; i < 200; ++i) {
      f << nlohmann::json{{"id", std::to_string(i)}, {"document", synthetic_text(6, 100 + i)}, {"summary", "a cat."}}
               .dump()
        << "\n";
    }
  }
  ASSERT_GT(fs::file_size(split), 32u * 1024);
  const auto out = work_ / "cut_corpus_model";
  // SIGXFSZ ignored: a write past the limit fails (EFBIG) as on a full disk, instead of killing the tool.
  auto r = run_command("trap '' XFSZ; ulimit -f 16; " + kTool + " init-model --corpus " + split.string() + " " +
                       out.string() + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot write " + (out / "corpus.txt").string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("File too large"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out)) << r.out;
}

// A dataset split is read as one by its content, not only by a .jsonl name: named .json, or piped in
// (`<(zcat train.jsonl.gz)`), it was taken for text and the tokenizer learnt its JSON (quotes, braces, the
// field names, and \uXXXX escapes for every non-ASCII character as Python's json.dumps writes them). A pipe
// is read once: the check for text took its first line, and SentencePiece learnt from the rest.
TEST_F(EndToEnd, InitModelReadsASplitByItsContentAlsoNamedJsonOrPiped) {
  const auto split = work_ / "escaped_split.jsonl";
  {
    const char* words[] = {"cat", "sat", "on", "the", "mat", "dog", "ran", "park", "sun", "tree"};
    std::ofstream f(split);
    for (int i = 0; i < 60; ++i) {
      std::string text;
      for (int w = 0; w < 12; ++w) text += std::string(" ") + words[(i * 7 + w * 3) % 10];
      // As Python's json.dumps writes them (ensure_ascii): "caf\u00e9".
      f << "{\"id\": " << i << R"(, "document": "caf\u00e9 na\u00efve)" << text << R"(", "summary": "a caf\u00e9."})"
        << "\n";
    }
  }
  const auto as_json = work_ / "escaped_split.json";
  fs::copy_file(split, as_json, fs::copy_options::overwrite_existing);
  // The tokenizer's pieces, of a model init-model writes from `corpus`.
  const auto pieces = [&](const std::string& corpus, const std::string& name) {
    const auto out = work_ / name;
    const auto r =
        run_command("bash -c '" + kTool + " init-model --vocab 200 --corpus " + corpus + " " + out.string() + "' 2>&1");
    EXPECT_EQ(r.exit_code, 0) << corpus << ": " << r.out;
    EXPECT_FALSE(fs::exists(out / "corpus-input")) << corpus;  // the copies it read are removed
    EXPECT_FALSE(fs::exists(out / "corpus.txt")) << corpus;
    std::vector<std::string> all;
    if (r.exit_code != 0) return all;
    const auto tokenizer = load_tokenizer(out);
    for (int64_t id = 0; id < tokenizer->vocab_size(); ++id) all.push_back(tokenizer->id_to_token(id));
    return all;
  };
  const auto reference = pieces(split.string(), "split_jsonl_model");
  const auto has = [](const std::vector<std::string>& all, const std::string& part) {
    return std::any_of(all.begin(), all.end(), [&](const std::string& p) { return p.find(part) != std::string::npos; });
  };
  EXPECT_TRUE(has(reference, "\xC3\xA9"));  // é, which the file writes \u00e9
  for (const char* json : {"\"", "\\", "{", "document"}) EXPECT_FALSE(has(reference, json)) << json;
  EXPECT_TRUE(pieces(as_json.string(), "split_json_model") == reference) << "named .json";
  EXPECT_TRUE(pieces("<(cat " + split.string() + ")", "split_piped_model") == reference) << "piped";
  // A piped split with a bad line is named as it was given, not by the copy read.
  const auto r = run_command("bash -c '" + kTool + " init-model --corpus <(echo \"{\\\"document\\\": 1}\") " +
                             (work_ / "bad_piped_model").string() + "' 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("/dev/fd/"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("corpus-input"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(work_ / "bad_piped_model")) << r.out;
}

// SentencePiece skips a line longer than its max_sentence_length (4192 bytes by default), with a warning that
// --minloglevel=2 hid: a split's long paragraph was left out of the tokenizer's training, its characters
// unknown to it. Lines up to 64 KiB are now learnt, and longer ones counted in a note.
TEST_F(EndToEnd, InitModelLearnsLongParagraphsAndNamesLinesTooLongToLearn) {
  const auto split = work_ / "long_paragraph_split.jsonl";
  std::string paragraph;
  while (paragraph.size() < 3 * 4192) paragraph += "\xD0\xB6\xD1\x83\xD0\xBA ";  // "жук ", its only appearance
  {
    std::ofstream f(split);
    for (int i = 0; i < 40; ++i) {
      const std::string document = "the cat sat on the mat " + std::to_string(i) + (i == 7 ? "\n" + paragraph : "");
      f << nlohmann::json{{"id", std::to_string(i)}, {"document", document}, {"summary", "a cat."}}.dump() << "\n";
    }
  }
  const auto out = work_ / "long_paragraph_model";
  auto r = run_command(kTool + " init-model --vocab 100 --corpus " + split.string() + " " + out.string() + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("left out"), std::string::npos) << r.out;
  const auto tokenizer = load_tokenizer(out);
  bool learnt = false;
  for (int64_t id = 0; id < tokenizer->vocab_size(); ++id) {
    learnt = learnt || tokenizer->id_to_token(id).find("\xD0\xB6") != std::string::npos;
  }
  EXPECT_TRUE(learnt) << "the long paragraph's characters are not in the tokenizer";

  // Past the bound: counted and named; the other lines are learnt.
  const auto text = work_ / "too_long_line.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i) f << "the cat sat on the mat " << i << "\n";
    f << std::string(70000, 'x') << "\n";
  }
  r = run_command(kTool + " init-model --vocab 100 --corpus " + text.string() + " " +
                  (work_ / "too_long_line_model").string() + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("note: 1 line(s) of the corpus are longer than 65536 bytes and left out"), std::string::npos)
      << r.out;
}

// SentencePiece's own write of spiece.model is unchecked (a stream flushed when closed): cut short by a file
// size limit (as by a full disk), init-model failed with the parser's "Internal: ...ParseFromArray..." and no
// word of why. It now says which file SentencePiece did not write whole, and leaves no directory (and not the
// loader's "download it again", which was about a user's model).
TEST_F(EndToEnd, InitModelsTokenizerCutShortFailsNamingIt) {
  const auto out = work_ / "cut_tokenizer_model";
  auto r = run_command("trap '' XFSZ; ulimit -f 8; " + kTool + " init-model --vocab 300 --corpus " + doc(0) + " " +
                       out.string() + " 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("SentencePiece's trainer did not write " + (out / "spiece.model").string() + " whole"),
            std::string::npos)
      << r.out;
  // The file init-model has just written: no advice to download it (the loader's for a user's model).
  EXPECT_EQ(r.out.find("download it again"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out)) << r.out;
}

// --quick sets the decode figures' batches and steps unless --batch/--steps say otherwise, before or after it
// (given first, they were reset).
TEST_F(EndToEnd, BenchFlagsWinOverQuickInEitherOrder) {
  for (const std::string flags : {"--batch 2 --steps 7 --quick", "--quick --batch 2 --steps 7"}) {
    auto r = run_command(kTool + " bench --only decode --model t5-small-srformer-s64 --input-tokens 8 --threads 1 " +
                         "--json " + flags + " 2>/dev/null");
    ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.out;
    std::istringstream lines(r.out);
    int figures = 0;
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["batch"], 2) << flags << ": " << line;
      EXPECT_EQ(j["steps"], 7) << flags << ": " << line;
      ++figures;
    }
    EXPECT_EQ(figures, 1) << flags << ": " << r.out;
  }
  auto quick = run_command(kTool + " bench --only decode --model t5-small-srformer-s64 --input-tokens 8 --threads 1 " +
                           "--json --quick 2>/dev/null");
  ASSERT_EQ(quick.exit_code, 0) << quick.out;
  EXPECT_NE(quick.out.find(R"("batch":8)"), std::string::npos) << quick.out;
  EXPECT_NE(quick.out.find(R"("steps":4)"), std::string::npos) << quick.out;
}

// A --trace PREFIX that cannot be written is an error naming the file and why: LibTorch's profiler logged a
// stack trace per trace ("Could not open file", no path, no reason) and the bench exited 0 without them.
TEST_F(EndToEnd, ABenchTraceThatCannotBeWrittenIsAnError) {
  const auto file = work_ / "not-a-directory";
  std::ofstream(file) << "x\n";
  const std::string bench =
      kTool + " bench --only decode --model t5-small-srformer-s64 --input-tokens 8 --threads 1 --quick --batch 1 ";
  auto r = run_command(bench + "--trace " + (file / "trace").string() + " 2>&1 >/dev/null");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot write " + (file / "trace").string() + ".t5-small-srformer-s64.b1.encode.json"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Not a directory"), std::string::npos) << r.out;
  // One that can be written is, whole.
  const auto prefix = (work_ / "trace").string();
  auto traced = run_command(bench + "--trace " + prefix + " 2>&1 >/dev/null");
  ASSERT_EQ(traced.exit_code, 0) << traced.out;
  for (const char* part : {".encode.json", ".start.json", ".json"}) {
    const auto text = read(prefix + ".t5-small-srformer-s64.b1" + part);
    EXPECT_EQ(text.rfind("[", 0), 0u) << part << ": " << text.substr(0, 200);
    EXPECT_NE(text.find("]"), std::string::npos) << part;
  }
}

// Streams 40 seeded requests (seed 1, 2, ...) for several samples each from `model` at `target`: each sends
// each token once, with steps 0, 1, ... and text that adds up to the summary. Their final messages go to
// `finals` where given. Returns how many streams were the case the callers are for: the first sample ended on
// EOS before another sample, holding back an incomplete UTF-8 character (its summary ends with the U+FFFD the
// flush gives).
constexpr const char* kStreamDocuments[] = {"a package of tools", "is development"};  // even, odd seeds
int expect_streams_send_each_token_once(const std::string& target, const std::string& model,
                                        std::vector<srformer::v1::SummarizeResponse>* finals = nullptr) {
  const auto stub = srformer::v1::Summarizer::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  int held_back_at_eos = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    srformer::v1::SummarizeRequest req;
    req.set_model(model);
    req.set_document(kStreamDocuments[seed % 2]);
    auto* o = req.mutable_options();
    o->set_max_new_tokens(256);
    o->set_do_sample(true);
    o->set_seed(seed);
    o->set_temperature(0.3F);
    o->set_num_return_sequences(2 + static_cast<int32_t>(seed % 3));
    o->set_no_repeat_ngram_size(4);
    grpc::ClientContext ctx;
    auto reader = stub->SummarizeStream(&ctx, req);
    srformer::v1::SummarizeStreamResponse msg;
    std::vector<int64_t> ids;
    std::vector<int32_t> steps;
    std::string text;
    srformer::v1::SummarizeResponse final;
    while (reader->Read(&msg)) {
      if (msg.has_token()) {
        ids.push_back(msg.token().token_id());
        steps.push_back(msg.token().step());
        text += msg.token().text();
      } else {
        final = msg.final();
      }
    }
    const auto status = reader->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok()) return held_back_at_eos;
    SCOPED_TRACE("seed " + std::to_string(seed));
    EXPECT_EQ(ids, std::vector<int64_t>(final.token_ids().begin(), final.token_ids().end()));
    for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<int32_t>(i));
    EXPECT_EQ(text, final.summary());
    const std::string& summary = final.summary();
    const bool another_ran_on = std::any_of(final.alternatives().begin(), final.alternatives().end(),
                                            [&](const auto& a) { return a.token_ids_size() > final.token_ids_size(); });
    if (final.finish_reason() == srformer::v1::FINISH_REASON_EOS && another_ran_on && summary.size() >= 3 &&
        summary.compare(summary.size() - 3, 3, "\xEF\xBF\xBD") == 0) {
      ++held_back_at_eos;
    }
    if (finals != nullptr) finals->push_back(final);
  }
  std::printf(
      "%d of the 40 streams ended their first sample on EOS, before another, holding back part of a "
      "character\n",
      held_back_at_eos);
  return held_back_at_eos;
}

// A stream sends each token once, with steps 0, 1, ... and text that adds up to the summary, also where
// several samples are drawn (the first streams) and it ends on EOS while a byte-level BPE tokenizer holds
// back an incomplete UTF-8 character: that text was sent on a second copy of the EOS once the last sample
// ended. A random byte-level BART emits such bytes often; the seeds cover a few dozen endings.
TEST_F(EndToEnd, StreamsSendEachTokenOnceWhenSeveralSamplesAreDrawn) {
  const std::string bart = (work_ / "stream_bart").string();
  const auto made = run_command(kTool + " init-model --arch bart --cross-attention srformer --segment-size 8 " +
                                "--layers 2 --d-model 32 --heads 4 --vocab 300 --seed 3 " + bart + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  ServerProcess server(kServer, {"--model", "bs=" + bart, "--listen", "127.0.0.1:0", "--metrics-listen", ""},
                       (work_ / "stream_bart.log").string());
  EXPECT_GT(expect_streams_send_each_token_once(server.target(), "bs"), 0)
      << "no first sample ended on EOS before another holding back part of a character: nothing was tested";
}

// The same where the model lists several EOS ids and the samples end at one after the first
// ("eos_token_id": [1, 2]: BART's EOS 2 is the second): the first sample's end flushes the detokenizer
// there too. It did at the first id only, the held-back text then sent on a second copy of the EOS.
TEST_F(EndToEnd, StreamsSendEachTokenOnceWhenSamplesEndAtALaterEosId) {
  const std::string bart = (work_ / "stream_bart_eos_list").string();
  const auto made = run_command(kTool + " init-model --arch bart --cross-attention srformer --segment-size 8 " +
                                "--layers 2 --d-model 32 --heads 4 --vocab 300 --seed 3 " + bart + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const auto config = fs::path(bart) / "config.json";
  auto j = nlohmann::json::parse(std::ifstream(config));
  j["eos_token_id"] = {1, 2};
  std::ofstream(config) << j.dump(2);
  ServerProcess server(kServer, {"--model", "bs=" + bart, "--listen", "127.0.0.1:0", "--metrics-listen", ""},
                       (work_ / "stream_bart_eos_list.log").string());
  std::vector<srformer::v1::SummarizeResponse> finals;
  EXPECT_GT(expect_streams_send_each_token_once(server.target(), "bs", &finals), 0)
      << "no first sample ended on EOS before another holding back part of a character: nothing was tested";
  // Samples end at id 2, "eos" (2 was no EOS id to the server before: they ran on); srformer summarize
  // draws the same.
  int ended_at_two = 0;
  for (size_t i = 0; i < finals.size(); ++i) {
    const auto& ids = finals[i].token_ids();
    if (ids.empty() || ids[ids.size() - 1] != 2) continue;
    EXPECT_EQ(finals[i].finish_reason(), srformer::v1::FINISH_REASON_EOS) << "seed " << i + 1;
    if (++ended_at_two > 1) continue;
    const uint64_t seed = i + 1;
    const auto document = (work_ / "stream_eos_list_doc.txt").string();
    std::ofstream(document) << kStreamDocuments[seed % 2];
    const auto tool = run_command(kTool + " summarize --model " + bart + " --max-new-tokens 256 --do-sample --seed " +
                                  std::to_string(seed) + " --temperature 0.3 --no-repeat-ngram-size 4 " +
                                  "--num-return-sequences " + std::to_string(2 + seed % 3) + " --json " + document);
    ASSERT_EQ(tool.exit_code, 0) << tool.out;
    const auto tj = nlohmann::json::parse(tool.out);
    EXPECT_EQ(tj["token_ids"].get<std::vector<int64_t>>(), std::vector<int64_t>(ids.begin(), ids.end()));
    EXPECT_EQ(tj["finish_reason"], "eos");
  }
  EXPECT_GT(ended_at_two, 0);
}

fs::path EndToEnd::write_train_examples(const std::string& name) {
  const fs::path data = work_ / (name + ".jsonl");
  std::ofstream out(data);
  for (int i = 0; i < 8; ++i) {
    out << nlohmann::json{{"id", std::to_string(i)}, {"document", read(doc(i % 4))}, {"summary", "a summary"}}.dump()
        << "\n";
  }
  return data;
}

std::string EndToEnd::train_command(const std::string& name) {
  return kTool + " train " + model_dir_.string() + " " + (work_ / (name + ".jsonl")).string() + " --out " +
         (work_ / (name + "-run")).string() +
         " --batch 2 --max-input-tokens 32 --max-target-tokens 4 --log-every 1 --threads 1";
}

bool EndToEnd::holds_a_checkpoint(const std::string& name) {
  bool checkpoint = false;
  for (const auto& entry : fs::directory_iterator(work_ / (name + "-run"))) {
    checkpoint |= entry.path().filename().string().rfind("checkpoint-", 0) == 0 &&
                  fs::exists(entry.path() / "optimizer.safetensors");
  }
  return checkpoint;
}

// Started with stderr closed (`2>&-`), `srformer eval` opened its predictions file as fd 2 and wrote its progress
// into it: predictions.jsonl began "batch 1/1, 131.4 docs/s" and no longer parsed. A closed stderr stays closed
// now (its lines go nowhere), and each file holds only what is its own.
TEST_F(EndToEnd, TheOfflineToolWritesNothingIntoItsOwnFilesThroughAClosedStream) {
  const fs::path data = work_ / "closed_stderr.jsonl";
  {
    std::ofstream out(data);
    for (int i = 0; i < 2; ++i) {
      out << nlohmann::json{{"id", "d" + std::to_string(i)}, {"document", read(doc(i))}, {"summary", "a b c"}}.dump()
          << "\n";
    }
  }
  const fs::path out = work_ / "closed_stderr.out";
  const auto r = run_command(kTool + " eval " + model_dir_.string() + " " + data.string() + " --out " + out.string() +
                             " --max-new-tokens 4 --bootstrap 10 2>&-");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("split ", 0), 0u) << r.out;
  std::ifstream predictions(out / "predictions.jsonl");
  int lines = 0;
  for (std::string line; std::getline(predictions, line); ++lines) EXPECT_TRUE(nlohmann::json::accept(line)) << line;
  EXPECT_EQ(lines, 2);
}

// Without --threads, `srformer train`, `eval` and `summarize` take OMP_NUM_THREADS when it is set (a user's or a
// test harness's choice: deploy/gpu/check.sh runs ctest -j 8 with OMP_NUM_THREADS=1), else the CPUs the process
// may use (usable_cpus(): the affinity mask, bounded by a cgroup CPU quota). They took LibTorch's own default,
// which a quota (docker --cpus, Kubernetes limits.cpu) does not lower; a quota cannot be set here
// (cgroup_cpu_quota's own tests read fake ones), so the mask stands in for it.
TEST_F(EndToEnd, OfflineToolsTakeOmpNumThreadsElseTheCpusTheyMayUse) {
  const auto data = write_train_examples("default-threads");
  std::vector<CommandResult> results;
  std::vector<std::pair<fs::path, fs::path>> outs;
  for (const std::string omp : {"", "3"}) {
    const auto train_out = work_ / ("default-threads-train" + omp);
    const auto eval_out = work_ / ("default-threads-eval" + omp);
    const std::string env = omp.empty() ? "env -u OMP_NUM_THREADS " : "env OMP_NUM_THREADS=" + omp + " ";
    const std::string train = env + kTool + " train " + model_dir_.string() + " " + data.string() + " --out " +
                              train_out.string() + " --steps 1 --batch 2 --max-input-tokens 32 --max-target-tokens 4";
    const std::string eval = env + kTool + " eval " + model_dir_.string() + " " + data.string() + " --out " +
                             eval_out.string() + " --limit 2 --max-new-tokens 4 --bootstrap 10";
    std::thread([&] {  // the children inherit this thread's affinity: one CPU
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(sched_getcpu(), &one);
      ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
      results.push_back(run_command(train + " 2>&1"));
      results.push_back(run_command(eval + " 2>&1"));
    })
        .join();
    outs.emplace_back(train_out, eval_out);
  }
  ASSERT_EQ(results.size(), 4u);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << r.out;
  for (size_t i = 0; i < outs.size(); ++i) {
    const int want = i == 0 ? 1 : 3;
    const auto state = nlohmann::json::parse(read((outs[i].first / "checkpoint-1" / "trainer_state.json").string()));
    EXPECT_EQ(state["options"]["threads"], want) << "train";
    const auto scores = nlohmann::json::parse(read((outs[i].second / "scores.json").string()));
    EXPECT_EQ(scores["options"]["threads"], want) << "eval";
  }
}

// `srformer train`'s last line counts its steps in words that agree: it said "trained 1 steps", and a resumed
// run's one update "steps 2-2 of 2".
TEST_F(EndToEnd, TrainCountsOneStepInTheSingular) {
  write_train_examples("one-step");
  auto r = run_command(train_command("one-step") + " --steps 1 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("trained 1 step in ", 0), 0u) << r.out;
  r = run_command(train_command("one-step") + " --steps 2 --resume 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("trained step 2 of 2 in ", 0), 0u) << r.out;
  r = run_command(train_command("one-step") + " --steps 4 --resume 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("trained steps 3-4 of 4 in ", 0), 0u) << r.out;
}

// SIGTERM (a preempted job) ends `srformer train` after the update in progress with a checkpoint, exit
// 143 as a signal's end (trainer_test resumes such a run); it used to die at once, losing everything since
// the last --save-every. A hang-up (the terminal or SSH session that started the run closed) does the same,
// exit 129; it killed the run at once, losing every update since its last checkpoint (with the default
// --save-every 0, all of them).
TEST_F(EndToEnd, TrainStopsOnSigtermOrAHangUpWithACheckpointToResumeFrom) {
  for (const auto& [signal, exit_code] : {std::pair<std::string, int>{"TERM", 143}, {"HUP", 129}}) {
    SCOPED_TRACE("SIG" + signal);
    const std::string name = "sig" + signal + "-train";
    write_train_examples(name);
    const std::string log = (work_ / (name + ".log")).string();
    // Signalled once an update is logged; a process still there 60 s later is killed (it would hold the test).
    const auto r = run_command("bash -c '" + train_command(name) + " --steps 1000000 > " + log +
                               " 2>&1 & pid=$!; for i in $(seq 600); " + "do grep -q \"step 1/\" " + log +
                               " && break; sleep 0.1; done; kill -" + signal + " $pid; " +
                               "for i in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; " +
                               "if kill -0 $pid 2>/dev/null; then kill -KILL $pid; wait $pid; echo still running; " +
                               "else wait $pid; echo rc=$?; fi'");
    EXPECT_EQ(r.out, "rc=" + std::to_string(exit_code) + "\n") << r.out << read(log);
    // Acknowledged at once: an update can take minutes, and a user who saw nothing sent a second signal, which
    // ends the run without its checkpoint.
    EXPECT_NE(read(log).find("stop requested: the run ends after the update in progress, with a checkpoint (none "
                             "before the first update); a second signal ends it at once, without one\n"),
              std::string::npos)
        << read(log);
    EXPECT_NE(read(log).find("(a stop signal); continue with --resume"), std::string::npos) << read(log);
    EXPECT_TRUE(holds_a_checkpoint(name)) << "no checkpoint in " << name << "-run";
  }
}

// A SIGINT ignored on entry (a shell script's background job: POSIX shells start them so, for the script's
// Ctrl-C is not theirs) stays ignored, as the load generator's does: `srformer train` set its stop handler
// over it, and such a run stopped at the script's Ctrl-C. SIGTERM still stops it.
TEST_F(EndToEnd, TrainKeepsASigintIgnoredOnEntry) {
  write_train_examples("sigint-ignored");
  const std::string log = (work_ / "sigint-ignored.log").string();
  const std::string train = train_command("sigint-ignored");
  // SIGINT once update 1 is logged; SIGTERM once three more updates are (the run went on), or when the run is
  // gone, or 60 s later.
  const auto r =
      run_command("bash -c 'trap \"\" INT; " + train + " --steps 1000000 > " + log + " 2>&1 & pid=$!; " +
                  "for i in $(seq 600); do grep -q \"^step 1/\" " + log + " && break; sleep 0.1; done; " +
                  "n=$(grep -c \"^step \" " + log + "); kill -INT $pid; " +
                  "for i in $(seq 600); do kill -0 $pid 2>/dev/null || break; grep -q \"^step $((n + 3))/\" " + log +
                  " && break; sleep 0.1; done; kill -TERM $pid 2>/dev/null; " +
                  "for i in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; " +
                  "if kill -0 $pid 2>/dev/null; then kill -KILL $pid; wait $pid; echo still running; " +
                  "else wait $pid; echo rc=$?; fi'");
  EXPECT_EQ(r.out, "rc=143\n") << r.out << read(log);
  EXPECT_NE(read(log).find("(a stop signal); continue with --resume"), std::string::npos) << read(log);
}

// `srformer train ... 2>&1 | tee LOG`, stopped by Ctrl-C (or a SIGTERM to the job's process group): tee ends at
// once, and the run's next console line met a closed pipe. SIGPIPE killed it (exit 141) before its checkpoint
// was written, or after it without a word; once a stop is requested, a closed console no longer ends it.
TEST_F(EndToEnd, TrainStoppedWhileItsConsoleReaderEndsStillWritesItsCheckpoint) {
  write_train_examples("closed-console");
  const std::string fifo = (work_ / "closed-console.fifo").string();
  const std::string train = train_command("closed-console");
  // The reader (tee's part) signals the run once update 1 is logged and stops reading at once.
  const auto r = run_command(
      "bash -c 'mkfifo " + fifo + "; " + train + " --steps 1000000 > /dev/null 2> " + fifo +
      " & pid=$!; while IFS= read -r line; do case \"$line\" in *\"step 1/\"*) kill -TERM $pid; break;; esac; "
      "done < " +
      fifo + "; for i in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; " +
      "if kill -0 $pid 2>/dev/null; then kill -KILL $pid; wait $pid; echo still running; " +
      "else wait $pid; echo rc=$?; fi'");
  EXPECT_EQ(r.out, "rc=143\n") << r.out;
  EXPECT_TRUE(holds_a_checkpoint("closed-console")) << "no checkpoint in closed-console-run";
}

// Two runs into one --out (a replacement pod resuming while the old one still saved its stop checkpoint): the
// second removed the first's checkpoint-N.tmp and resumed from a stale checkpoint. A run holds a lock on its --out
// for its life: a second is refused, naming the directory and the holder, and is let in once the first has ended,
// even by SIGKILL (the kernel drops the lock).
TEST_F(EndToEnd, TrainRefusesAnOutAnotherRunHoldsUntilThatRunEnds) {
  write_train_examples("locked");
  const auto out = work_ / "locked-run";
  const std::string log = (work_ / "locked.log").string();
  const std::string second = (work_ / "locked-second.log").string();
  // The second run starts once the first has saved a checkpoint (any: --keep rotates checkpoint-1 away at once; a
  // second run let in would run on: 60 s at most); the first is then killed.
  const auto r =
      run_command("bash -c '" + train_command("locked") + " --steps 1000000 --save-every 1 > " + log +
                  " 2>&1 & pid=$!; for i in $(seq 600); do ls " + out.string() +
                  "/checkpoint-*[0-9]/trainer_state.json > /dev/null 2>&1 && break; sleep 0.1; done; timeout 60 " +
                  train_command("locked") + " --steps 1000000 --resume > " + second +
                  " 2>&1; echo second=$?; echo pid=$pid; { kill -KILL $pid; wait $pid; } 2>/dev/null; echo killed=$?'");
  const std::smatch m = [&] {
    std::smatch found;
    std::regex_search(r.out, found, std::regex("pid=([0-9]+)"));
    return found;
  }();
  ASSERT_FALSE(m.empty()) << r.out;
  EXPECT_NE(r.out.find("second=1\n"), std::string::npos) << r.out << read(second);
  EXPECT_NE(r.out.find("killed=137\n"), std::string::npos) << r.out << read(log);
  EXPECT_NE(read(second).find("--out " + out.string() + " is in use by another `srformer train` run (pid " +
                              m[1].str() + "); wait for it to end, or choose another --out"),
            std::string::npos)
      << read(second);
  int64_t newest = 0;
  for (const auto& entry : fs::directory_iterator(out)) {
    const auto name = entry.path().filename().string();
    if (std::regex_match(name, std::regex("checkpoint-[0-9]+")) && fs::exists(entry.path() / "trainer_state.json")) {
      newest = std::max<int64_t>(newest, std::stoll(name.substr(11)));
    }
  }
  ASSERT_GT(newest, 0);
  const auto resumed = run_command(train_command("locked") + " --steps 1000000 --resume --stop-after " +
                                   std::to_string(newest + 1) + " 2>&1");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out;
}

// Under a file-size limit (ulimit -f, a batch system's), SIGXFSZ killed `srformer train` at its first large write:
// exit 153 and not a word. The write fails (EFBIG) as on a full disk now, and the run says what it could not write.
TEST_F(EndToEnd, TrainUnderAFileSizeLimitSaysWhatItCouldNotWrite) {
  write_train_examples("file-limit");
  const auto r = run_command("ulimit -f 8; " + train_command("file-limit") + " --steps 1 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("srformer train: cannot write "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("File too large; checkpoint-1 was not saved"), std::string::npos) << r.out;
}

// `srformer convert` never writes over the model it reads (it overwrote the weights, then failed copying
// the tokenizer onto itself), and writing over an earlier model leaves none of that model's files behind
// (a stale generation_config.json capped every summary of the new one).
TEST_F(EndToEnd, ConvertWritesANewDirectoryAndLeavesNothingOfAnEarlierModel) {
  const fs::path source = work_ / "convert_source";
  fs::copy(model_dir_, source, fs::copy_options::recursive);
  const auto weights = source / "model.safetensors";
  const auto before = fs::last_write_time(weights);
  for (const auto& dst : {source.string(), source.string() + "/", (source / ".." / source.filename()).string()}) {
    auto r = run_command(kTool + " convert " + source.string() + " " + dst + " --cross-attention full 2>&1");
    EXPECT_EQ(r.exit_code, 1) << dst << ": " << r.out;
    EXPECT_NE(r.out.find("convert into a new directory"), std::string::npos) << r.out;
  }
  EXPECT_EQ(fs::last_write_time(weights), before) << "a refused convert rewrote the source";

  const fs::path dst = work_ / "convert_dst";
  fs::create_directories(dst);
  std::ofstream(dst / "generation_config.json") << R"({"max_new_tokens": 2})";
  std::ofstream(dst / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
  std::ofstream(dst / "model-00001-of-00002.safetensors") << "old";
  std::ofstream(dst / "model-00002-of-00002.safetensors") << "old";
  std::ofstream(dst / "vocab.json") << "{}";
  std::ofstream(dst / "notes.txt") << "a person's file";
  ASSERT_FALSE(fs::exists(source / "generation_config.json"));
  auto r = run_command(kTool + " convert " + source.string() + " " + dst.string() + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* stale : {"generation_config.json", "model.safetensors.index.json",
                            "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "vocab.json"}) {
    EXPECT_FALSE(fs::exists(dst / stale)) << stale;
  }
  EXPECT_TRUE(fs::exists(dst / "notes.txt"));
  EXPECT_TRUE(fs::exists(dst / "spiece.model"));
  // The converted model summarizes as the source does, past the old file's 2 tokens.
  const std::string options = " --max-new-tokens 6 --min-new-tokens 6 --json " + doc(0) + " 2>/dev/null";
  auto a = run_command(kTool + " summarize --model " + source.string() + options);
  auto b = run_command(kTool + " summarize --model " + dst.string() + options);
  ASSERT_EQ(a.exit_code, 0) << a.out;
  ASSERT_EQ(b.exit_code, 0) << b.out;
  EXPECT_EQ(nlohmann::json::parse(b.out)["token_ids"].size(), 6u);
  EXPECT_EQ(nlohmann::json::parse(a.out)["token_ids"], nlohmann::json::parse(b.out)["token_ids"]);
}

}  // namespace
}  // namespace srformer::testing
