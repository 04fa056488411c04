// `srformer eval` through the built binary: --predictions mode on hand-made files with known ROUGE, error
// messages, and model mode on a real tiny model (batched == unbatched == offline generate()).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/generation/generate.h"
#include "model/seq2seq.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/server/tiny_real_model.h"
#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Result {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `srformer COMMAND args`; `shell` goes before it (a `ulimit`).
Result run_srformer(const fs::path& work, const std::string& command, const std::vector<std::string>& args,
                    const std::string& shell = "") {
  std::string cmd = shell + std::string(SRFORMER_BIN_DIR) + "/srformer " + command;
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " >'" + (work / "stdout").string() + "' 2>'" + (work / "stderr").string() + "'";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(work / "stdout");
  r.err = slurp(work / "stderr");
  return r;
}

Result run_eval(const fs::path& work, const std::vector<std::string>& args, const std::string& shell = "") {
  return run_srformer(work, "eval", args, shell);
}

void write_jsonl(const fs::path& p, const std::vector<json>& lines) {
  std::ofstream f(p);
  for (const auto& j : lines) f << j.dump() << "\n";
}

std::vector<json> read_jsonl(const fs::path& p) {
  std::vector<json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

const char* kTypes[] = {"rouge1", "rouge2", "rougeL", "rougeLsum"};

// The scores.json means are the means of the per-pair F1s in predictions.jsonl.
void expect_means_match(const fs::path& out_dir) {
  const auto pairs = read_jsonl(out_dir / "predictions.jsonl");
  const auto scores = json::parse(slurp(out_dir / "scores.json"));
  ASSERT_EQ(scores["n"].get<size_t>(), pairs.size());
  for (const char* t : kTypes) {
    double sum = 0;
    for (const auto& p : pairs) sum += p[t].get<double>();
    EXPECT_NEAR(scores["rouge"][t]["mean_f1"].get<double>(), sum / static_cast<double>(pairs.size()), 1e-12) << t;
    const auto& f = scores["rouge"][t]["fmeasure"];
    EXPECT_LE(f["low"].get<double>(), f["mid"].get<double>()) << t;
    EXPECT_LE(f["mid"].get<double>(), f["high"].get<double>()) << t;
  }
}

class EvalPredictionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_jsonl(data_, {{{"id", "same"}, {"document", "d1"}, {"summary", "the cat sat on the mat"}},
                        {{"id", "disjoint"}, {"document", "d2"}, {"summary", "alpha beta"}},
                        {{"id", "hand"}, {"document", "d3"}, {"summary", "the cat was found under the bed"}}});
    write_jsonl(pred_, {{{"id", "hand"}, {"prediction", "the cat was under the bed"}},
                        {{"id", "disjoint"}, {"prediction", "gamma delta"}},
                        {{"id", "same"}, {"prediction", "The cat sat on the mat."}}});
  }
  testing::TempDir dir_{"evalcli"};
  fs::path data_ = dir_.path() / "data.jsonl", pred_ = dir_.path() / "pred.jsonl";
};

