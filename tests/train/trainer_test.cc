#include "model/train/trainer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "model/data/encode.h"
#include "model/eval/batch_summarize.h"
#include "model/eval/rouge.h"
#include "model/generation/generate.h"
#include "model/io/safetensors.h"
#include "model/random_model.h"
#include "model/seq2seq.h"
#include "model/tokenizer/sentencepiece_library.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/temp_dir.h"

namespace srformer::train {
namespace {

namespace fs = std::filesystem;

const char* kWords[] = {"red", "cat", "sat", "on", "mat", "blue", "dog", "ran", "to", "park", "big", "sun"};

// Documents of random words; the summary is the first three words (a task a tiny model learns fast).
void write_data(const fs::path& file, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::ofstream out(file);
  for (int i = 0; i < n; ++i) {
    std::string doc, sum;
    const int len = 6 + static_cast<int>(rng() % 6);
    for (int w = 0; w < len; ++w) {
      const std::string word = kWords[rng() % 12];
      doc += (w ? " " : "") + word;
      if (w < 3) sum += (w ? " " : "") + word;
    }
    out << nlohmann::json{{"id", "ex" + std::to_string(i)}, {"document", doc}, {"summary", sum}}.dump() << "\n";
  }
}

// A tiny SRformer-T5 (segment 4) with a SentencePiece tokenizer over the words above.
fs::path make_model(const fs::path& dir) {
  fs::create_directories(dir);
  {
    std::ofstream corpus(dir / "corpus.txt");
    for (int r = 0; r < 50; ++r) {
      for (const auto* w : kWords) corpus << w << " ";
      corpus << "\n";
    }
  }
  train_sentencepiece("--input=" + (dir / "corpus.txt").string() + " --model_prefix=" + (dir / "spiece").string() +
                      " --vocab_size=30 --model_type=word --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1"
                      " --hard_vocab_limit=false --minloglevel=2");
  fs::remove(dir / "corpus.txt");
  std::ofstream(dir / "tokenizer_config.json") << R"({"extra_ids": 0})";
  auto c = tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4, 32);
  write_random_model(dir, c, 3, 0.0);
  return dir;
}

// What train() throws with files limited to `limit` bytes (as a full disk: writes past it fail with EFBIG,
// SIGXFSZ ignored meanwhile); empty if it throws nothing.
std::string train_error_under_file_limit(const TrainOptions& o, std::ostream& console, rlim_t limit) {
  rlimit saved{};
  if (::getrlimit(RLIMIT_FSIZE, &saved) != 0) return "getrlimit failed";
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = limit;
  std::string error;
  if (::setrlimit(RLIMIT_FSIZE, &small) != 0) {
    error = "setrlimit failed";
  } else {
    try {
      train(o, console);
    } catch (const std::exception& e) {
      error = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
  }
  std::signal(SIGXFSZ, old_handler);
  return error;
}

struct Fixture : ::testing::Test {
  testing::TempDir tmp{"train"};
  fs::path model, train_file, valid_file;
  void SetUp() override {
    model = make_model(tmp.path() / "init");
    train_file = tmp.path() / "train.jsonl";
    valid_file = tmp.path() / "valid.jsonl";
    write_data(train_file, 24, 1);
    write_data(valid_file, 8, 2);
  }
  TrainOptions options(const std::string& out) const {
    TrainOptions o;
    o.model_dir = model;
    o.train_file = train_file;
    o.out_dir = tmp.path() / out;
    o.steps = 12;
    o.batch_size = 6;
    o.lr = 1e-2;
    o.warmup_steps = 2;
    o.max_input_tokens = 16;
    o.max_target_tokens = 6;
    o.log_every = 1;
    o.eval_batch = 4;
    return o;
  }
};

// train() refuses `o` (std::invalid_argument) with a message that holds `says`.
::testing::AssertionResult refused_with(const TrainOptions& o, std::ostream& console, const std::string& says) {
  try {
    train(o, console);
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find(says) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "refused with: " << e.what();
  }
  return ::testing::AssertionFailure() << "it trained";
}

std::vector<double> logged_losses(const fs::path& out) {
  std::vector<double> losses;
  std::ifstream in(out / "train_log.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

// Trains `o` into `out` up to update `stop`, then resumes it to the end; the logged losses.
std::vector<double> losses_stopped_and_resumed(TrainOptions o, const fs::path& out, int64_t stop,
                                               std::ostream& console) {
  o.out_dir = out;
  o.stop_after = stop;
  o.resume = false;
  train(o, console);
  o.stop_after = 0;
  o.resume = true;
  train(o, console);
  return logged_losses(out);
}

TEST_F(Fixture, LossFallsAndTheSavedModelReloadsToTheSameLoss) {
  auto o = options("run");
  o.steps = 40;
  o.grad_accum = 2;
  o.validation_file = valid_file;
  std::ostringstream console;
  const auto r = train(o, console);
  const auto losses = logged_losses(o.out_dir);
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << console.str();
  ASSERT_TRUE(r.validation_loss.has_value());
  ASSERT_TRUE(r.rouge1.has_value());
  // Validation ROUGE reads documents cut as training does: `srformer eval` needs the same cut to match.
  EXPECT_NE(console.str().find("documents cut to 16 tokens as in training (`srformer eval --max-input-tokens 16`"),
            std::string::npos)
      << console.str();

  // The final directory is a complete model: it reloads to the validation loss training measured on it
  // (bit for bit with the trainer's arithmetic, row-major weights; to rounding with packed ones).
  LoadOptions as_trained;
  as_trained.pack_projections = false;
  auto reloaded = load_model(o.out_dir, as_trained);
  const auto tok = load_tokenizer(o.out_dir);
  const auto valid = data::read_examples(valid_file.string());
  EXPECT_EQ(validation_loss(*reloaded, *tok, valid, o), *r.validation_loss);
  EXPECT_NEAR(validation_loss(*load_model(o.out_dir), *tok, valid, o), *r.validation_loss, 1e-5);
  // ... and the last checkpoint holds the same weights.
  const auto ckpt = latest_checkpoint(o.out_dir);
  EXPECT_EQ(ckpt.filename(), "checkpoint-40");
  auto from_ckpt = load_model(ckpt, as_trained);
  const auto ids = torch::tensor({{5, 6, 7, 1}}, torch::kLong);
  const auto enc1 = reloaded->encode(ids, torch::ones_like(ids));
  const auto enc2 = from_ckpt->encode(ids, torch::ones_like(ids));
  const auto dec = torch::tensor({{0, 5, 6}}, torch::kLong);
  EXPECT_TRUE(torch::equal(reloaded->forward(enc1, dec), from_ckpt->forward(enc2, dec)));

  // Serving uses the L the model was trained with.
  nlohmann::json config;
  std::ifstream(o.out_dir / "config.json") >> config;
  EXPECT_EQ(config["max_length"], 7);
  EXPECT_EQ(config["srformer"]["expected_length"], 6);
}

TEST_F(Fixture, ResumeContinuesExactlyAsAnUninterruptedRun) {
  std::ostringstream console;
  const auto whole = options("whole");
  train(whole, console);

  auto first = options("pieces");
  first.stop_after = 5;
  const auto r1 = train(first, console);
  EXPECT_EQ(r1.steps, 5);
  EXPECT_TRUE(fs::exists(first.out_dir / "checkpoint-5" / "optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(first.out_dir / "model.safetensors"));  // no final model yet
  auto second = options("pieces");
  // Without --resume, a new run into the same directory would mix its checkpoints with these.
  EXPECT_TRUE(refused_with(second, console, "holds an earlier run's checkpoints (checkpoint-5); pass --resume"));
  second.resume = true;
  // A stop the checkpoint is already past would go unseen, and the run go on to --steps.
  second.stop_after = 5;
  EXPECT_TRUE(refused_with(second, console, "--stop-after 5 is not after the step"));
  second.stop_after = 0;
  train(second, console);
  EXPECT_NE(console.str().find("resuming from"), std::string::npos);

  const auto a = logged_losses(whole.out_dir), b = logged_losses(second.out_dir);
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "update " << i + 1;
}

// A run stopped between two log lines (--stop-after, a signal) logs the updates since the last one: they
// were in no line, neither of this run's log nor of the resumed run's, whose first line covered only the
// updates after the checkpoint.
TEST_F(Fixture, AStoppedRunLogsTheUpdatesSinceItsLastLogLine) {
  std::ostringstream console;
  auto whole = options("whole-log");
  whole.log_every = 4;
  train(whole, console);
  auto o = whole;
  o.out_dir = tmp.path() / "stopped-log";
  o.stop_after = 6;
  const auto stopped = train(o, console);
  o.stop_after = 0;
  o.resume = true;
  train(o, console);

  const auto steps_and_tokens = [](const fs::path& out) {
    std::vector<int64_t> steps;
    int64_t tokens = 0;
    std::ifstream in(out / "train_log.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      steps.push_back(j["step"].get<int64_t>());
      tokens += j["tokens"].get<int64_t>();
    }
    return std::make_pair(steps, tokens);
  };
  const auto [whole_steps, whole_tokens] = steps_and_tokens(whole.out_dir);
  const auto [steps, tokens] = steps_and_tokens(o.out_dir);
  EXPECT_EQ(whole_steps, (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 6, 8, 12}));
  EXPECT_EQ(tokens, whole_tokens);  // every update counted once
  // The stopped run's last loss is that of its last updates, as the log's line for them.
  EXPECT_EQ(stopped.last_loss, logged_losses(o.out_dir).at(1));
}

// A resumed run whose training file holds other lines than the checkpoint's (a rebuilt split at the same
// path) says so: the options' comparison sees only the path, and the run went on without a word.
TEST_F(Fixture, ResumingOnChangedTrainingDataWarns) {
  std::ostringstream console;
  auto first = options("changed-data");
  first.stop_after = 3;
  train(first, console);
  nlohmann::json state;
  std::ifstream(first.out_dir / "checkpoint-3" / "trainer_state.json") >> state;
  EXPECT_EQ(state["train_data"]["examples"], 24);
  const auto fingerprint = state["train_data"]["fingerprint"].get<std::string>();
  EXPECT_EQ(fingerprint.size(), 16u);

  auto again = options("changed-data");
  again.resume = true;
  again.stop_after = 6;
  std::ostringstream same;
  train(again, same);
  EXPECT_EQ(same.str().find("warning"), std::string::npos) << same.str();

  write_data(train_file, 24, 99);  // as many lines, other words
  again.stop_after = 0;
  std::ostringstream changed;
  train(again, changed);
  EXPECT_NE(changed.str().find("warning: the training data (" + train_file.string() + ": 24 examples, fingerprint "),
            std::string::npos)
      << changed.str();
  EXPECT_NE(changed.str().find("are not those the checkpoint was trained on (24 examples, fingerprint " + fingerprint +
                               "): the resumed run will differ"),
            std::string::npos)
      << changed.str();
}

// A resumed run given the same files by other names (relative ones from another directory, `./`, a copy of
// the training data elsewhere) does not warn that it will differ: the paths were compared as strings.
TEST_F(Fixture, ResumingWithTheSameFilesNamedOtherwiseDoesNotWarn) {
  std::ostringstream console;
  auto o = options("renamed-paths");
  o.validation_file = valid_file;
  o.stop_after = 3;
  train(o, console);

  o.resume = true;
  o.stop_after = 6;
  o.model_dir = model.parent_path() / "." / model.filename();
  o.validation_file = valid_file.parent_path() / "." / valid_file.filename();
  o.train_file = tmp.path() / "copy-of-train.jsonl";
  fs::copy_file(train_file, o.train_file);
  std::ostringstream same;
  train(o, same);
  EXPECT_EQ(same.str().find("warning"), std::string::npos) << same.str();
  EXPECT_EQ(same.str().find("note: MODEL_DIR"), std::string::npos) << same.str();

  // Another validation file still warns.
  o.stop_after = 0;
  o.validation_file = train_file;
  std::ostringstream other;
  train(o, other);
  EXPECT_NE(other.str().find("warning: --validation was "), std::string::npos) << other.str();
}

// The CPU splits its sums over the threads, so another count rounds them otherwise: a resume with --threads
// left out (its default is every core) or on another machine no longer repeated the uninterrupted run, and
// nothing said so.
TEST_F(Fixture, ResumingWithAnotherThreadCountWarns) {
  const int threads = at::get_num_threads();
  auto o = options("threads");
  o.stop_after = 3;
  at::set_num_threads(1);
  std::ostringstream console;
  train(o, console);
  o.resume = true;
  o.stop_after = 6;
  std::ostringstream same;
  train(o, same);
  o.stop_after = 0;
  at::set_num_threads(2);
  std::ostringstream other;
  train(o, other);
  at::set_num_threads(threads);
  EXPECT_EQ(same.str().find("warning"), std::string::npos) << same.str();
  EXPECT_NE(
      other.str().find("warning: --threads was 1 when the checkpoint was written, now 2: the resumed run will "
                       "differ from an uninterrupted one in its rounding (pass --threads 1 to repeat it exactly)"),
      std::string::npos)
      << other.str();
}

// The warm-up is compared as taken, not as given: --warmup left out (5% of --steps) and --warmup with that
// same number warned that the run would differ ("warmup_steps was -1, now 2"), and a --steps that moved the
// default warm-up warned of --steps alone.
TEST_F(Fixture, ResumingComparesTheWarmUpTakenNotHowItWasGiven) {
  auto o = options("warmup");
  o.steps = 40;
  o.warmup_steps = -1;  // 40 / 20 = 2
  o.stop_after = 3;
  std::ostringstream console;
  train(o, console);
  o.resume = true;
  o.warmup_steps = 2;
  o.stop_after = 6;
  std::ostringstream given;
  train(o, given);
  EXPECT_EQ(given.str().find("warning"), std::string::npos) << given.str();

  // A checkpoint written before the warm-up taken was recorded holds -1 for the default.
  const auto state_file = o.out_dir / "checkpoint-6" / "trainer_state.json";
  nlohmann::json state;
  std::ifstream(state_file) >> state;
  EXPECT_EQ(state["options"]["warmup_steps"], 2);
  state["options"]["warmup_steps"] = -1;
  std::ofstream(state_file) << state.dump();
  o.stop_after = 9;
  std::ostringstream older;
  train(o, older);
  EXPECT_EQ(older.str().find("warning"), std::string::npos) << older.str();

  o.warmup_steps = -1;
  o.steps = 60;  // the default warm-up is 3 now
  o.stop_after = 12;
  std::ostringstream longer;
  train(o, longer);
  EXPECT_NE(longer.str().find("warning: --steps was 40 when the checkpoint was written, now 60"), std::string::npos)
      << longer.str();
  EXPECT_NE(longer.str().find("warning: --warmup was 2 when the checkpoint was written, now 3"), std::string::npos)
      << longer.str();
}

// A changed option is named by its flag, with the value that repeats the checkpoint's run: the warning named
// trainer_state.json's keys ("batch_size was 6", "eps", "train_limit was null"), which no flag is called.
TEST_F(Fixture, ResumingWarnsOfEachChangedOptionByItsFlag) {
  auto o = options("flags");
  o.stop_after = 3;
  std::ostringstream console;
  train(o, console);
  o.resume = true;
  o.stop_after = 6;
  o.batch_size = 4;
  o.train_limit = 20;
  o.adam.eps = 1e-6;
  o.clip_norm = 0.5;
  std::ostringstream changed;
  train(o, changed);
  const std::string differ = " when the checkpoint was written, now ";
  const std::string will = ": the resumed run will differ from an uninterrupted one (";
  for (const std::string& line :
       {"warning: --batch was 6" + differ + "4" + will + "pass --batch 6 to repeat it exactly)\n",
        "warning: --limit was none" + differ + "20" + will + "leave --limit out to repeat it exactly)\n",
        "warning: --adam-eps was 1e-08" + differ + "1e-06" + will + "pass --adam-eps 1e-08 to repeat it exactly)\n",
        "warning: --clip was 1.0" + differ + "0.5" + will + "pass --clip 1.0 to repeat it exactly)\n"}) {
    EXPECT_NE(changed.str().find(line), std::string::npos) << line << changed.str();
  }
  EXPECT_EQ(changed.str().find("batch_size"), std::string::npos) << changed.str();
}

// The validation figures are of the first --eval-examples: a resume with another count logged the figures of
// other examples from there on, and nothing said that the validation curve no longer compared.
TEST_F(Fixture, ResumingWithAnotherValidationCountWarns) {
  auto o = options("eval-examples");
  o.validation_file = valid_file;
  o.eval_examples = 4;
  o.stop_after = 3;
  std::ostringstream console;
  train(o, console);
  o.resume = true;
  o.stop_after = 6;
  std::ostringstream same;
  train(o, same);
  EXPECT_EQ(same.str().find("warning"), std::string::npos) << same.str();
  o.eval_examples = 0;
  o.stop_after = 9;
  std::ostringstream other;
  train(o, other);
  EXPECT_NE(other.str().find("warning: --eval-examples was 4 when the checkpoint was written, now 0: the resumed "
                             "run will differ from an uninterrupted one (pass --eval-examples 4 to repeat it "
                             "exactly)"),
            std::string::npos)
      << other.str();
}

// Bad data is named before the model loads, and the refused run leaves no --out behind (it left an empty
// one, after loading the model).
TEST_F(Fixture, BadDataIsRefusedBeforeTheRunStarts) {
  std::ostringstream console;
  for (const bool in_validation : {false, true}) {
    auto o = options(in_validation ? "bad-validation" : "bad-train");
    const auto bad = tmp.path() / "bad.jsonl";
    std::ofstream(bad) << "{\"id\": \"a\", \"document\": \"red cat\", \"summary\": \"\"}\n";
    (in_validation ? o.validation_file : o.train_file) = bad;
    EXPECT_TRUE(refused_with(o, console, bad.string() + ":1: the summary is empty"));
    EXPECT_FALSE(fs::exists(o.out_dir)) << in_validation;
  }
  EXPECT_EQ(console.str().find("dropout:"), std::string::npos) << "the model loaded first: " << console.str();
}

// A resumed run that cannot rewrite its log (here a file size limit, as a full disk) leaves the log as it
// was: it was rewritten in place, and the run went on with what fitted of it.
TEST_F(Fixture, AResumeThatCannotRewriteTheLogKeepsIt) {
  std::ostringstream console;
  auto o = options("log-rewrite");
  o.stop_after = 6;
  train(o, console);
  const auto log = o.out_dir / "train_log.jsonl";
  std::ifstream in(log);
  const std::string before{std::istreambuf_iterator<char>(in), {}};
  ASSERT_GT(before.size(), 400u);

  o.stop_after = 0;
  o.resume = true;
  const std::string error = train_error_under_file_limit(o, console, 400);
  EXPECT_NE(error.find("cannot write " + log.string() + ".tmp"), std::string::npos) << error;
  std::ifstream after_in(log);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(after_in), {}), before);
  EXPECT_FALSE(fs::exists(log.string() + ".tmp"));
  train(o, console);  // with room again, the run resumes
  EXPECT_EQ(logged_losses(o.out_dir).size(), 12u);
}

// A log line that cannot be written (here a file size limit, as a full disk) stops the run, naming the log
// and why: the failed stream dropped that line and every one after it, unsaid, and the run went on (here to
// fail only at its final save, naming the model's weights instead).
TEST_F(Fixture, ALogLineThatCannotBeWrittenStopsTheRunNamingTheLog) {
  std::ostringstream console;
  auto o = options("log-full");
  const std::string error = train_error_under_file_limit(o, console, 400);  // two or three of the twelve lines
  EXPECT_NE(error.find("cannot write " + (o.out_dir / "train_log.jsonl").string() + ": File too large"),
            std::string::npos)
      << error;
  // ... and what is kept (ACheckpointThatCannotBeWrittenNamesTheOneToResumeFrom).
  EXPECT_NE(error.find("File too large; this run has no checkpoint to resume from"), std::string::npos) << error;
}

// A checkpoint that cannot be written whole (here a file size limit that only its rewritten config.json
// passes, as a disk that fills up there) is not put in place: the config.json and trainer_state.json writes
// went unchecked, so a checkpoint with a config cut short became the newest, the run's final save failed on
// it with a JSON parse error, and --resume picked it up.
TEST_F(Fixture, ACheckpointThatCannotBeWrittenWholeIsNotPutInPlace) {
  // A config.json larger than every other file of a checkpoint (a long note), so that a size limit fails it
  // alone; the first write of it lacks max_length, which the rewrite adds.
  nlohmann::json config;
  std::ifstream(model / "config.json") >> config;
  ASSERT_FALSE(config.contains("max_length"));
  config["notes"] = std::string(size_t{2} << 20, 'x');
  std::ofstream(model / "config.json") << config.dump(2) << "\n";
  std::ostringstream console;
  auto whole = options("whole-checkpoint");
  whole.steps = 2;
  train(whole, console);
  const auto written = whole.out_dir / "checkpoint-2";
  const auto config_size = fs::file_size(written / "config.json");
  for (const auto& entry : fs::directory_iterator(written)) {
    if (entry.path().filename() != "config.json") {
      ASSERT_LT(fs::file_size(entry.path()), config_size / 2) << entry;
    }
  }

  auto cut = options("cut-checkpoint");
  cut.steps = 2;
  // Below the whole file (the cut falls inside its JSON), above its first write (the rewrite adds at
  // least `"max_length": 7,` and an indentation, 18 bytes).
  const std::string error = train_error_under_file_limit(cut, console, config_size - 8);
  EXPECT_NE(error.find("cannot write " + (cut.out_dir / "checkpoint-2.tmp" / "config.json").string()),
            std::string::npos)
      << error;
  EXPECT_TRUE(latest_checkpoint(cut.out_dir).empty()) << latest_checkpoint(cut.out_dir);
  EXPECT_FALSE(fs::exists(cut.out_dir / "checkpoint-2.tmp"));  // nor a model-sized leftover
}

// A checkpoint that cannot be written (here a file size limit, as a full disk) ends the run naming the file and
// what is kept: the newest checkpoint to --resume from, or that the run has none. It named the file alone, and
// the user could not tell whether the run's updates were lost or from where it continues.
TEST_F(Fixture, ACheckpointThatCannotBeWrittenNamesTheOneToResumeFrom) {
  std::ostringstream console;
  auto o = options("full-disk");
  o.stop_after = 2;
  train(o, console);
  const auto limit = fs::file_size(o.out_dir / "checkpoint-2" / "model.safetensors") / 2;  // the log fits
  o.stop_after = 0;
  o.resume = true;
  o.save_every = 2;
  std::string error = train_error_under_file_limit(o, console, limit);
  EXPECT_NE(error.find("cannot write " + (o.out_dir / "checkpoint-4.tmp").string()), std::string::npos) << error;
  EXPECT_NE(
      error.find("; checkpoint-4 was not saved: the newest checkpoint is " + (o.out_dir / "checkpoint-2").string() +
                 " (update 2); continue from it with --resume once " + o.out_dir.string() + " can be written"),
      std::string::npos)
      << error;
  EXPECT_EQ(train(o, console).updates, 10);  // as it says

  auto fresh = options("full-disk-fresh");
  error = train_error_under_file_limit(fresh, console, limit);
  EXPECT_NE(error.find("; checkpoint-12 was not saved: this run has no checkpoint to resume from"), std::string::npos)
      << error;
}

// A final model that cannot be written (here a directory in the way of its tokenizer) ends the run saying that
// the last checkpoint holds it and that --resume writes it: the message named the file alone, as if the whole
// run were lost.
TEST_F(Fixture, AFinalModelThatCannotBeWrittenNamesTheCheckpointHoldingIt) {
  std::ostringstream console;
  auto o = options("final-blocked");
  o.steps = 3;
  fs::create_directories(o.out_dir / "spiece.model" / "in-the-way");
  try {
    train(o, console);
    FAIL() << "the model was written";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cannot move " + (o.out_dir / "model.tmp" / "spiece.model").string() + " to " +
                             (o.out_dir / "spiece.model").string() + ": Is a directory; ",
                         0),
              0u)
        << what;
    EXPECT_NE(what.find("; the trained model was not written to " + o.out_dir.string() + ", but " +
                        (o.out_dir / "checkpoint-3").string() +
                        " holds it: run again with --resume once it can be written, which writes it without "
                        "training"),
              std::string::npos)
        << what;
  }
  fs::remove_all(o.out_dir / "spiece.model");
  o.resume = true;
  EXPECT_EQ(train(o, console).updates, 0);
  EXPECT_NO_THROW(load_model(o.out_dir));
  EXPECT_NO_THROW(load_tokenizer(o.out_dir));
}

// tokens/s (and the ETA) measure training: the interval after a validation or a checkpoint counted the
// time they took, so its tokens/s fell (to a third on the tiny model) and its ETA jumped after every one.
TEST_F(Fixture, TokensPerSecondLeaveOutValidationAndCheckpoints) {
  auto o = options("throughput");
  o.steps = 6;
  o.validation_file = valid_file;
  o.eval_every = 2;
  o.save_every = 2;
  std::ostringstream console;
  train(o, console);
  std::vector<nlohmann::json> entries;
  std::ifstream in(o.out_dir / "train_log.jsonl");
  for (std::string line; std::getline(in, line);) entries.push_back(nlohmann::json::parse(line));
  int checked = 0;
  double previous_elapsed = 0.0, validation_seconds = 0.0;
  for (const auto& e : entries) {
    if (e.contains("validation_seconds")) {
      validation_seconds = e["validation_seconds"].get<double>();
      continue;
    }
    const double elapsed = e["elapsed_seconds"].get<double>();
    const double training = e["tokens"].get<double>() / e["tokens_per_second"].get<double>();
    EXPECT_LE(training, elapsed - previous_elapsed - validation_seconds + 1e-6) << e.dump();
    checked += validation_seconds > 0 ? 1 : 0;
    previous_elapsed = elapsed;
    validation_seconds = 0.0;
  }
  EXPECT_EQ(checked, 2);  // the updates after the validations at 2 and 4
}

TEST_F(Fixture, CheckpointsRotate) {
  auto o = options("rot");
  o.save_every = 3;
  o.keep_checkpoints = 2;
  std::ostringstream console;
  train(o, console);
  EXPECT_FALSE(fs::exists(o.out_dir / "checkpoint-3"));
  EXPECT_FALSE(fs::exists(o.out_dir / "checkpoint-6"));
  EXPECT_TRUE(fs::exists(o.out_dir / "checkpoint-9"));
  EXPECT_TRUE(fs::exists(o.out_dir / "checkpoint-12" / "trainer_state.json"));
}

// Makes `file` one that cannot be removed (`on`), or removable again: as one that another machine holds open on
// NFS, or a directory of another user. Root, whom permissions do not stop, gets it immutable (chattr +i), anyone
// else its directory read-only. False where it cannot be done.
bool set_unremovable(const fs::path& file, bool on) {
  if (::geteuid() != 0) {
    std::error_code ec;
    fs::permissions(file.parent_path(), fs::perms::owner_write, on ? fs::perm_options::remove : fs::perm_options::add,
                    ec);
    return !ec;
  }
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  int flags = 0;
  bool done = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
  done = done && ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  ::close(fd);
  return done;
}

// A checkpoint that rotation cannot remove is named in a warning and the run goes on (a later save tries again):
// the error ended the run after every save, though the new checkpoint was written whole.
TEST_F(Fixture, ACheckpointThatCannotBeRotatedAwayDoesNotEndTheRun) {
  std::ostringstream console;
  auto o = options("stuck-rotation");
  o.save_every = 2;
  o.keep_checkpoints = 1;
  o.stop_after = 2;
  train(o, console);
  const auto stuck = o.out_dir / "checkpoint-2" / "model.safetensors";
  if (!set_unremovable(stuck, true)) GTEST_SKIP() << "cannot make " << stuck << " unremovable here";
  o.stop_after = 0;
  o.resume = true;
  console.str("");
  std::optional<TrainResult> r;
  try {
    r = train(o, console);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  ASSERT_TRUE(set_unremovable(stuck, false));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->steps, 12);
  EXPECT_TRUE(fs::exists(o.out_dir / "model.safetensors"));
  EXPECT_NE(console.str().find("warning: could not remove " + (o.out_dir / "checkpoint-2").string() +
                               " (the oldest of more than --keep 1 checkpoints): "),
            std::string::npos)
      << console.str();
  // The others rotate as ever.
  EXPECT_TRUE(fs::exists(o.out_dir / "checkpoint-12"));
  for (const int step : {4, 6, 8, 10}) EXPECT_FALSE(fs::exists(o.out_dir / ("checkpoint-" + std::to_string(step))));
}

// A checkpoint that cannot be moved into place (an --out made read-only as the run went on; here a directory of its
// name that cannot be removed) ends the run as a failed write does: its .tmp directory removed, the newest
// checkpoint named, and the reason a write's. It left checkpoint-N.tmp, model-sized, and named a path alone
// (for a permission, with advice about reading it).
TEST_F(Fixture, ACheckpointThatCannotBeMovedIntoPlaceIsRemovedAndNamed) {
  std::ostringstream console;
  auto o = options("stuck-move");
  o.stop_after = 2;
  train(o, console);
  const auto in_the_way = o.out_dir / "checkpoint-4" / "notes.txt";  // no trainer_state.json: no checkpoint
  fs::create_directories(in_the_way.parent_path());
  std::ofstream(in_the_way) << "a person's notes";
  if (!set_unremovable(in_the_way, true)) GTEST_SKIP() << "cannot make " << in_the_way << " unremovable here";
  o.stop_after = 4;
  o.resume = true;
  std::string error;
  try {
    train(o, console);
  } catch (const std::exception& e) {
    error = e.what();
  }
  ASSERT_TRUE(set_unremovable(in_the_way, false));
  EXPECT_EQ(error.rfind("cannot move " + (o.out_dir / "checkpoint-4.tmp").string() + " to " +
                            (o.out_dir / "checkpoint-4").string() + ": ",
                        0),
            0u)
      << error;
  EXPECT_NE(error.find("; checkpoint-4 was not saved: the newest checkpoint is " +
                       (o.out_dir / "checkpoint-2").string() + " (update 2)"),
            std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(o.out_dir / "checkpoint-4.tmp"));
}

TEST_F(Fixture, ClearErrors) {
  std::ostringstream console;
  auto o = options("err");
  o.resume = true;
  EXPECT_TRUE(refused_with(o, console, "no checkpoint"));  // resume without a checkpoint
  o = options("err");
  o.train_file = tmp.path() / "missing.jsonl";
  EXPECT_THROW(train(o, console), std::invalid_argument);
  o = options("err");
  o.label_smoothing = 1.0;
  EXPECT_THROW(train(o, console), std::invalid_argument);
  o = options("err");
  o.max_target_tokens = 0;
  EXPECT_THROW(train(o, console), std::invalid_argument);
  o = options("err");
  o.device = "gpu";
  EXPECT_THROW(train(o, console), std::invalid_argument);
  o = options("err");
  o.autocast = "fp8";
  EXPECT_THROW(train(o, console), std::invalid_argument);
  o = options("err");  // a BART reads its target at its learned positions: 4 of them here
  auto bart = tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4, 32);
  bart.max_position_embeddings = 4;
  o.model_dir = tmp.path() / "bart";
  write_random_model(o.model_dir, bart, 3, 0.0);
  fs::copy_file(model / "spiece.model", o.model_dir / "spiece.model");
  // 6 target tokens at 4 positions
  EXPECT_TRUE(refused_with(o, console, "--max-target-tokens 6 is more than this model's 4 decoder positions"));
  o = options("err");
  o.autocast = "fp16";                                           // LibTorch's CPU autocast is bf16 only
  EXPECT_TRUE(refused_with(o, console, "needs a CUDA device"));  // fp16 autocast on the CPU
}