TEST_F(EvalPredictionsTest, KnownScoresAndOutputFiles) {
  const fs::path out = dir_.path() / "out";
  const auto r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string(), "--out", out.string(),
                                        "--bootstrap", "200", "--split-name", "hand"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto pairs = read_jsonl(out / "predictions.jsonl");
  ASSERT_EQ(pairs.size(), 3u);
  const std::vector<std::string> ids{"same", "disjoint", "hand"};  // data order
  for (size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_EQ(pairs[i]["id"], ids[i]);
    for (const char* k : {"id", "document", "reference", "prediction"}) EXPECT_TRUE(pairs[i][k].is_string()) << k;
  }
  EXPECT_EQ(pairs[2]["reference"], "the cat was found under the bed");
  EXPECT_EQ(pairs[2]["prediction"], "the cat was under the bed");
  EXPECT_EQ(pairs[1]["document"], "d2");
  for (const char* t : kTypes) {
    EXPECT_DOUBLE_EQ(pairs[0][t].get<double>(), 1.0) << t;
    EXPECT_DOUBLE_EQ(pairs[1][t].get<double>(), 0.0) << t;
  }
  // Reference 7 tokens, prediction 6, all 6 in the reference in order: P = 1, R = 6/7, F = 12/13.
  // Bigrams: 4 of the prediction's 5 in the reference's 6: P = 4/5, R = 4/6, F = 8/11.
  EXPECT_NEAR(pairs[2]["rouge1"].get<double>(), 12.0 / 13, 1e-12);
  EXPECT_NEAR(pairs[2]["rouge2"].get<double>(), 8.0 / 11, 1e-12);
  EXPECT_NEAR(pairs[2]["rougeL"].get<double>(), 12.0 / 13, 1e-12);
  EXPECT_NEAR(pairs[2]["rougeLsum"].get<double>(), 12.0 / 13, 1e-12);

  const auto scores = json::parse(slurp(out / "scores.json"));
  EXPECT_EQ(scores["split"], "hand");
  EXPECT_EQ(scores["n"], 3);
  EXPECT_EQ(scores["options"]["bootstrap"], 200);
  EXPECT_NEAR(scores["rouge"]["rouge2"]["mean_f1"].get<double>(), (1.0 + 8.0 / 11) / 3, 1e-12);
  for (const char* part : {"precision", "recall", "fmeasure"}) {
    for (const char* q : {"low", "mid", "high"}) EXPECT_TRUE(scores["rouge"]["rouge1"][part][q].is_number());
  }
  expect_means_match(out);
  EXPECT_NE(r.out.find("ROUGE-Lsum"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("n = 3"), std::string::npos) << r.out;
}

TEST_F(EvalPredictionsTest, DefaultOutputDirIsNextToPredictions) {
  const auto r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_jsonl(dir_.path() / "pred.eval" / "predictions.jsonl").size(), 3u);
}

// The predictions of the examples past --limit are not scored, and not counted as of ids "not in the data"
// (which they are): that note is for predictions of another split.
TEST_F(EvalPredictionsTest, PredictionsPastTheLimitAreLeftOutUnsaid) {
  auto r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string(), "--limit", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_jsonl(dir_.path() / "pred.eval" / "predictions.jsonl").size(), 2u);
  EXPECT_EQ(r.err.find("ignored"), std::string::npos) << r.err;
  // A prediction of an id the data does not hold is still named.
  std::ofstream(pred_, std::ios::app) << json{{"id", "stray"}, {"prediction", "x"}}.dump() << "\n";
  r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string(), "--limit", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("note: ignored 1 prediction(s) whose id is not in the data"), std::string::npos) << r.err;
}

// A DATA piped in (`<(zcat test.jsonl.gz)`, /dev/stdin) has a name that says nothing of the split: it was
// labelled "63" (/dev/fd/63), and the results' default place beside it could not be made (/dev/fd/63.M.eval),
// or was made in /dev (/dev/stdin.M.eval, as root). It is labelled "pipe", and a default place beside a
// pipe, DATA's or PRED's, is refused before anything is read or generated, saying to pass --out.
TEST_F(EvalPredictionsTest, APipeIsLabelledPipeAndGetsNoDefaultOutputDir) {
  const auto piped = [](const fs::path& file) { return "cat '" + file.string() + "' | "; };
  auto r = run_eval(dir_.path(), {"--predictions", pred_.string(), "/dev/stdin"}, piped(data_));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(slurp(dir_.path() / "pred.eval" / "scores.json"))["split"], "pipe");
  EXPECT_NE(r.out.find("split pipe, n = 3"), std::string::npos) << r.out;

  r = run_eval(dir_.path(), {(dir_.path() / "model").string(), "/dev/stdin"}, piped(data_));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("DATA '/dev/stdin' is a pipe, not a file: the results have no default place beside it; "
                       "pass --out DIR (and --split-name NAME to label them)"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists("/dev/stdin.model.eval"));

  r = run_eval(dir_.path(), {"--predictions", "/dev/stdin", data_.string()}, piped(pred_));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("PRED '/dev/stdin' is a pipe, not a file"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists("/dev/stdin.eval"));
  const auto out = dir_.path() / "piped.eval";
  r = run_eval(dir_.path(), {"--predictions", "/dev/stdin", data_.string(), "--out", out.string()}, piped(pred_));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(slurp(out / "scores.json"))["split"], "data");
}

// --seed takes summarize's and convert's range, the whole uint64.
TEST_F(EvalPredictionsTest, SeedTakesTheWholeUnsignedRange) {
  const auto r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string(), "--bootstrap", "100000",
                                        "--seed", "18446744073709551615"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto scores = json::parse(slurp(dir_.path() / "pred.eval" / "scores.json"));
  EXPECT_EQ(scores["options"]["seed"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(scores["options"]["bootstrap"], 100000);
}

// eval's --seed is the bootstrap's, not a sampling seed as `summarize`'s: it moves the intervals, never the mean
// scores, and --help says so (it said "the resampling's seed", which a summarize user read as generation's).
TEST_F(EvalPredictionsTest, SeedIsTheBootstrapsAndMovesTheIntervalsOnly) {
  const auto help = run_eval(dir_.path(), {"--help"});
  ASSERT_EQ(help.code, 0) << help.err;
  EXPECT_NE(help.out.find("--seed N            the bootstrap resampling's seed"), std::string::npos) << help.out;
  std::vector<json> rouge;
  for (const char* seed : {"1", "2"}) {
    const auto out = dir_.path() / (std::string("seed-") + seed);
    const auto r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string(), "--bootstrap", "50",
                                          "--seed", seed, "--out", out.string()});
    ASSERT_EQ(r.code, 0) << r.err;
    rouge.push_back(json::parse(slurp(out / "scores.json"))["rouge"]);
  }
  for (const char* type : {"rouge1", "rouge2", "rougeL", "rougeLsum"}) {
    EXPECT_EQ(rouge[0][type]["mean_f1"], rouge[1][type]["mean_f1"]) << type;
  }
}

// A flag's value after '=', as srformer-client and srformer-server take it ("--max-new-tokens=20"): every
// srformer command said "unknown option '--seed=7'". A switch given a value is refused in the client's words.
TEST_F(EvalPredictionsTest, AFlagsValueMayFollowAnEqualsSign) {
  const auto r = run_eval(dir_.path(), {"--predictions=" + pred_.string(), data_.string(), "--bootstrap=10", "--seed=7",
                                        "--split-name=", "--out", (dir_.path() / "eq").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto scores = json::parse(slurp(dir_.path() / "eq" / "scores.json"));
  EXPECT_EQ(scores["options"]["seed"], 7);
  EXPECT_EQ(scores["options"]["bootstrap"], 10);
  const auto p = pred_.string(), d = data_.string();
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--predictions", p, d, "--stem=false"}, "--stem takes no value, got '--stem=false' (see --help)"},
           {{"--predictions", p, d, "--seed=-1"}, "--seed needs an integer from 0 to 18446744073709551615, got '-1'"},
           {{"--predictions", p, d, "--frobnicate=1"}, "unknown option '--frobnicate' (see --help)"}}) {
    const auto refused = run_eval(dir_.path(), args);
    EXPECT_EQ(refused.code, 1) << message;
    EXPECT_NE(refused.err.find(message), std::string::npos) << "want '" << message << "', got: " << refused.err;
  }
}

TEST_F(EvalPredictionsTest, MissingPredictionIsNamed) {
  write_jsonl(pred_, {{{"id", "same"}, {"prediction", "x"}}});
  const auto r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("2 id(s)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'disjoint'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'hand'"), std::string::npos) << r.err;
}