// Options that would waste a run, or be ignored, are refused before any update, naming the flags.
TEST_F(Fixture, OptionsThatCannotWorkAreRefusedUpFront) {
  std::ostringstream console;
  auto o = options("up-front");
  // A T5 has no position limit, but validation and the saved model generate max_target_tokens tokens:
  // 5000 failed at the first validation, or saved a max_length that summarize and eval refuse.
  o.max_target_tokens = 5000;
  o.validation_file = valid_file;
  EXPECT_TRUE(refused_with(o, console, "--max-target-tokens 5000 is more than the 4096 tokens"));
  o.validation_file.clear();
  EXPECT_TRUE(refused_with(o, console, "set it to at most 4096"));
  o = options("up-front");
  o.eval_every = 5;  // nothing to validate on
  EXPECT_TRUE(refused_with(o, console, "--eval-every 5 needs --validation FILE"));
  o = options("up-front");
  o.warmup_steps = 13;  // steps 12
  EXPECT_TRUE(refused_with(o, console, "--warmup 13 is more than --steps 12"));
  o = options("up-front");
  o.stop_after = 13;
  EXPECT_TRUE(refused_with(o, console, "--stop-after 13 is past --steps 12"));
  o = options("up-front");
  o.adam.eps = INFINITY;  // every update would be 0: a run that trains nothing
  EXPECT_TRUE(refused_with(o, console, "Adam eps must be a positive number"));
  o = options("up-front");
  o.adam.weight_decay = INFINITY;  // NaN weights, reported as divergence
  EXPECT_TRUE(refused_with(o, console, "weight decay must be a number >= 0"));
  o.adam.weight_decay = -0.1;
  EXPECT_TRUE(refused_with(o, console, "weight decay must be a number >= 0"));
  EXPECT_FALSE(fs::exists(o.out_dir)) << "a refused run wrote its --out";
  o = options("up-front");
  // The bounds themselves are fine.
  o.warmup_steps = 12;
  o.stop_after = 12;
  o.max_target_tokens = 4096;
  o.steps = 12;
  EXPECT_EQ(train(o, console).steps, 12);
}