// Datasets often number their examples: an integer id was refused ("field \"id\" must be a string"). It is
// matched by its decimal text (a prediction's "7" scores data's 7) and written back as that text.
TEST_F(EvalPredictionsTest, IntegerIdsAreMatchedAndWrittenBackAsTheirDecimalText) {
  write_jsonl(data_, {{{"id", 7}, {"document", "d1"}, {"summary", "the cat sat on the mat"}},
                      {{"id", 12}, {"document", "d2"}, {"summary", "alpha beta"}}});
  write_jsonl(pred_, {{{"id", 12}, {"prediction", "alpha beta"}}, {{"id", "7"}, {"prediction", "gamma"}}});
  const fs::path out = dir_.path() / "out";
  auto r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string(), "--out", out.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto pairs = read_jsonl(out / "predictions.jsonl");
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0]["id"], "7");
  EXPECT_EQ(pairs[0]["prediction"], "gamma");
  EXPECT_EQ(pairs[1]["id"], "12");
  EXPECT_DOUBLE_EQ(pairs[1]["rouge1"].get<double>(), 1.0);
  // An earlier run's predictions.jsonl (string ids) rescores the integer-id data.
  r = run_eval(dir_.path(), {"--predictions", (out / "predictions.jsonl").string(), data_.string(), "--out",
                             (dir_.path() / "again").string()});
  EXPECT_EQ(r.code, 0) << r.err;
  // Other types are still refused, with the line.
  std::ofstream(pred_) << "{\"id\": 7, \"prediction\": \"p\"}\n{\"id\": 12.0, \"prediction\": \"p\"}\n";
  r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("pred.jsonl:2: field \"id\" must be a string or an integer, not a number"), std::string::npos)
      << r.err;
  write_jsonl(data_, {{{"id", true}, {"document", "d"}, {"summary", "s"}}});
  r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string()});
  EXPECT_NE(r.err.find("data.jsonl:1: field \"id\" must be a string or an integer, not a boolean"), std::string::npos)
      << r.err;
}

TEST_F(EvalPredictionsTest, MalformedLinesNameFileAndLine) {
  std::ofstream(data_, std::ios::app) << "{\"id\": \"x\", \"document\": \"d\"\n";
  auto r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("data.jsonl:4: not valid JSON"), std::string::npos) << r.err;

  write_jsonl(data_, {{{"id", "a"}, {"document", "d"}}});
  r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string()});
  EXPECT_NE(r.err.find("data.jsonl:1: missing field \"summary\""), std::string::npos) << r.err;

  write_jsonl(data_, {{{"id", "a"}, {"document", "d"}, {"summary", "s"}}});
  std::ofstream(pred_) << "{\"id\": \"a\", \"prediction\": \"p\"}\n\n[1, 2]\n";
  r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string()});
  EXPECT_NE(r.err.find("pred.jsonl:3: expected a JSON object"), std::string::npos) << r.err;
}

TEST_F(EvalPredictionsTest, BadInvocationsSayWhatToFix) {
  const auto p = pred_.string(), d = data_.string();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--predictions", p, d, "--bootstrap", "0"}, "--bootstrap needs an integer >= 1, got '0'"},
      // Read whole, not cast to int (4294967297 ran 1 resample; 2147483648 said "samples must be positive").
      {{"--predictions", p, d, "--bootstrap", "4294967297"}, "--bootstrap 4294967297 is more than the 100000"},
      {{"--predictions", p, d, "--bootstrap", "2147483648"}, "--bootstrap 2147483648 is more than the 100000"},
      {{"--predictions", p, d, "--seed", "-1"}, "--seed needs an integer from 0 to 18446744073709551615"},
      {{"--predictions", p, d, "--limit", "x"}, "--limit needs an integer >= 1, got 'x'"},
      {{"--predictions", p, d, "--frobnicate"}, "unknown option '--frobnicate'"},
      {{"--predictions", p, d, "--num-beams", "4"}, "--num-beams is a generation option"},
      {{"--predictions", p}, "expected only DATA.jsonl"},
      {{d}, "expected MODEL_DIR and DATA.jsonl"},
      {{"--predictions", p, (dir_.path() / "nope.jsonl").string()}, "nope.jsonl': no such file"},
      {{"--predictions", p, d, "--seed"}, "--seed needs a value"},
      {{dir_.path().string(), d, "--batch", "0"}, "--batch needs an integer >= 1, got '0'"},
      // Read as srformer summarize and srformer-client read them: an int32 field's range first (eval took
      // 4294967299 and said "invalid generation options: max_new_tokens is 4294967299"), then the least value.
      {{dir_.path().string(), d, "--max-new-tokens", "4294967299"},
       "--max-new-tokens 4294967299 is out of range (an int32 field)"},
      {{dir_.path().string(), d, "--num-beams", "2147483648"},
       "--num-beams 2147483648 is out of range (an int32 field)"},
      {{dir_.path().string(), d, "--min-new-tokens", "-2147483649"},
       "--min-new-tokens -2147483649 is out of range (an int32 field)"},
      {{dir_.path().string(), d, "--max-new-tokens", "0"}, "--max-new-tokens needs an integer >= 1, got '0'"},
      {{dir_.path().string(), d, "--num-beams", "0"}, "--num-beams needs an integer >= 1, got '0'"},
      {{dir_.path().string(), d, "--min-new-tokens", "-1"}, "--min-new-tokens needs an integer >= 0, got '-1'"},
      {{(dir_.path() / "no-model").string(), d}, "model directory"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run_eval(dir_.path(), args);
    EXPECT_EQ(r.code, 1) << message;
    EXPECT_NE(r.err.find(message), std::string::npos) << "want '" << message << "', got: " << r.err;
  }
  std::ofstream(data_, std::ios::trunc) << "\n";
  const auto r = run_eval(dir_.path(), {"--predictions", p, d});
  EXPECT_NE(r.err.find("has no examples"), std::string::npos) << r.err;
}

// A run stopped while writing its results (here by a file size limit, as a full disk would) leaves the
// earlier run's predictions.jsonl and scores.json as they were. Both were written in place: it left a
// predictions.jsonl cut short beside the earlier run's scores.json, which looked complete.
TEST_F(EvalPredictionsTest, AResultWriteCutShortLeavesTheEarlierResults) {
  const fs::path out = dir_.path() / "out";
  auto r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string(), "--out", out.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto predictions = slurp(out / "predictions.jsonl"), scores = slurp(out / "scores.json");

  std::string long_text;
  for (int i = 0; i < 2000; ++i) long_text += "word" + std::to_string(i) + " ";
  write_jsonl(pred_, {{{"id", "hand"}, {"prediction", long_text}},
                      {{"id", "disjoint"}, {"prediction", long_text}},
                      {{"id", "same"}, {"prediction", long_text}}});
  ASSERT_GT(3 * long_text.size(), 8192u);
  // At most 8 blocks (of 512 or 1024 bytes) per file: the predictions do not fit. SIGXFSZ ignored: the write
  // fails (EFBIG) as on a full disk, instead of the signal killing the process.
  r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string(), "--out", out.string()},
               "trap '' XFSZ; ulimit -f 8; ");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(slurp(out / "predictions.jsonl"), predictions);
  EXPECT_EQ(slurp(out / "scores.json"), scores);
  // The error names the file and the system's reason (it said only "cannot write .../predictions.jsonl.tmp").
  EXPECT_NE(r.err.find("cannot write " + (out / "predictions.jsonl").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  const auto names = [&out] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  EXPECT_EQ(names(), (std::vector<std::string>{"predictions.jsonl", "scores.json"})) << "a temporary file is left";
  // And without the limit, this run's results replace them, with no temporary file left beside them.
  r = run_eval(dir_.path(), {"--predictions", pred_.string(), data_.string(), "--out", out.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_jsonl(out / "predictions.jsonl").at(0)["prediction"], long_text);
  EXPECT_EQ(names(), (std::vector<std::string>{"predictions.jsonl", "scores.json"}));
}

class EvalModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::make_tiny_t5_srformer(dir_.path() / "model");
    if (model_.empty()) GTEST_SKIP() << "fixture t5-srformer missing";
    std::vector<json> lines;
    const int sentences[] = {5, 1, 7, 2, 6, 3, 4};  // unsorted lengths, so batching reorders
    for (int i = 0; i < 7; ++i) {
      lines.push_back({{"id", "doc" + std::to_string(i)},
                       {"document", testing::synthetic_text(sentences[i], 100 + i)},
                       {"summary", testing::synthetic_text(1, 200 + i)}});
      documents_.push_back(lines.back()["document"]);
    }
    write_jsonl(data_, lines);
  }

  std::vector<std::string> predictions(const fs::path& out_dir) {
    std::vector<std::string> out;
    for (const auto& j : read_jsonl(out_dir / "predictions.jsonl")) out.push_back(j["prediction"]);
    return out;
  }

  testing::TempDir dir_{"evalmodel"};
  fs::path model_, data_ = dir_.path() / "test.jsonl";
  std::vector<std::string> documents_;
  const std::vector<std::string> gen_ = {"--max-new-tokens",       "12", "--min-new-tokens", "0",   "--num-beams", "1",
                                         "--no-repeat-ngram-size", "0",  "--bootstrap",      "100", "--threads",   "1"};
};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(EvalModelTest, BatchedEqualsUnbatchedEqualsOfflineGenerate) {
  const fs::path out3 = dir_.path() / "b3", out1 = dir_.path() / "b1";
  auto r =
      run_eval(dir_.path(), concat({model_.string(), data_.string(), "--batch", "3", "--out", out3.string()}, gen_));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("batch 3/3"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  r = run_eval(dir_.path(), concat({model_.string(), data_.string(), "--batch", "1", "--out", out1.string()}, gen_));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto batched = predictions(out3), alone = predictions(out1);
  ASSERT_EQ(batched.size(), documents_.size());
  EXPECT_EQ(batched, alone);

  // Each document on its own through generate(), with the options the flags above ask for.
  auto model = load_model(model_);
  const auto tokenizer = load_tokenizer(model_);
  GenerationOptions o;
  o.max_new_tokens = 12;
  o = with_model_tokens(o, model->config());
  o.vocab_limit = tokenizer->vocab_size();
  size_t non_empty = 0;
  for (size_t i = 0; i < documents_.size(); ++i) {
    const auto ids = tokenizer->encode(documents_[i]);
    const auto input = torch::tensor(ids, torch::kLong).view({1, -1});
    const auto res = generate(*model, input, torch::ones_like(input), o);
    const auto expected = tokenizer->decode(res.at(0).hypotheses.at(0).tokens);
    EXPECT_EQ(batched[i], expected) << "document " << i;
    non_empty += expected.empty() ? 0 : 1;
  }
  EXPECT_GT(non_empty, 0u);
  expect_means_match(out3);
  const auto scores = json::parse(slurp(out3 / "scores.json"));
  EXPECT_EQ(scores["split"], "test");
  EXPECT_EQ(scores["model"], model_.string());
  EXPECT_EQ(scores["options"]["batch"], 3);
  EXPECT_EQ(scores["options"]["max_new_tokens"], 12);
  EXPECT_EQ(scores["options"]["early_stopping"], false) << "as Hugging Face writes it: a bool, or \"never\"";
  EXPECT_EQ(scores["generation"]["truncated_documents"], 0);
  EXPECT_GT(scores["generation"]["generated_tokens"].get<int64_t>(), 0);
  EXPECT_GT(scores["generation"]["tokens_per_second"].get<double>(), 0.0);
}

TEST_F(EvalModelTest, TruncatesToMaxInputTokensAndSaysHowMany) {
  auto tokenizer = load_tokenizer(model_);
  size_t over = 0;
  for (const auto& d : documents_) over += tokenizer->encode(d).size() > 20 ? 1 : 0;
  ASSERT_GT(over, 0u);
  ASSERT_LT(over, documents_.size());
  const auto r = run_eval(dir_.path(), concat({model_.string(), data_.string(), "--max-input-tokens", "20"}, gen_));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(std::to_string(over) + " of 7 documents truncated to 20 tokens"), std::string::npos) << r.err;
  const auto scores = json::parse(slurp(dir_.path() / "test.model.eval" / "scores.json"));
  EXPECT_EQ(scores["generation"]["truncated_documents"].get<size_t>(), over);
  EXPECT_EQ(scores["options"]["max_input_tokens"], 20);
  // A T5's limit is advisory (relative positions read any length): the flag may also raise it (a BART's
  // max_position_embeddings it may not: input_limit_can_be_raised).
  const auto raised =
      run_eval(dir_.path(), concat({model_.string(), data_.string(), "--max-input-tokens", "999999"}, gen_));
  ASSERT_EQ(raised.code, 0) << raised.err;
  EXPECT_EQ(json::parse(slurp(dir_.path() / "test.model.eval" / "scores.json"))["options"]["max_input_tokens"], 999999);
}