// A run whose inputs are missing (the model, the training or validation file) writes no --out: it left an
// empty directory behind, made before it read them.
TEST_F(Fixture, MissingInputsLeaveNoOut) {
  std::ostringstream console;
  auto o = options("no-model");
  o.model_dir = tmp.path() / "missing-model";
  EXPECT_THROW(train(o, console), std::exception);
  EXPECT_FALSE(fs::exists(o.out_dir));
  o = options("no-train");
  o.train_file = tmp.path() / "missing.jsonl";
  EXPECT_TRUE(refused_with(o, console, "no such file"));
  EXPECT_FALSE(fs::exists(o.out_dir));
  o = options("no-validation");
  o.validation_file = tmp.path() / "missing-validation.jsonl";
  EXPECT_TRUE(refused_with(o, console, "no such file"));
  EXPECT_FALSE(fs::exists(o.out_dir));
}

// An --out that cannot be made (under a file; in /proc, where nothing can be) is refused before anything loads,
// naming it: it was made only once the data and the model had loaded, and failed there with a bare "No such
// file or directory". Here the training file is missing too, and it is --out that the run names.
TEST_F(Fixture, AnOutThatCannotBeMadeIsRefusedBeforeAnythingLoads) {
  std::ostringstream console;
  const auto file = tmp.path() / "a-file";
  std::ofstream(file) << "not a directory\n";
  auto o = options("unused");
  o.train_file = tmp.path() / "missing.jsonl";
  for (const auto& out : {file / "run", file / "deeper" / "run", fs::path("/proc/srformer-nope/run"), file}) {
    o.out_dir = out;
    EXPECT_TRUE(refused_with(o, console, "cannot create the output directory --out " + out.string())) << out;
    EXPECT_TRUE(refused_with(o, console, "choose another --out")) << out;
  }
  EXPECT_TRUE(refused_with(o, console, "it is a file, not a directory"));
  o.out_dir = file / "run";
  EXPECT_TRUE(refused_with(o, console, file.string() + " is a file, not a directory"));
  // One that can be made is made only once the inputs have loaded: the probe leaves nothing behind.
  o.out_dir = tmp.path() / "new" / "deeper" / "run";
  EXPECT_TRUE(refused_with(o, console, "no such file"));
  EXPECT_FALSE(fs::exists(tmp.path() / "new"));
}