// Each model gets its own default output directory (DATA.eval/ was shared: a second model's eval replaced
// the first's predictions and scores without a word); one of the same name does not replace another's.
TEST_F(EvalModelTest, TheDefaultOutputDirectoryIsPerModel) {
  const auto run_a = dir_.path() / "runA";
  fs::copy(model_, run_a);
  auto r = run_eval(dir_.path(), concat({model_.string(), data_.string()}, gen_));
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_eval(dir_.path(), concat({run_a.string() + "/", data_.string()}, gen_));  // its name, not ""
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(slurp(dir_.path() / "test.model.eval" / "scores.json"))["model"], model_.string());
  EXPECT_EQ(json::parse(slurp(dir_.path() / "test.runA.eval" / "scores.json"))["model"], run_a.string() + "/");
  EXPECT_FALSE(fs::exists(dir_.path() / "test.eval"));
  // The same model again replaces its own results.
  r = run_eval(dir_.path(), concat({(model_ / ".").string(), data_.string()}, gen_));
  ASSERT_EQ(r.code, 0) << r.err;

  // Another model directory named "model": refused before generating, the first one's results kept.
  const auto twin = dir_.path() / "elsewhere" / "model";
  fs::create_directories(twin.parent_path());
  fs::copy(model_, twin);
  const auto before = slurp(dir_.path() / "test.model.eval" / "scores.json");
  r = run_eval(dir_.path(), concat({twin.string(), data_.string()}, gen_));
  EXPECT_EQ(r.code, 1);
  const auto out = (dir_.path() / "test.model.eval").string();
  EXPECT_NE(r.err.find(out + " holds the results of model " + (model_ / ".").string() + "; pass --out DIR"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("batch 1/"), std::string::npos) << "generated before refusing: " << r.err;
  EXPECT_EQ(slurp(dir_.path() / "test.model.eval" / "scores.json"), before);
  // --out is the user's choice: it replaces them, saying whose they were.
  r = run_eval(dir_.path(), concat({twin.string(), data_.string(), "--out", out}, gen_));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("note: replacing " + out + "'s results of model " + (model_ / ".").string()), std::string::npos)
      << r.err;
  EXPECT_EQ(json::parse(slurp(dir_.path() / "test.model.eval" / "scores.json"))["model"], twin.string());
}

// A model served with a tokenizer that has more tokens than its embedding has rows (an added token past
// them): eval and summarize refuse a document holding it alike, naming the token and what to do, as the
// server does (FAILED_PRECONDITION). summarize said only "input_ids holds token id 64 outside the vocabulary
// [0, 64)", naming neither the token nor its cause.
TEST_F(EvalModelTest, ATokenPastTheEmbeddingIsNamedByEvalAndSummarizeAlike) {
  const auto wide = dir_.path() / "wide";
  fs::copy(model_, wide);
  std::ofstream(wide / "added_tokens.json") << R"({"<newtok>": 64})";  // the fixture's 64 rows: ids 0..63
  const std::string document = "the cat <newtok> sat on the mat.";
  const fs::path data = dir_.path() / "wide.jsonl", text = dir_.path() / "wide.txt";
  write_jsonl(data, {{{"id", "a"}, {"document", document}, {"summary", "the cat."}}});
  std::ofstream(text) << document;
  const std::string says =
      "holds the token '<newtok>' (id 64), past the 64 rows of the model's embedding "
      "(config.json's vocab_size; its tokenizer has 65 tokens): remove it from the text, or use "
      "the checkpoint's own tokenizer files";
  const auto eval = run_eval(dir_.path(), concat({wide.string(), data.string()}, gen_));
  EXPECT_EQ(eval.code, 1);
  EXPECT_NE(eval.err.find("example 'a': the document " + says), std::string::npos) << eval.err;
  const auto summarize = run_srformer(dir_.path(), "summarize", {"--model", wide.string(), text.string()});
  EXPECT_EQ(summarize.code, 1);
  EXPECT_EQ(summarize.err, "srformer summarize: the document (" + text.string() + ") " + says + "\n");
}

// An output directory that cannot be written is refused before generating: the error came once every
// summary was made.
TEST_F(EvalModelTest, AnUnwritableOutputDirectoryIsRefusedBeforeGenerating) {
  const auto file = dir_.path() / "a-file";
  std::ofstream(file) << "not a directory\n";
  const auto out = file / "results";
  const auto r = run_eval(dir_.path(), concat({model_.string(), data_.string(), "--out", out.string()}, gen_));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cannot write the results to " + out.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pass --out DIR to write them elsewhere"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("batch 1/"), std::string::npos) << "generated before refusing: " << r.err;
}

}  // namespace
}  // namespace srformer