// --out holding a model that is not this run's (no checkpoints) is refused: training replaced its
// weights, config and tokenizer and left its README.md model card beside them. A run's own directory
// still resumes and finishes.
TEST_F(Fixture, AnotherModelInOutIsNotReplaced) {
  std::ostringstream console;
  const auto other = tmp.path() / "other";
  fs::copy(model, other);
  std::ofstream(other / "README.md") << "# another model\n";
  const auto weights_before = fs::file_size(other / "model.safetensors");
  auto o = options("unused");
  o.out_dir = other;
  EXPECT_TRUE(refused_with(o, console, "--out " + other.string() + " holds a model (config.json, model.safetensors)"));
  EXPECT_TRUE(refused_with(o, console, "choose another --out, or remove that model first"));
  EXPECT_EQ(fs::file_size(other / "model.safetensors"), weights_before);
  EXPECT_FALSE(fs::exists(other / "train_log.jsonl"));

  // A finished run: its directory holds the model and its checkpoints; --resume finishes it again.
  auto own = options("own");
  train(own, console);
  own.resume = true;
  EXPECT_EQ(train(own, console).updates, 0);
  // A directory with files but no model is no model to protect.
  auto notes = options("notes");
  fs::create_directories(notes.out_dir);
  std::ofstream(notes.out_dir / "config.json") << "{}";  // e.g. a run's settings, no weights
  EXPECT_EQ(train(notes, console).steps, 12);
}

// The trained model goes into --out whole or not at all. It was saved in place: config.json before the
// tokenizer's files, and the trained length written into it after them, so that a run stopped in between
// (killed; here a spiece.model that --out cannot take, a directory in its place) left a config.json beside
// the weights, without a tokenizer and with the starting model's expected length.
TEST_F(Fixture, TheFinalModelIsMovedIntoOutWholeWithItsConfigLast) {
  std::ostringstream console;
  auto o = options("final-whole");
  o.steps = 2;
  fs::create_directories(o.out_dir / "spiece.model" / "in-the-way");
  EXPECT_ANY_THROW(train(o, console));
  EXPECT_FALSE(fs::exists(o.out_dir / "config.json"));  // no model directory
  EXPECT_FALSE(fs::exists(o.out_dir / "model.tmp"));
  EXPECT_TRUE(fs::exists(o.out_dir / "checkpoint-2" / "trainer_state.json"));

  // Once it can be: the whole model, with the trained length; a model.tmp left by a run killed while saving
  // goes.
  fs::remove_all(o.out_dir / "spiece.model");
  fs::create_directories(o.out_dir / "model.tmp");
  std::ofstream(o.out_dir / "model.tmp" / "model.safetensors") << "cut short";
  o.resume = true;
  EXPECT_EQ(train(o, console).updates, 0);
  const auto c = ModelConfig::load(o.out_dir / "config.json");
  EXPECT_EQ(c.srformer.expected_length, o.max_target_tokens);
  EXPECT_EQ(model_generation_defaults(c).max_new_tokens, o.max_target_tokens);
  EXPECT_NO_THROW(load_tokenizer(o.out_dir));
  EXPECT_NO_THROW(load_model(o.out_dir));
  EXPECT_FALSE(fs::exists(o.out_dir / "model.tmp"));
}

// A resumed run that saves --keep checkpoints or more rotates away the one it resumed from: every later
// checkpoint, and the final model, still carries the tokenizer (they took it from that removed directory,
// and the model could be neither used nor resumed), and the run resumes again.
TEST_F(Fixture, AResumedRunKeepsTheTokenizerWhenItsCheckpointRotatesAway) {
  std::ostringstream console;
  auto o = options("rotate-resume");
  o.save_every = 2;
  o.keep_checkpoints = 2;
  o.stop_after = 4;
  train(o, console);
  o.stop_after = 0;
  o.resume = true;
  const auto r = train(o, console);
  EXPECT_EQ(r.steps, 12);
  EXPECT_EQ(r.updates, 8);
  EXPECT_FALSE(fs::exists(o.out_dir / "checkpoint-4"));
  for (const auto& dir : {o.out_dir, o.out_dir / "checkpoint-10", o.out_dir / "checkpoint-12"}) {
    EXPECT_TRUE(fs::exists(dir / "spiece.model")) << dir;
    EXPECT_NO_THROW(load_tokenizer(dir)) << dir;
  }
  o.steps = 14;
  EXPECT_EQ(train(o, console).updates, 2);
}

// A run whose loss, gradients or weights turn NaN or infinite stops with an error and saves nothing (it
// finished with exit 0 and a model of NaN weights); so does a checkpoint's damaged optimizer state.
TEST_F(Fixture, ADivergedRunStopsAndSavesNothing) {
  std::ostringstream console;
  auto o = options("diverged");
  o.lr = 1e30;
  o.save_every = 1;
  int64_t update = 0;
  try {
    train(o, console);
    FAIL() << "a learning rate of 1e30 trained";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(what, m, std::regex("training diverged at update ([0-9]+): "))) << what;
    update = std::stoll(m[1]);
    EXPECT_NE(what.find("Lower --lr (1e+30)"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(o.out_dir / "model.safetensors"));
  // Checkpoints before the update that diverged stay (finite weights), none from it on.
  const auto newest = latest_checkpoint(o.out_dir);
  if (!newest.empty()) {
    EXPECT_LT(std::stoll(newest.filename().string().substr(11)), update) << newest;
  }
  EXPECT_FALSE(fs::exists(o.out_dir / ("checkpoint-" + std::to_string(update))));
}

// A checkpoint's damaged bookkeeping is named with the file and what to do; --out may not be MODEL_DIR;
// a checkpoint past --steps is refused, and a finished run resumed trains nothing.
TEST_F(Fixture, DamagedCheckpointsAndMisdirectedRunsAreNamed) {
  std::ostringstream console;
  auto o = options("damaged");
  o.stop_after = 3;
  train(o, console);
  const auto state = o.out_dir / "checkpoint-3" / "trainer_state.json";
  std::stringstream good;
  good << std::ifstream(state).rdbuf();
  o.stop_after = 0;
  o.resume = true;
  for (const std::string bad : {"{", R"({"step": "abc", "options": {}})", "[1]", R"({"step": 3})"}) {
    std::ofstream(state) << bad;
    try {
      train(o, console);
      FAIL() << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(state.string() + " is damaged ("), std::string::npos) << e.what();
      // checkpoint-3 is the only one: no earlier checkpoint to resume from.
      EXPECT_NE(std::string(e.what()).find("run again without --resume (it is the only checkpoint)"), std::string::npos)
          << e.what();
    }
  }
  std::ofstream(state) << good.str();
  auto past = o;
  past.steps = 2;
  // A checkpoint at update 3 resumed with --steps 2.
  EXPECT_TRUE(refused_with(past, console, "is at update 3, past --steps 2; pass --steps 3 or more"));
  auto finish = o;
  finish.steps = 3;
  EXPECT_EQ(train(finish, console).updates, 0);
  EXPECT_TRUE(fs::exists(o.out_dir / "model.safetensors"));

  auto over_itself = options("unused");
  over_itself.out_dir = model / ".";
  EXPECT_TRUE(refused_with(over_itself, console, "is MODEL_DIR"));  // --out MODEL_DIR
}

// A newest checkpoint whose weights, config, tokenizer or optimizer state cannot be read (copied back in part,
// cut short) is named with the checkpoint before it to resume from: the error named the file alone.
TEST_F(Fixture, AnUnreadableCheckpointIsNamedWithTheOneToResumeFrom) {
  std::ostringstream console;
  auto o = options("whole-checkpoints");
  o.save_every = 2;
  o.stop_after = 4;
  train(o, console);
  const auto damaged_copy = [&](const std::string& name, const std::string& file, bool remove) {
    const auto out = tmp.path() / name;
    fs::copy(o.out_dir, out, fs::copy_options::recursive);
    const auto path = out / "checkpoint-4" / file;
    if (remove) {
      fs::remove(path);
    } else {
      fs::resize_file(path, fs::file_size(path) / 2);
    }
    return out;
  };
  auto resumed = o;
  resumed.stop_after = 0;
  resumed.resume = true;
  for (const auto& [file, remove] : std::vector<std::pair<std::string, bool>>{{"model.safetensors", false},
                                                                              {"model.safetensors", true},
                                                                              {"optimizer.safetensors", false},
                                                                              {"optimizer.safetensors", true},
                                                                              {"config.json", true},
                                                                              {"spiece.model", true}}) {
    resumed.out_dir = damaged_copy(file + (remove ? "-removed" : "-cut"), file, remove);
    const auto ckpt = (resumed.out_dir / "checkpoint-4").string();
    try {
      train(resumed, console);
      ADD_FAILURE() << file << " damaged: it resumed";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("cannot resume from " + ckpt + ": ", 0), 0u) << what;
      EXPECT_NE(what.find("; remove " + ckpt + " to resume from an earlier checkpoint, checkpoint-2"),
                std::string::npos)
          << what;
    }
  }
  // Done as it says, the run resumes from checkpoint-2.
  fs::remove_all(resumed.out_dir / "checkpoint-4");
  EXPECT_EQ(train(resumed, console).updates, 10);
}

// A console that sets `stop` once its text holds `trigger`: a stop request at a known point of the run.
class StopWhenConsoleSays : public std::stringbuf {
 public:
  StopWhenConsoleSays(std::atomic<bool>& stop, std::string trigger) : stop_(stop), trigger_(std::move(trigger)) {}

 protected:
  std::streamsize xsputn(const char* text, std::streamsize n) override {
    const auto written = std::stringbuf::xsputn(text, n);
    if (str().find(trigger_) != std::string::npos) stop_ = true;
    return written;
  }
  int_type overflow(int_type c) override {
    const auto written = std::stringbuf::overflow(c);
    if (str().find(trigger_) != std::string::npos) stop_ = true;
    return written;
  }

 private:
  std::atomic<bool>& stop_;
  const std::string trigger_;
};

// A stop request (SIGINT/SIGTERM in `srformer train`) ends the run after the current update with a
// checkpoint, which resumes as --stop-after's does.
TEST_F(Fixture, AStopRequestEndsTheRunWithACheckpoint) {
  std::atomic<bool> stop{false};
  StopWhenConsoleSays buffer(stop, "step 1/12 ");  // update 1's line: the request comes during update 2
  std::ostream console(&buffer);
  auto o = options("stop-request");
  o.stop_requested = &stop;
  const auto r = train(o, console);
  EXPECT_TRUE(r.stopped_by_signal);
  EXPECT_EQ(r.steps, 2);
  EXPECT_TRUE(fs::exists(o.out_dir / "checkpoint-2" / "optimizer.safetensors"));
  EXPECT_NE(buffer.str().find("stopped after update 2 of 12 (a stop signal); continue with --resume"),
            std::string::npos)
      << buffer.str();
  o.stop_requested = nullptr;
  o.resume = true;
  EXPECT_EQ(train(o, console).updates, 10);
}

// A stop requested before the first update (Ctrl-C while the data or the model are read) ends the run with
// nothing written. It ran one update and saved checkpoint-1, and a new run into the same --out was then
// refused for holding an earlier run's checkpoints.
TEST_F(Fixture, AStopRequestBeforeTheFirstUpdateWritesNothing) {
  std::ostringstream console;
  const std::atomic<bool> stop{true};
  auto o = options("stop-before");
  o.stop_requested = &stop;
  const auto r = train(o, console);
  EXPECT_TRUE(r.stopped_by_signal);
  EXPECT_EQ(r.updates, 0);
  EXPECT_FALSE(fs::exists(o.out_dir)) << console.str();
  EXPECT_NE(console.str().find("stopped before the first update (a stop signal): nothing was trained or written"),
            std::string::npos)
      << console.str();

  // The same --out takes a new run; a resumed one stopped alike leaves its checkpoint and log as they were.
  o.stop_requested = nullptr;
  o.stop_after = 3;
  ASSERT_EQ(train(o, console).steps, 3);
  const auto log_before = [&] {
    std::ifstream in(o.out_dir / "train_log.jsonl");
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string log = log_before();
  o.stop_after = 0;
  o.resume = true;
  o.stop_requested = &stop;
  console.str("");
  const auto resumed = train(o, console);
  EXPECT_TRUE(resumed.stopped_by_signal);
  EXPECT_EQ(resumed.updates, 0);
  EXPECT_EQ(latest_checkpoint(o.out_dir).filename(), "checkpoint-3");
  EXPECT_EQ(log_before(), log);
  EXPECT_NE(console.str().find("nothing was trained or written; " + o.out_dir.string() +
                               " is as it was, continue with --resume"),
            std::string::npos)
      << console.str();
  o.stop_requested = nullptr;
  EXPECT_EQ(train(o, console).updates, 9);
}

// A stop request (SIGTERM of a preempted job, with a grace period before SIGKILL) is not held up by a
// validation: one due at the update it came during is skipped, one under way ends between two batches, and
// the checkpoint follows at once. The stop's checkpoint came only after a whole validation (minutes on a
// large split), and a job killed meanwhile lost every update since its last --save-every.
TEST_F(Fixture, AStopRequestDoesNotWaitForAValidation) {
  std::atomic<bool> stop{false};
  // Requested once update 1's validation is done: it comes during update 2, whose validation is skipped.
  StopWhenConsoleSays buffer(stop, "step 1: validation loss");
  std::ostream stopping_console(&buffer);
  auto o = options("stop-validation");
  o.validation_file = valid_file;
  o.eval_every = 1;
  o.stop_requested = &stop;
  EXPECT_TRUE(train(o, stopping_console).stopped_by_signal);
  EXPECT_TRUE(fs::exists(o.out_dir / "checkpoint-2" / "trainer_state.json"));
  EXPECT_NE(buffer.str().find("step 2: validation skipped (a stop signal)"), std::string::npos) << buffer.str();
  std::vector<int64_t> validated;
  std::ifstream log(o.out_dir / "train_log.jsonl");
  for (std::string line; std::getline(log, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("validation_loss")) validated.push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(validated, std::vector<int64_t>{1});

  std::ostringstream console;
  // Requested while the validation after update 3 runs (many examples, one per batch): it ends there, with
  // the updates logged once and a checkpoint at 3 that resumes as any other.
  write_data(valid_file, 400, 3);
  o.out_dir = tmp.path() / "stop-during-validation";
  o.eval_every = 3;
  o.eval_examples = 0;
  o.eval_batch = 1;
  o.log_every = 2;
  stop = false;
  // Set a while after update 2's line, when update 3 (milliseconds) is done and its validation (seconds) runs;
  // on a machine slow enough to be still in update 3, the stop skips the validation instead, alike.
  std::thread watcher([&] {
    const auto log_path = o.out_dir / "train_log.jsonl";
    for (int i = 0; i < 60000 && !stop; ++i) {
      std::ifstream in(log_path);
      for (std::string line; std::getline(in, line);) {
        if (line.find("\"step\":2,") != std::string::npos) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          stop = true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  console.str("");
  const auto r = train(o, console);
  watcher.join();
  EXPECT_TRUE(r.stopped_by_signal);
  EXPECT_EQ(r.steps, 3) << console.str();
  EXPECT_NE(console.str().find("step 3: validation skipped (a stop signal)"), std::string::npos) << console.str();
  EXPECT_TRUE(fs::exists(o.out_dir / "checkpoint-3" / "trainer_state.json"));
  std::vector<int64_t> logged;
  std::ifstream in(o.out_dir / "train_log.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_FALSE(j.contains("validation_loss")) << line;
    logged.push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(logged, (std::vector<int64_t>{2, 3}));  // every update in one line, the stop's included
}

// A run killed while saving (a second Ctrl-C, SIGKILL) leaves checkpoint-N.tmp: never read by --resume, and
// removed by a later save at that same N only; a resumed run stopping elsewhere kept it, model-sized, for
// good.
TEST_F(Fixture, ACheckpointLeftUnfinishedIsRemovedByTheNextRun) {
  std::ostringstream console;
  auto o = options("unfinished");
  o.stop_after = 3;
  train(o, console);
  const auto unfinished = o.out_dir / "checkpoint-5.tmp";
  fs::copy(o.out_dir / "checkpoint-3", unfinished);
  fs::create_directories(o.out_dir / "checkpoint-x.tmp");  // not a name the trainer writes: left alone
  o.stop_after = 4;
  o.resume = true;
  console.str("");
  EXPECT_EQ(train(o, console).updates, 1);
  EXPECT_NE(console.str().find("resuming from " + (o.out_dir / "checkpoint-3").string()), std::string::npos)
      << console.str();
  EXPECT_FALSE(fs::exists(unfinished));
  EXPECT_NE(console.str().find("note: removed " + unfinished.string() +
                               ", a checkpoint an earlier run did not finish saving"),
            std::string::npos)
      << console.str();
  EXPECT_TRUE(fs::exists(o.out_dir / "checkpoint-x.tmp"));
  EXPECT_TRUE(fs::exists(o.out_dir / "checkpoint-4" / "trainer_state.json"));
}

// A checkpoint-N directory whose N is past int64 (no run writes one) made every run into that --out fail with a
// bare "stoll": it is no checkpoint, and left alone.
TEST_F(Fixture, ACheckpointNumberPastInt64IsNoCheckpoint) {
  std::ostringstream console;
  auto o = options("huge-step");
  const auto huge = o.out_dir / "checkpoint-99999999999999999999";
  const auto huge_unfinished = o.out_dir / "checkpoint-99999999999999999999.tmp";
  fs::create_directories(huge);
  fs::create_directories(huge_unfinished);
  std::ofstream(huge / "trainer_state.json") << R"({"step": 1})";
  o.stop_after = 3;
  EXPECT_EQ(train(o, console).steps, 3);
  o.stop_after = 0;
  o.resume = true;
  console.str("");
  EXPECT_EQ(train(o, console).updates, 9);
  EXPECT_NE(console.str().find("resuming from " + (o.out_dir / "checkpoint-3").string()), std::string::npos)
      << console.str();
  EXPECT_TRUE(fs::exists(huge / "trainer_state.json"));
  EXPECT_TRUE(fs::exists(huge_unfinished));
}

// BART's final_logits_bias is a buffer in Hugging Face, which its Trainer never updates; it was trained
// here like a weight (AdamW moved it at every update).
TEST_F(Fixture, BartsFinalLogitsBiasIsNotTrained) {
  std::ostringstream console;
  auto o = options("bart-bias");
  o.model_dir = tmp.path() / "bart";
  write_random_model(o.model_dir, tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4, 32), 3, 0.0);
  fs::copy_file(model / "spiece.model", o.model_dir / "spiece.model");
  o.steps = 3;
  o.warmup_steps = 0;
  train(o, console);
  const auto before = SafetensorsFile::open(o.model_dir / "model.safetensors");
  const auto after = SafetensorsFile::open(o.out_dir / "model.safetensors");
  EXPECT_TRUE(torch::equal(after.tensor("final_logits_bias"), before.tensor("final_logits_bias")));
  // The rest trained, the biases of the layers among them.
  const auto out_proj = "model.decoder.layers.0.self_attn.out_proj.bias";
  EXPECT_FALSE(torch::equal(after.tensor(out_proj), before.tensor(out_proj)));
  // Resumed from a checkpoint, it stays as it was too.
  auto resumed = o;
  resumed.out_dir = tmp.path() / "bart-bias-resumed";
  resumed.stop_after = 1;
  train(resumed, console);
  resumed.stop_after = 0;
  resumed.resume = true;
  train(resumed, console);
  EXPECT_TRUE(torch::equal(SafetensorsFile::open(resumed.out_dir / "model.safetensors").tensor("final_logits_bias"),
                           before.tensor("final_logits_bias")));
}

// A tokenizer with more tokens than the model's embedding has rows (another checkpoint's files;
// facebook/bart-large-cnn's <mask> written out in a text) gives ids the model cannot read: the run failed at
// the batch holding one with "input_ids holds token id N outside the vocabulary", naming neither the example
// nor the token (hours in, on a large split), and `eval` after generating every batch before it.
TEST_F(Fixture, AnExampleHoldingATokenPastTheEmbeddingIsNamedBeforeTheRun) {
  const auto tok = load_tokenizer(model);
  const int64_t rows = tok->vocab_size() - 1;
  const auto readable = [&](const std::string& text) {
    const auto ids = tok->encode(text);
    return std::all_of(ids.begin(), ids.end(), [&](int64_t id) { return id < rows; });
  };
  std::string past_word, doc;
  for (const auto* w : kWords) {
    if (!readable(w)) {
      past_word = w;
    } else {
      doc += (doc.empty() ? "" : " ") + std::string(w);
    }
  }
  ASSERT_FALSE(past_word.empty()) << "every word's id is below " << rows;
  auto o = options("past-rows");
  o.model_dir = tmp.path() / "narrow";
  write_random_model(o.model_dir, tiny_config(Architecture::kT5, CrossAttentionKind::kSrformer, 4, rows), 3, 0.0);
  for (const char* f : {"spiece.model", "tokenizer_config.json"}) fs::copy_file(model / f, o.model_dir / f);
  {
    std::ofstream out(train_file);
    for (int i = 0; i < 12; ++i) {
      const bool bad = i == 9;
      out << nlohmann::json{{"id", "ex" + std::to_string(i)},
                            {"document", doc + (bad ? " " + past_word : "")},
                            {"summary", "red cat"}}
                 .dump()
          << "\n";
    }
  }
  std::ostringstream console;
  const std::string says = train_file.string() + ": example 'ex9': the document holds the token '" +
                           tok->id_to_token(rows) + "' (id " + std::to_string(rows) + "), past the " +
                           std::to_string(rows) + " rows of the model's embedding (config.json's vocab_size; its " +
                           "tokenizer has " + std::to_string(rows + 1) + " tokens)";
  EXPECT_TRUE(refused_with(o, console, says));
  EXPECT_FALSE(fs::exists(o.out_dir));

  // `eval` (summarize_all) refuses it before generating any, named as the caller names it.
  auto narrow = load_model(o.model_dir);
  GenerationOptions g;
  g.max_new_tokens = 2;
  g = with_model_tokens(g, narrow->config());
  const std::vector<std::string> docs = {doc, doc + " " + past_word};
  try {
    eval::summarize_all(*narrow, *tok, docs, g, 1, 16, {}, std::nullopt,
                        {"data.jsonl: example 'a'", "data.jsonl: example 'b'"});
    FAIL() << "summarized a document past the embedding";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("data.jsonl: example 'b': the document holds the token '", 0), 0u)
        << e.what();
  }
}

// A BART reads at most max_position_embeddings input tokens: longer --max-input-tokens (the default
// 512 over a small BART's 256) cut documents there, said once, instead of failing the run at the first
// long batch.
TEST_F(Fixture, ABartsDocumentsAreCutToItsPositions) {
  std::ostringstream console;
  auto o = options("bart-positions");
  auto bart = tiny_config(Architecture::kBart, CrossAttentionKind::kSrformer, 4, 32);
  bart.max_position_embeddings = 8;
  o.model_dir = tmp.path() / "bart8";
  write_random_model(o.model_dir, bart, 3, 0.0);
  fs::copy_file(model / "spiece.model", o.model_dir / "spiece.model");
  o.steps = 2;
  EXPECT_NO_THROW(train(o, console)) << console.str();
  EXPECT_NE(console.str().find("note: --max-input-tokens 16 is more than this model's 8 encoder positions"),
            std::string::npos)
      << console.str();
  EXPECT_NE(console.str().find("documents truncated to 8 tokens"), std::string::npos) << console.str();
}

// Summaries cut to --max-target-tokens are counted as documents are (they were cut without a word), in
// the training data and in the validation data.
TEST_F(Fixture, SummariesCutToTheTargetLimitAreCounted) {
  auto o = options("cut-summaries");
  o.steps = 1;
  o.warmup_steps = 0;
  o.max_target_tokens = 3;
  o.validation_file = valid_file;
  const auto tok = load_tokenizer(model);
  const auto over = [&](const fs::path& file) {
    int64_t n = 0;
    for (const auto& e : data::read_examples(file.string())) n += tok->encode(e.summary).size() > 3 ? 1 : 0;
    return n;
  };
  const int64_t train_over = over(train_file), valid_over = over(valid_file);
  ASSERT_GT(train_over, 0);
  ASSERT_GT(valid_over, 0);
  std::ostringstream console;
  train(o, console);
  EXPECT_NE(console.str().find(", " + std::to_string(train_over) + " summaries to 3 (--max-target-tokens))"),
            std::string::npos)
      << console.str();
  EXPECT_NE(console.str().find(std::to_string(valid_over) + " summaries cut to 3 tokens for the loss"),
            std::string::npos)
      << console.str();
}

// Dropout (here --dropout 0.2 over a config without it) changes training, and a resumed run still
// repeats the uninterrupted one exactly: each micro-batch's masks come from (seed, index).
TEST_F(Fixture, DropoutTrainsAndResumesExactly) {
  std::ostringstream console;
  auto plain = options("no-dropout");
  plain.stop_after = 1;
  train(plain, console);
  auto whole = options("dropout");
  whole.dropout = 0.2;
  train(whole, console);
  EXPECT_NE(console.str().find("dropout: hidden 0.2, attention 0.2, activation 0.2 (--dropout)"), std::string::npos)
      << console.str();
  const auto b = losses_stopped_and_resumed(whole, tmp.path() / "dropout-pieces", 5, console);
  const auto p = logged_losses(plain.out_dir), a = logged_losses(whole.out_dir);
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  EXPECT_NE(a[0], p[0]);  // same weights, same batch: only the masks differ
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "update " << i + 1;
}

// bf16 autocast on the CPU: the products really run in bf16 (the first loss differs from fp32's, by
// little), the model still learns, and resuming stays exact.
TEST_F(Fixture, Bf16AutocastTrainsAndResumesExactly) {
  std::ostringstream console;
  auto fp32 = options("fp32");
  fp32.stop_after = 1;
  train(fp32, console);
  auto whole = options("bf16");
  whole.autocast = "bf16";
  whole.steps = 30;
  const auto r = train(whole, console);
  EXPECT_EQ(r.skipped_updates, 0);
  const auto a = logged_losses(whole.out_dir);
  const auto f = logged_losses(fp32.out_dir);
  ASSERT_EQ(a.size(), 30u);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(a[0], f[0]);
  EXPECT_NEAR(a[0], f[0], 0.02 * f[0]);
  EXPECT_LT(a.back(), 0.6 * a.front()) << console.str();

  const auto b = losses_stopped_and_resumed(whole, tmp.path() / "bf16-pieces", 7, console);
  ASSERT_EQ(b.size(), 30u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "update " << i + 1;
  nlohmann::json state;
  std::ifstream(latest_checkpoint(tmp.path() / "bf16-pieces") / "trainer_state.json") >> state;
  EXPECT_EQ(state["options"]["autocast"], "bf16");
  EXPECT_FALSE(state.contains("loss_scale"));  // bf16 needs no loss scaling
}

// On a GPU: fp16 (with loss scaling) and bf16 autocast both train the tiny model. Skipped without CUDA.
TEST_F(Fixture, CudaAutocastTrains) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA autocast path is not exercised here";
  for (const std::string type : {"fp16", "bf16"}) {
    SCOPED_TRACE(type);
    std::ostringstream console;
    auto o = options("cuda-" + type);
    o.device = "cuda";
    o.autocast = type;
    o.steps = 30;
    const auto r = train(o, console);
    const auto losses = logged_losses(o.out_dir);
    ASSERT_EQ(losses.size(), 30u);
    EXPECT_LT(losses.back(), 0.6 * losses.front()) << console.str();
    EXPECT_LT(r.skipped_updates, 5);
    nlohmann::json state;
    std::ifstream(latest_checkpoint(o.out_dir) / "trainer_state.json") >> state;
    EXPECT_EQ(state.contains("loss_scale"), type == "fp16");
    // The saved model is fp32 and serves on the CPU.
    auto m = load_model(o.out_dir);
    EXPECT_EQ(m->dtype(), torch::kFloat32);
  }
}

}  // namespace
}  // namespace srformer::train

namespace srformer::train {
namespace {

// Teacher forcing must reach every parameter: the encoder, both decoder attentions, the RAF recurrence
// (SNN_kv, threshold, leak) and the tied embedding.
TEST_F(Fixture, EveryParameterGetsAGradient) {
  auto m = load_model(model);
  for (const auto& [name, p] : m->named_parameters()) p.requires_grad_(true);
  const auto ids = torch::tensor({{5, 6, 7, 8, 9, 10, 11, 12, 13, 5, 6, 1}, {7, 8, 9, 10, 11, 1, 0, 0, 0, 0, 0, 0}});
  const auto mask = ids.ne(0).to(torch::kLong);
  const auto enc = m->encode(ids, mask);
  const auto dec = torch::tensor({{0, 5, 6, 7, 8, 9}, {0, 9, 8, 7, 6, 5}});
  m->forward(enc, dec, torch::full({2}, 4, torch::kLong)).logsumexp(-1).sum().backward();
  for (const auto& [name, p] : m->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(p.grad().abs().max().item<double>(), 0.0) << name;
  }
}

}  // namespace
}  // namespace srformer::train

namespace srformer::train {
namespace {

// Validation summarizes with the L the run trains with (and writes into the saved model), not the
// starting model's srformer.expected_length: its ROUGE is what the saved model scores.
TEST_F(Fixture, ValidationDecodesWithTheRunsExpectedLength) {
  {
    nlohmann::json config;
    std::ifstream(model / "config.json") >> config;
    config["srformer"]["expected_length"] = 2;  // as a model trained with --max-target-tokens 2 has
    std::ofstream(model / "config.json") << config.dump(2) << "\n";
  }
  auto o = options("run");
  o.steps = 20;
  o.validation_file = valid_file;
  std::ostringstream console;
  const auto r = train(o, console);
  ASSERT_TRUE(r.rouge1.has_value());

  LoadOptions as_trained;
  as_trained.pack_projections = false;
  auto saved = load_model(o.out_dir, as_trained);
  ASSERT_EQ(saved->config().srformer.expected_length, o.max_target_tokens);
  const auto tok = load_tokenizer(o.out_dir);
  std::vector<std::string> docs, refs;
  for (const auto& e : data::read_examples(valid_file.string())) {
    docs.push_back(e.document);
    refs.push_back(e.summary);
  }
  GenerationOptions g;
  g.max_new_tokens = o.max_target_tokens;
  g = with_model_tokens(g, saved->config());
  g.vocab_limit = tok->vocab_size();
  const auto s = eval::summarize_all(*saved, *tok, docs, g, o.eval_batch, o.max_input_tokens);
  const auto mean = eval::score_corpus(s.predictions, refs).mean;
  EXPECT_DOUBLE_EQ(*r.rouge1, 100 * mean[eval::RougeType::kRouge1].fmeasure);
  EXPECT_DOUBLE_EQ(*r.rouge2, 100 * mean[eval::RougeType::kRouge2].fmeasure);
  EXPECT_DOUBLE_EQ(*r.rougeL, 100 * mean[eval::RougeType::kRougeL].fmeasure);
}

}  // namespace
}  // namespace srformer::train

namespace srformer::train {
namespace {

// --max-target-tokens is the saved model's generation default also where its defaults come from
// generation_config.json, which Hugging Face (and every tool here) reads instead of config.json's keys.
TEST_F(Fixture, TheSavedModelsGenerationDefaultIsTheTrainingLengthAlsoWithAGenerationConfig) {
  std::ofstream(model / "generation_config.json")
      << R"({"decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0, "max_length": 20})";
  auto o = options("generation-config");
  o.steps = 2;
  std::ostringstream console;
  train(o, console);
  for (const auto& dir : {o.out_dir, latest_checkpoint(o.out_dir)}) {
    const auto c = ModelConfig::load(dir / "config.json");
    EXPECT_EQ(model_generation_defaults(c).max_new_tokens, o.max_target_tokens) << dir;
    EXPECT_EQ(c.srformer.expected_length, o.max_target_tokens) << dir;
  }

  // A summarization task's parameters apply over both (as Hugging Face's pipeline); a minimum past the new
  // maximum would leave defaults that every request is refused with.
  fs::remove(model / "generation_config.json");
  {
    nlohmann::json config;
    std::ifstream(model / "config.json") >> config;
    config["task_specific_params"] = {{"summarization", {{"max_length", 200}, {"min_length", 30}, {"num_beams", 2}}}};
    std::ofstream(model / "config.json") << config.dump(2) << "\n";
  }
  o.out_dir = tmp.path() / "task-params";
  train(o, console);
  const auto c = ModelConfig::load(o.out_dir / "config.json");
  const auto d = model_generation_defaults(c);
  EXPECT_EQ(d.max_new_tokens, o.max_target_tokens);
  EXPECT_EQ(d.min_new_tokens, o.max_target_tokens);
  EXPECT_EQ(d.num_beams, 2);  // the rest of the task's defaults stand
  EXPECT_EQ(unusable_generation_defaults(c), "");
}

// Hugging Face's training starts the decoder input with config.json's decoder_start_token_id
// (shift_tokens_right, T5's _shift_right read model.config); generation_config.json's, where it names
// another, is generation's only. Training took generation's, so the model learnt to follow a start token
// that Hugging Face's fine-tuning of it never gives, and the saved config.json said generation's id.
TEST_F(Fixture, TeacherForcingStartsWithConfigJsonsDecoderStartNotGenerations) {
  LoadOptions as_trained;
  as_trained.pack_projections = false;
  const auto tok = load_tokenizer(model);
  const auto valid = data::read_examples(valid_file.string());
  auto o = options("config-start");
  const double with_config_start = validation_loss(*load_model(model, as_trained), *tok, valid, o);
  std::ofstream(model / "generation_config.json")
      << R"({"decoder_start_token_id": 3, "eos_token_id": 1, "pad_token_id": 0})";
  const auto loaded = load_model(model, as_trained);
  ASSERT_EQ(loaded->config().decoder_start_token_id, 3);  // generation starts with it
  EXPECT_EQ(loaded->config().training_decoder_start(), 0);
  EXPECT_EQ(validation_loss(*loaded, *tok, valid, o), with_config_start);

  // Trained and saved, config.json keeps its own id and generation_config.json its own.
  o.steps = 1;
  o.warmup_steps = 0;
  std::ostringstream console;
  train(o, console);
  for (const auto& dir : {o.out_dir, latest_checkpoint(o.out_dir)}) {
    nlohmann::json config, generation;
    std::ifstream(dir / "config.json") >> config;
    std::ifstream(dir / "generation_config.json") >> generation;
    EXPECT_EQ(config["decoder_start_token_id"], 0) << dir;
    EXPECT_EQ(generation["decoder_start_token_id"], 3) << dir;
  }
}

// A generation_config.json made from config.json ("_from_model_config": true, as transformers writes it) whose
// special ids config.json no longer holds (transformers 4.41+ moves them out): its settings are the model's.
// The saved config.json got generation_config.json's forced_bos/forced_eos/eos ids written into it, and with
// a forced id there, config.json's generation keys won over generation_config.json's on reading: the trained
// (or converted) model summarized greedily, without the checkpoint's beams. config.json keeps its own ids now.
TEST_F(Fixture, TheSavedConfigKeepsItsOwnSpecialIdsBesideAGenerationConfig) {
  std::ofstream(model / "generation_config.json") << R"({"_from_model_config": true, "decoder_start_token_id": 0,
      "eos_token_id": 1, "pad_token_id": 0, "forced_bos_token_id": 3, "num_beams": 2, "no_repeat_ngram_size": 2})";
  nlohmann::json before;
  std::ifstream(model / "config.json") >> before;
  const auto start = ModelConfig::load(model / "config.json");
  ASSERT_EQ(start.num_beams, 2);
  ASSERT_EQ(start.forced_bos_token_id, 3);
  auto o = options("own-ids");
  o.steps = 1;
  o.warmup_steps = 0;
  std::ostringstream console;
  train(o, console);
  for (const auto& dir : {o.out_dir, latest_checkpoint(o.out_dir)}) {
    nlohmann::json saved;
    std::ifstream(dir / "config.json") >> saved;
    for (const char* key : {"eos_token_id", "forced_bos_token_id", "forced_eos_token_id", "decoder_start_token_id"}) {
      EXPECT_EQ(saved.value(key, nlohmann::json("absent")), before.value(key, nlohmann::json("absent")))
          << dir << " " << key;
    }
    const auto c = ModelConfig::load(dir / "config.json");
    EXPECT_EQ(c.num_beams, 2) << dir;
    EXPECT_EQ(c.no_repeat_ngram_size, 2) << dir;
    EXPECT_EQ(c.forced_bos_token_id, 3) << dir;
    EXPECT_EQ(model_generation_defaults(c).max_new_tokens, o.max_target_tokens) << dir;  // the run's L still
  }
}

}  // namespace
}  // namespace srformer::train

namespace srformer::train {
namespace {

double first_logged(const fs::path& out, const char* key) {
  std::ifstream in(out / "train_log.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains(key)) return j[key].get<double>();
  }
  ADD_FAILURE() << "no " << key << " in " << (out / "train_log.jsonl").string();
  return 0.0;
}

// TRAINING.md: with --grad-accum N the loss is averaged over all target tokens of the N micro-batches, so
// accumulation equals one larger batch, also when the micro-batches hold different numbers of tokens.
TEST_F(Fixture, AccumulatedMicroBatchesOfUnequalTokenCountsGiveOneBatchsGradient) {
  // Summaries of 1 to 4 words: micro-batches of 5, 5 and 2 examples with unequal token counts.
  {
    std::ifstream in(train_file);
    std::ofstream out(tmp.path() / "uneven.jsonl");
    int i = 0;
    for (std::string line; std::getline(in, line) && i < 12; ++i) {
      auto j = nlohmann::json::parse(line);
      const auto doc = j["document"].get<std::string>();
      size_t end = 0;
      for (int w = 0; w < 1 + (i * 7) % 4; ++w) end = doc.find(' ', end + 1);
      j["summary"] = doc.substr(0, end);
      out << j.dump() << "\n";
    }
  }
  auto one = options("one");
  one.train_file = tmp.path() / "uneven.jsonl";
  one.steps = 1;
  one.warmup_steps = 0;
  one.dropout = 0.0;
  one.label_smoothing = 0.1;
  one.batch_size = 12;
  auto accumulated = one;
  accumulated.out_dir = tmp.path() / "accumulated";
  accumulated.batch_size = 5;
  accumulated.grad_accum = 3;
  std::ostringstream console;
  train(one, console);
  train(accumulated, console);
  EXPECT_DOUBLE_EQ(first_logged(accumulated.out_dir, "tokens"), first_logged(one.out_dir, "tokens"));
  EXPECT_NEAR(first_logged(accumulated.out_dir, "loss"), first_logged(one.out_dir, "loss"), 1e-5);
  const double norm = first_logged(one.out_dir, "grad_norm");
  EXPECT_NEAR(first_logged(accumulated.out_dir, "grad_norm"), norm, 1e-5 * norm);
}

}  // namespace
}  // namespace srformer::train
