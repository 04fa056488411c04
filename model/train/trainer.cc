#include "model/train/trainer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/autocast.h"
#include "model/config_generation.h"
#include "model/data/encode.h"
#include "model/data/examples.h"
#include "model/dropout.h"
#include "model/error_message.h"
#include "model/eval/batch_summarize.h"
#include "model/eval/rouge.h"
#include "model/generation/generate.h"
#include "model/io/atomic_file.h"
#include "model/io/checkpoint.h"
#include "model/io/json_file.h"
#include "model/io/model_files.h"
#include "model/limits.h"
#include "model/seq2seq.h"
#include "model/train/batch_plan.h"
#include "model/train/loss.h"
#include "model/train/loss_scaler.h"

namespace srformer::train {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Params = std::vector<std::pair<std::string, torch::Tensor>>;

constexpr const char* kCheckpointPrefix = "checkpoint-";
constexpr const char* kLockFile = ".train.lock";  // OutLock's
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStagedModel = "model.tmp";  // the final model, before it is moved into --out
constexpr const char* kLogFile = "train_log.jsonl";

void check(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

void validate(const TrainOptions& o) {
  check(!o.model_dir.empty(), "a model directory is required");
  check(!o.train_file.empty(), "a training file is required");
  check(!o.out_dir.empty(), "an output directory is required");
  check(o.steps >= 1, "steps must be >= 1");
  check(o.batch_size >= 1, "batch size must be >= 1");
  check(o.grad_accum >= 1, "gradient accumulation must be >= 1");
  check(o.lr > 0 && std::isfinite(o.lr), "learning rate must be a positive number");
  check(o.warmup_steps >= -1, "warm-up steps must be >= 0");
  check(o.clip_norm >= 0, "the clipping norm must be >= 0 (0 = off)");
  check(o.label_smoothing >= 0 && o.label_smoothing < 1, "label smoothing must be in [0, 1)");
  check(o.adam.beta1 >= 0 && o.adam.beta1 < 1 && o.adam.beta2 >= 0 && o.adam.beta2 < 1, "Adam betas must be in [0, 1)");
  // Infinite ones pass `> 0`: an infinite eps made every update 0 (a run that trained nothing), an infinite
  // decay turned the weights into NaN, reported as divergence.
  check(o.adam.eps > 0 && std::isfinite(o.adam.eps), "Adam eps must be a positive number");
  check(o.adam.weight_decay >= 0 && std::isfinite(o.adam.weight_decay), "weight decay must be a number >= 0");
  check(o.max_input_tokens >= 2, "max input tokens must be >= 2");
  check(o.max_target_tokens >= 1, "max target tokens must be >= 1");
  // Validation, `summarize`, `eval` and the server decode up to max_target_tokens new tokens (the saved
  // max_length): past what generation allows, the run would fail at its first validation, or save a
  // model that every one of them refuses.
  check(o.max_target_tokens <= kMaxNewTokensLimit,
        "--max-target-tokens " + std::to_string(o.max_target_tokens) + " is more than the " +
            std::to_string(kMaxNewTokensLimit) + " tokens a summary may have (validation and the saved model " +
            "generate that many); set it to at most " + std::to_string(kMaxNewTokensLimit));
  check(!o.train_limit || *o.train_limit >= 1, "the training limit must be >= 1");
  check(o.log_every >= 1, "log every must be >= 1");
  check(o.eval_every >= 0 && o.save_every >= 0, "eval/save intervals must be >= 0");
  check(o.eval_every == 0 || !o.validation_file.empty(),
        "--eval-every " + std::to_string(o.eval_every) + " needs --validation FILE to validate on");
  // A warm-up longer than the run never reaches --lr; a stop after the last update never happens.
  check(o.warmup_steps <= o.steps, "--warmup " + std::to_string(o.warmup_steps) + " is more than --steps " +
                                       std::to_string(o.steps) + ": the learning rate would never reach --lr; " +
                                       "lower --warmup or raise --steps");
  check(o.stop_after <= o.steps, "--stop-after " + std::to_string(o.stop_after) + " is past --steps " +
                                     std::to_string(o.steps) + ": the run ends there anyway; lower --stop-after " +
                                     "or raise --steps");
  check(o.keep_checkpoints >= 1, "keep at least one checkpoint");
  check(o.stop_after >= 0, "stop-after must be >= 0");
  check(o.eval_examples >= 0 && o.eval_batch >= 1, "eval examples must be >= 0 and the eval batch >= 1");
  parse_autocast(o.autocast);  // throws naming the choices
  check(!o.dropout || (*o.dropout >= 0 && *o.dropout < 1), "dropout must be in [0, 1)");
}

// How a training forward runs; validation runs in fp32 without dropout.
struct TrainingMode {
  std::optional<c10::ScalarType> mixed;  // autocast type
  DropoutRates dropout;
};

// Weights that Hugging Face keeps as buffers, which its Trainer never updates: BART's final_logits_bias
// ([1, V], created zero). Trained here, it drifted from the checkpoint's as no other fine-tuning moves it.
bool is_frozen(const std::string& name) { return name == "final_logits_bias"; }

// The seed of micro-batch `index`'s dropout masks (splitmix64 of the run's seed and the index).
uint64_t dropout_seed(uint64_t seed, int64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The warm-up the run takes: --warmup, else 5% of --steps (rounded down).
int64_t warmup_steps(const TrainOptions& o) { return o.warmup_steps >= 0 ? o.warmup_steps : o.steps / 20; }

// The flag (or argument) that sets options_json()'s `key`.
std::string flag_of(const std::string& key) {
  static const std::map<std::string, std::string> flags = {{"model_dir", "MODEL_DIR"},
                                                           {"train_file", "TRAIN.jsonl"},
                                                           {"validation_file", "--validation"},
                                                           {"steps", "--steps"},
                                                           {"batch_size", "--batch"},
                                                           {"grad_accum", "--grad-accum"},
                                                           {"lr", "--lr"},
                                                           {"warmup_steps", "--warmup"},
                                                           {"beta1", "--beta1"},
                                                           {"beta2", "--beta2"},
                                                           {"eps", "--adam-eps"},
                                                           {"weight_decay", "--weight-decay"},
                                                           {"clip_norm", "--clip"},
                                                           {"label_smoothing", "--label-smoothing"},
                                                           {"max_input_tokens", "--max-input-tokens"},
                                                           {"max_target_tokens", "--max-target-tokens"},
                                                           {"train_limit", "--limit"},
                                                           {"seed", "--seed"},
                                                           {"device", "--device"},
                                                           {"threads", "--threads"},
                                                           {"autocast", "--autocast"},
                                                           {"dropout", "--dropout"},
                                                           {"eval_examples", "--eval-examples"}};
  const auto f = flags.find(key);
  return f == flags.end() ? key : f->second;
}

// An options_json() value as a flag takes it; "none" for an option left out (no --limit, no --validation).
std::string shown(const nlohmann::json& value) {
  if (value.is_null() || value == "") return "none";
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// What must match for a resumed run to continue the interrupted one exactly.
nlohmann::json options_json(const TrainOptions& o) {
  // Absolute: a run resumed from another working directory names the same files.
  const auto absolute = [](const fs::path& p) {
    return p.empty() ? p.string() : fs::absolute(p).lexically_normal().string();
  };
  return {{"model_dir", absolute(o.model_dir)},
          {"train_file", absolute(o.train_file)},
          {"validation_file", absolute(o.validation_file)},
          {"steps", o.steps},
          {"batch_size", o.batch_size},
          {"grad_accum", o.grad_accum},
          {"lr", o.lr},
          // The warm-up taken, not -1 for the default: --warmup 50 is 5% of --steps 1000, and the default's
          // warm-up moves with --steps.
          {"warmup_steps", warmup_steps(o)},
          {"beta1", o.adam.beta1},
          {"beta2", o.adam.beta2},
          {"eps", o.adam.eps},
          {"weight_decay", o.adam.weight_decay},
          {"clip_norm", o.clip_norm},
          {"label_smoothing", o.label_smoothing},
          {"max_input_tokens", o.max_input_tokens},
          {"max_target_tokens", o.max_target_tokens},
          {"train_limit", o.train_limit ? nlohmann::json(*o.train_limit) : nlohmann::json()},
          {"seed", o.seed},
          {"device", o.device},
          // The CPU's sums are split over the threads: another count rounds them otherwise (--threads, or its
          // default, the usable CPUs, on another machine), and a resumed run no longer repeats the uninterrupted one.
          {"threads", at::get_num_threads()},
          {"autocast", o.autocast},
          {"dropout", o.dropout ? nlohmann::json(*o.dropout) : nlohmann::json()},
          // Which validation examples the figures are of: another count made the logged validation loss and
          // ROUGE after a resume those of other examples, and the curve jumped without a word.
          {"eval_examples", o.validation_file.empty() ? nlohmann::json() : nlohmann::json(o.eval_examples)}};
}

// FNV-1a 64 of the examples' ids, documents and summaries (each with its length, in file order), as 16 hex
// digits: what a resumed run compares to tell the data it continues on from the data it started on.
std::string fingerprint(const std::vector<data::Example>& examples) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto add = [&h](std::string_view bytes) {
    for (const unsigned char b : bytes) h = (h ^ b) * 0x100000001B3ull;
  };
  for (const auto& e : examples) {
    for (const std::string* field : {&e.id, &e.document, &e.summary}) {
      add(std::to_string(field->size()) + ":");
      add(*field);
    }
  }
  std::ostringstream hex;
  hex << std::hex << std::setw(16) << std::setfill('0') << h;
  return hex.str();
}

// Documents are cut to --max-input-tokens, and to a BART's encoder positions (max_position_embeddings),
// past which it cannot read: the default 512 is more than a small BART has.
int64_t input_tokens_for(const ModelConfig& c, const TrainOptions& o) {
  return input_limit_can_be_raised(c) ? o.max_input_tokens : std::min(o.max_input_tokens, c.max_input_tokens);
}

// How many documents and summaries tokenize() cut to the run's limits.
struct Cuts {
  int64_t documents = 0, summaries = 0;
};

// Examples of `file` ("": unnamed) as the model reads them; one holding a token past the model's embedding
// is refused before the run starts, named (it failed the run at its batch, hours in).
std::vector<TokenizedExample> tokenize(const std::vector<data::Example>& examples, const Tokenizer& tok,
                                       const ModelConfig& c, const TrainOptions& o, Cuts* cuts,
                                       const fs::path& file = {}) {
  std::vector<TokenizedExample> out;
  out.reserve(examples.size());
  for (const auto& e : examples) {
    bool document_cut = false, summary_cut = false;
    TokenizedExample t{data::encode_document(tok, c, e.document, input_tokens_for(c, o), &document_cut),
                       data::encode_truncated(tok, e.summary, o.max_target_tokens, &summary_cut)};
    try {
      data::check_in_embedding(t.input, tok, c, "document");
      data::check_in_embedding(t.labels, tok, c, "summary");
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument((file.empty() ? std::string() : file.string() + ": ") + "example '" + e.id +
                                  "': " + error.what());
    }
    if (cuts) {
      cuts->documents += document_cut ? 1 : 0;
      cuts->summaries += summary_cut ? 1 : 0;
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Teacher-forced loss of one batch: decoder input = config.json's decoder start + labels shifted right
// (as Hugging Face's training; a generation_config.json's other start is generation's only); L = the
// target length limit for every row (the L generation uses). A training forward (`training`) drops
// out at the mode's rates and, in mixed precision, runs the model's products under autocast; the loss
// is computed from fp32 logits outside both.
LossTerms batch_loss(Seq2SeqModel& model, const std::vector<TokenizedExample>& set, const std::vector<size_t>& rows,
                     const TrainOptions& o, int64_t classes, const TrainingMode* training = nullptr) {
  const auto& c = model.config();
  std::vector<const TokenIds*> inputs;
  size_t width = 1;
  for (const auto r : rows) {
    inputs.push_back(&set[r].input);
    width = std::max(width, set[r].labels.size());
  }
  const auto B = static_cast<int64_t>(rows.size());
  const auto q = static_cast<int64_t>(width);
  auto labels = torch::full({B, q}, kIgnoreLabel, torch::kLong);
  auto dec_in = torch::full({B, q}, c.pad_token_id, torch::kLong);
  auto la = labels.accessor<int64_t, 2>();
  auto da = dec_in.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& l = set[rows[static_cast<size_t>(b)]].labels;
    da[b][0] = c.training_decoder_start();
    for (size_t j = 0; j < l.size(); ++j) {
      la[b][static_cast<int64_t>(j)] = l[j];
      if (j + 1 < l.size()) da[b][static_cast<int64_t>(j) + 1] = l[j];
    }
  }
  const auto padded = data::pad_rows(inputs, c.pad_token_id);
  const auto dev = model.device();
  const auto L = torch::full({B}, o.max_target_tokens, torch::TensorOptions().dtype(torch::kLong).device(dev));
  torch::Tensor logits;
  {
    std::optional<AutocastScope> scope;
    std::optional<DropoutScope> drop;
    if (training != nullptr) {
      if (training->mixed) scope.emplace(dev.type(), *training->mixed);
      drop.emplace(training->dropout);
    }
    const auto enc = model.encode(padded.ids.to(dev), padded.mask.to(dev));
    logits = model.forward(enc, dec_in.to(dev), L).to(torch::kFloat32);
  }
  return token_cross_entropy(logits, labels.to(dev), o.label_smoothing, classes);
}

struct Validation {
  double loss = 0.0;
  std::optional<eval::RougeScores> rouge;
  double seconds = 0.0;
};

// Thrown out of a validation that a stop request (SIGINT/SIGTERM) ended between two of its batches.
struct ValidationStopped {};

// Whether a stop has been requested (TrainOptions::stop_requested).
bool stop_requested(const TrainOptions& o) { return o.stop_requested != nullptr && o.stop_requested->load(); }

// `stoppable`: throws ValidationStopped between batches once a stop is requested.
double mean_loss(Seq2SeqModel& model, const std::vector<TokenizedExample>& set, const TrainOptions& o, int64_t classes,
                 bool stoppable = false) {
  torch::NoGradGuard no_grad;
  double nll = 0.0;
  int64_t tokens = 0;
  for (size_t first = 0; first < set.size(); first += static_cast<size_t>(o.eval_batch)) {
    if (stoppable && stop_requested(o)) throw ValidationStopped{};
    std::vector<size_t> rows;
    for (size_t i = first; i < std::min(set.size(), first + static_cast<size_t>(o.eval_batch)); ++i) rows.push_back(i);
    const auto t = batch_loss(model, set, rows, o, classes);
    nll += t.nll_sum;
    tokens += t.tokens;
  }
  return nll / static_cast<double>(std::max<int64_t>(tokens, 1));
}

// Throws ValidationStopped when a stop is requested meanwhile: a preempted job's grace period (SIGTERM, then
// SIGKILL) is shorter than a validation can be, and the stop's checkpoint came only after it.
Validation validate_model(Seq2SeqModel& model, const Tokenizer& tok, const std::vector<data::Example>& raw,
                          const std::vector<TokenizedExample>& set, const TrainOptions& o, int64_t classes) {
  const auto start = Clock::now();
  Validation v;
  v.loss = mean_loss(model, set, o, classes, true);

  GenerationOptions g;
  g.max_new_tokens = o.max_target_tokens;
  g = with_model_tokens(g, model.config());
  g.vocab_limit = tok.vocab_size();
  std::vector<std::string> docs, refs;
  for (const auto& e : raw) {
    docs.push_back(e.document);
    refs.push_back(e.summary);
  }
  // With the L of training, which the saved model gets: not the starting model's own expected_length.
  const auto s = eval::summarize_all(
      model, tok, docs, g, o.eval_batch, input_tokens_for(model.config(), o),
      [&](size_t, size_t) {
        if (stop_requested(o)) throw ValidationStopped{};
      },
      o.max_target_tokens);
  v.rouge = eval::score_corpus(s.predictions, refs, {}, {1, 0.95, 0}).mean;
  v.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return v;
}

// Caps one set of generation defaults (Hugging Face's keys) at the training target length.
void cap_generation_lengths(nlohmann::json& g, int64_t max_target_tokens) {
  g["max_length"] = max_target_tokens + 1;
  if (g.contains("max_new_tokens")) g["max_new_tokens"] = max_target_tokens;  // it wins over max_length
  // A minimum past the new maximum would make the defaults unusable (every request refused).
  if (const auto it = g.find("min_length"); it != g.end() && it->is_number_integer() && *it > max_target_tokens + 1) {
    *it = max_target_tokens + 1;
  }
  if (const auto it = g.find("min_new_tokens"); it != g.end() && it->is_number_integer() && *it > max_target_tokens) {
    *it = max_target_tokens;
  }
}

// Sets the saved model's generation defaults to the training target length, so that serving decodes
// with the L the model was trained with, wherever the defaults are read from: config.json, or a
// generation_config.json (read instead of config.json's keys, as Hugging Face does), and a
// summarization task's parameters (applied over either).
void set_generation_defaults(const fs::path& dir, int64_t max_target_tokens) {
  const auto read = [](const fs::path& file) {
    return read_json_file<std::runtime_error>(file, "the saved model's " + file.filename().string());
  };
  // Rewrites one of the saved model's JSON files through `edit`.
  const auto rewrite = [&](const fs::path& file, const auto& edit) {
    auto j = read(file);
    edit(j);
    write_file_atomically(file, j.dump(2) + "\n");
  };
  // config.json's lengths only where its generation keys are the ones read: a max_length written beside a
  // generation_config.json made from config.json made config.json's keys win over all of that file's (its
  // beams, length penalty, n-gram blocking), as transformers 4 reads them.
  const auto generation_file = dir / "generation_config.json";
  const bool config_decides = !fs::exists(generation_file) || [&] {
    const auto config = read(dir / "config.json");
    return config_json_generation_wins(config, read(generation_file), config.value("model_type", "") == "bart");
  }();
  rewrite(dir / "config.json", [&](nlohmann::json& j) {
    if (config_decides) cap_generation_lengths(j, max_target_tokens);
    if (j.contains("srformer") && j["srformer"].is_object()) j["srformer"]["expected_length"] = max_target_tokens;
    if (const auto tsp = j.find("task_specific_params"); tsp != j.end() && tsp->is_object()) {
      if (const auto s = tsp->find("summarization"); s != tsp->end() && s->is_object()) {
        cap_generation_lengths(*s, max_target_tokens);
      }
    }
  });
  if (fs::exists(generation_file)) {
    rewrite(generation_file, [&](nlohmann::json& g) { cap_generation_lengths(g, max_target_tokens); });
  }
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  std::ostringstream o;
  if (s >= 3600) o << s / 3600 << "h";
  o << std::setw(s >= 3600 ? 2 : 1) << std::setfill('0') << (s / 60) % 60 << "m" << std::setw(2) << s % 60 << "s";
  return o.str();
}

// Whether `name` is "checkpoint-N" followed by `suffix` (".tmp": one being written).
bool is_checkpoint_name(const std::string& name, std::string_view suffix = {}) {
  const std::string_view prefix = kCheckpointPrefix;
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const auto digits = std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  // A number past int64 is no step of a run's: such a directory made every run into that --out fail with
  // a bare "stoll".
  int64_t step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return digits.find_first_not_of("0123456789") == std::string_view::npos && error == std::errc() &&
         end == digits.data() + digits.size();
}

std::vector<std::pair<int64_t, fs::path>> checkpoints(const fs::path& out_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  if (!fs::is_directory(out_dir)) return found;
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const auto name = entry.path().filename().string();
    if (!is_checkpoint_name(name) || !fs::exists(entry.path() / kStateFile)) continue;
    found.emplace_back(std::stoll(name.substr(std::string(kCheckpointPrefix).size())), entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The weight file of a model directory in `dir` (config.json beside weights), or "" when there is none.
std::string model_weights_in(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / "config.json", ec)) return {};
  for (const char* f :
       {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json"}) {
    if (fs::exists(dir / f, ec)) return f;
  }
  return {};
}

// Refuses an --out that cannot be made or written, naming it. It is made once the data and the model have
// loaded (a run refused before then leaves none behind), so one under a file or in /proc failed only then,
// minutes in, with the system's bare "No such file or directory". Made here and removed again at once.
void check_out_can_be_made(const fs::path& out) {
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument("cannot create the output directory --out " + out.string() + " (" + why +
                                "); choose another --out, in a directory you can write");
  };
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) refuse("it is a file, not a directory");
    if (::access(out.c_str(), W_OK | X_OK) != 0) refuse(std::strerror(errno));
    return;
  }
  fs::path first_missing = out;  // where the probe starts making directories, and so what it removes
  fs::path parent = out.parent_path();
  for (; !parent.empty() && !fs::exists(parent, ec); parent = parent.parent_path()) first_missing = parent;
  if (!parent.empty() && !fs::is_directory(parent, ec)) refuse(parent.string() + " is a file, not a directory");
  if (fs::create_directories(out, ec); ec) refuse(ec.message());
  for (auto p = out;; p = p.parent_path()) {
    fs::remove(p, ec);
    if (p == first_missing || p.empty()) break;
  }
}

// The advisory lock a run holds on its --out for its whole life; the kernel drops it at any exit, SIGKILL
// included. Two runs into one --out (a replacement pod resuming while the old one still saved its stop
// checkpoint) removed each other's checkpoint-N.tmp and resumed from a stale checkpoint.
class OutLock {
 public:
  OutLock() = default;
  OutLock(const OutLock&) = delete;
  OutLock& operator=(const OutLock&) = delete;
  ~OutLock() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Takes it on `out`, a directory, or throws naming it and the holder's pid. Where the file system has no
  // locks (some network and FUSE mounts) the run goes on without one, said on `console`.
  void take(const fs::path& out, std::ostream& console) {
    const auto path = out / kLockFile;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("cannot open " + path.string() + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      char pid[32] = {};
      const auto n = ::pread(fd, pid, sizeof pid - 1, 0);
      ::close(fd);
      if (error != EWOULDBLOCK) {
        console << "note: cannot lock " << path.string() << " (" << std::strerror(error)
                << "): nothing keeps a second run out of --out " << out.string() << std::endl;
        return;
      }
      std::string holder(pid, n > 0 ? static_cast<size_t>(n) : 0);
      holder.erase(std::find_if(holder.begin(), holder.end(), [](char c) { return c < '0' || c > '9'; }), holder.end());
      throw std::invalid_argument("--out " + out.string() + " is in use by another `srformer train` run" +
                                  (holder.empty() ? "" : " (pid " + holder + ")") +
                                  "; wait for it to end, or choose another --out");
    }
    fd_ = fd;
    // The holder's pid, for the message of a run refused meanwhile.
    const auto pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
  }

 private:
  int fd_ = -1;
};

// What to do about `ckpt`, the newest checkpoint, when it cannot be read: remove it and resume from the one
// before it, named. Where it is the only one, --resume has nothing left to take: the run starts anew.
std::string advice_for_damaged(const fs::path& ckpt) {
  fs::path earlier;
  for (const auto& [step, dir] : checkpoints(ckpt.parent_path())) {
    if (dir != ckpt) earlier = dir;  // in step order: the last one before it
  }
  if (earlier.empty()) return "remove " + ckpt.string() + " and run again without --resume (it is the only checkpoint)";
  return "remove " + ckpt.string() + " to resume from an earlier checkpoint, " + earlier.filename().string();
}

// A save's failure in words: std::filesystem's (a directory it could not make, a file it could not move) as a
// write's, where error_message() words them as a read's, with advice about read permission.
std::string save_error(const std::exception& e) {
  const auto* fs_error = dynamic_cast<const fs::filesystem_error*>(&e);
  if (fs_error == nullptr || fs_error->path1().empty()) return error_message(e);
  return (fs_error->path2().empty()
              ? "cannot write " + fs_error->path1().string()
              : "cannot move " + fs_error->path1().string() + " to " + fs_error->path2().string()) +
         ": " + fs_error->code().message();
}

// Rewrites the log keeping only entries up to `step` (a resumed run redoes what followed).
void truncate_log(const fs::path& log, int64_t step) {
  if (!fs::exists(log)) return;
  std::vector<std::string> kept;
  {
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("step", int64_t{0}) <= step) kept.push_back(line);
    }
  }
  // Beside it, then renamed over it: rewritten in place, a run stopped here (a full disk, a kill) lost the
  // record of every update before the checkpoint.
  std::string text;
  for (const auto& l : kept) text += l + "\n";
  try {
    write_file_atomically(log, text);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(e.what()) + "; " + log.string() + " is as it was");
  }
}

class Run {
 public:
  Run(const TrainOptions& o, std::ostream& console) : o_(o), console_(console) {}

  TrainResult go() {
    validate(o_);
    check_out_can_be_made(o_.out_dir);
    refuse_earlier_checkpoints();
    if (std::error_code ec; fs::equivalent(o_.out_dir, o_.model_dir, ec)) {
      throw std::invalid_argument("--out " + o_.out_dir.string() +
                                  " is MODEL_DIR: the trained model would replace the one it starts from; choose "
                                  "another --out");
    }
    if (const auto weights = model_weights_in(o_.out_dir); !o_.resume && !weights.empty()) {
      // Not this run's (it has no checkpoints there): the trained model would replace it, and files the
      // save does not write (a README.md model card) would be left describing a different model.
      throw std::invalid_argument("--out " + o_.out_dir.string() + " holds a model (config.json, " + weights +
                                  ") and no checkpoints of a run to resume: training would replace it; choose "
                                  "another --out, or remove that model first");
    }
    // Before its checkpoints are read (a --resume takes the newest); after the refusals that leave a directory
    // that is not a run's as it was. An --out made only later is locked once made.
    const bool locked_at_start = fs::is_directory(o_.out_dir);
    if (locked_at_start) out_lock_.take(o_.out_dir, console_);
    // The data first: a bad line was named only once the model (and a resumed run's optimizer) had loaded.
    // Reading the data and the model takes minutes on a large split or model: a stop requested meanwhile
    // (Ctrl-C) ends the run before its first update, with nothing written. It ran one update and saved
    // checkpoint-1, and a new run into that --out was then refused for holding an earlier run's checkpoints.
    read_data();
    if (stop_requested(o_)) return stopped_before_first_update();
    torch::manual_seed(o_.seed);
    load();
    if (stop_requested(o_)) return stopped_before_first_update();
    prepare_data();
    if (stop_requested(o_)) return stopped_before_first_update();
    // After the model and data have been read: a missing model or data file left an empty --out behind.
    fs::create_directories(o_.out_dir);
    if (!locked_at_start) {
      out_lock_.take(o_.out_dir, console_);
      refuse_earlier_checkpoints();  // of a run that made this --out meanwhile
    }
    remove_unfinished_checkpoints();
    const int64_t warmup = warmup_steps(o_);
    const auto log_path = o_.out_dir / kLogFile;
    truncate_log(log_path, start_step_);
    log_path_ = log_path;
    errno = 0;
    log_.open(log_path, std::ios::app);
    if (!log_) throw log_failure();

    TrainResult result;
    const auto started = Clock::now();
    auto interval_start = started;
    double interval_nll = 0.0, interval_norm = 0.0;
    int64_t interval_tokens = 0, interval_updates = 0, interval_applied = 0, interval_skipped = 0;
    for (int64_t step = start_step_; step < o_.steps; ++step) {
      const double lr = linear_schedule(o_.lr, step, warmup, o_.steps);
      int64_t group_tokens = 0;
      std::vector<std::vector<size_t>> group;  // copies: the plan changes when the group spans epochs
      for (int64_t a = 0; a < o_.grad_accum; ++a) {
        group.push_back(micro_batch(step * o_.grad_accum + a));
        for (const auto r : group.back()) group_tokens += static_cast<int64_t>(train_[r].labels.size());
      }
      for (size_t a = 0; a < group.size(); ++a) {
        const auto& rows = group[a];
        torch::manual_seed(dropout_seed(o_.seed, step * o_.grad_accum + static_cast<int64_t>(a)));
        const auto t = batch_loss(*model_, train_, rows, o_, classes_, &mode_);
        (t.loss_sum * (scaler_.scale() / static_cast<double>(group_tokens))).backward();
        interval_nll += t.nll_sum;
        interval_tokens += t.tokens;
      }
      for (auto& p : frozen_) p.mutable_grad() = torch::Tensor();  // AdamW and the clipping norm skip it
      if (scaler_.enabled()) unscale_gradients();
      const double norm = clip_grad_norm(params_, o_.clip_norm > 0 ? o_.clip_norm : 1e30);
      // Without loss scaling a non-finite gradient is no overflow to skip: the loss or the weights are
      // NaN or infinite already.
      if (!scaler_.enabled() && !std::isfinite(norm))
        diverged(step + 1, "the gradient norm is " + std::to_string(norm));
      if (scaler_.update(std::isfinite(norm))) {
        optimizer_->step(lr);
        interval_norm += norm;
        ++interval_applied;
      } else {
        ++skipped_;
        ++interval_skipped;
      }
      optimizer_->zero_grad();
      ++interval_updates;
      ++result.updates;
      result.tokens += group_tokens;

      const int64_t done = step + 1;
      const bool last = done == o_.steps;
      bool signalled = stop_requested(o_);
      bool stopping = !last && (done == o_.stop_after || signalled);
      // Logs the updates since the last line. A stop logs them too: no line of this run or the resumed one had
      // them.
      const auto log_interval = [&] {
        const auto now = Clock::now();
        const double secs = std::chrono::duration<double>(now - interval_start).count();
        const double elapsed = elapsed_before_ + std::chrono::duration<double>(now - started).count();
        result.last_loss = interval_nll / static_cast<double>(std::max<int64_t>(interval_tokens, 1));
        const double tps = static_cast<double>(interval_tokens) / std::max(secs, 1e-9);
        const double eta = static_cast<double>(o_.steps - done) * secs / static_cast<double>(interval_updates);
        nlohmann::json entry = {
            {"step", done},
            {"epoch", static_cast<double>(done * o_.grad_accum) / static_cast<double>(batches_per_epoch_)},
            {"loss", result.last_loss},
            {"lr", lr},
            {"grad_norm", interval_norm / static_cast<double>(std::max<int64_t>(interval_applied, 1))},
            {"tokens", interval_tokens},
            {"tokens_per_second", tps},
            {"elapsed_seconds", elapsed}};
        if (scaler_.enabled()) {
          entry["loss_scale"] = scaler_.scale();
          entry["skipped_updates"] = interval_skipped;
        }
        write_log(entry);
        progress(done, result.last_loss, lr, tps, eta);
        interval_start = now;
        interval_nll = interval_norm = 0.0;
        interval_tokens = interval_updates = interval_applied = interval_skipped = 0;
      };
      if (done % o_.log_every == 0 || last || stopping) log_interval();
      const auto paused = Clock::now();
      if (!validation_.empty() && (last || (o_.eval_every > 0 && done % o_.eval_every == 0))) {
        try {
          // A stop requested during the update skips it, one requested during it ends it between two batches:
          // the stop's checkpoint came only after a whole validation, past a preempted job's grace period.
          if (signalled) throw ValidationStopped{};
          run_validation(done, last, result);
        } catch (const ValidationStopped&) {
          end_line();
          console_ << "step " << done << ": validation skipped (a stop signal)" << std::endl;
          if (!signalled && !last) {
            interval_start += Clock::now() - paused;  // tokens/s leave the validation out
            if (interval_updates > 0) log_interval();
          }
          signalled = true;
          stopping = !last;
        }
      }
      if (last || stopping || (o_.save_every > 0 && done % o_.save_every == 0)) {
        save_checkpoint(done, elapsed_before_ + std::chrono::duration<double>(Clock::now() - started).count());
      }
      // tokens/s and the ETA measure updates: the interval this falls in counted the validation's and the
      // checkpoint's time, and after each one reported a fraction of the throughput.
      interval_start += Clock::now() - paused;
      if (stopping) {
        end_line();
        console_ << "stopped after update " << done << " of " << o_.steps
                 << (signalled ? " (a stop signal)" : " (--stop-after)") << "; continue with --resume" << std::endl;
        result.stopped_by_signal = signalled;
        result.steps = done;
        result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
        result.skipped_updates = skipped_;
        return result;
      }
    }
    end_line();
    check_weights_finite(o_.steps);
    save_final_model();
    result.steps = o_.steps;
    result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    result.skipped_updates = skipped_;
    console_ << "wrote the trained model to " << o_.out_dir.string() << " (log: " << log_path.string() << ")"
             << std::endl;
    return result;
  }

 private:
  TrainResult stopped_before_first_update() {
    end_line();
    console_ << "stopped before the first update (a stop signal): nothing was trained or written"
             << (o_.resume ? "; " + o_.out_dir.string() + " is as it was, continue with --resume" : std::string())
             << std::endl;
    TrainResult result;
    result.stopped_by_signal = true;
    result.steps = start_step_;
    result.skipped_updates = skipped_;
    return result;
  }

  void load() {
    load_dir_ = o_.model_dir;
    if (o_.resume) {
      const auto ckpt = latest_checkpoint(o_.out_dir);
      if (ckpt.empty()) {
        throw std::invalid_argument("--resume: no checkpoint-N directory with " + std::string(kStateFile) + " in " +
                                    o_.out_dir.string());
      }
      nlohmann::json saved;
      try {
        nlohmann::json state;
        std::ifstream(ckpt / kStateFile) >> state;
        saved = state.at("options");
        if (!saved.is_object()) throw std::invalid_argument("\"options\" is not an object");
        start_step_ = state.at("step").get<int64_t>();
        elapsed_before_ = state.value("elapsed_seconds", 0.0);
        skipped_ = state.value("skipped_updates", int64_t{0});
        saved_scale_ = state.value("loss_scale", LossScaler::kInitialScale);
        saved_good_updates_ = state.value("loss_scale_good_updates", int64_t{0});
        saved_train_data_ = state.value("train_data", nlohmann::json());
      } catch (const std::exception& e) {
        // nlohmann's own words name neither the file nor what to do.
        throw std::runtime_error((ckpt / kStateFile).string() + " is damaged (" + e.what() + "); " +
                                 advice_for_damaged(ckpt));
      }
      if (start_step_ > o_.steps) {
        throw std::invalid_argument("the newest checkpoint, " + ckpt.string() + ", is at update " +
                                    std::to_string(start_step_) + ", past --steps " + std::to_string(o_.steps) +
                                    "; pass --steps " + std::to_string(start_step_) + " or more to finish that run");
      }
      // The stop is tested as the run passes it: one already behind would go unseen, and the run go on to
      // --steps.
      if (o_.stop_after > 0 && o_.stop_after <= start_step_) {
        throw std::invalid_argument("--stop-after " + std::to_string(o_.stop_after) + " is not after the step " +
                                    ckpt.string() + " resumes from (" + std::to_string(start_step_) +
                                    "); give a later one, or leave it out to run to --steps");
      }
      // The same file by another name (a checkpoint's relative path, `./`) is no difference.
      const auto same_file = [](const nlohmann::json& a, const nlohmann::json& b) {
        std::error_code ec;
        return a.is_string() && b.is_string() && fs::equivalent(a.get<std::string>(), b.get<std::string>(), ec);
      };
      // Checkpoints written before the warm-up taken was recorded hold -1 for the default.
      if (const auto w = saved.find("warmup_steps");
          w != saved.end() && *w == -1 && saved.contains("steps") && saved["steps"].is_number_integer()) {
        *w = saved["steps"].get<int64_t>() / 20;
      }
      const auto now = options_json(o_);  // items() refers to it: not a temporary
      for (const auto& [key, value] : now.items()) {
        if (!saved.contains(key) || saved[key] == value || same_file(saved[key], value)) continue;
        // The training data's count and fingerprint are compared instead (prepare_data): a copy elsewhere
        // trains alike, and an edit in place would pass a comparison of paths.
        if (key == "train_file" && saved_train_data_.is_object()) continue;
        if (key == "threads" && o_.device.rfind("cpu", 0) != 0) continue;  // a CUDA run's sums are the device's
        if (key == "model_dir") {
          console_ << "note: MODEL_DIR " << value.dump() << " is not read: the run resumes from " << ckpt.string()
                   << " (it started from " << saved[key].dump() << ")" << std::endl;
          continue;
        }
        // Named by the flag the user gives, with the value that repeats the checkpoint's run: the keys of
        // trainer_state.json (batch_size, eps, train_limit) are no flag's names.
        const std::string flag = flag_of(key);
        const std::string was = shown(saved[key]);
        console_ << "warning: " << flag << " was " << was << " when the checkpoint was written, now " << shown(value)
                 << ": the resumed run will differ from an uninterrupted one"
                 << (key == "threads" ? " in its rounding" : "") << " ("
                 << (key == "train_file" ? "train on " + was
                     : was == "none"     ? "leave " + flag + " out"
                                         : "pass " + flag + " " + was)
                 << " to repeat it exactly)" << std::endl;
      }
      load_dir_ = ckpt;
    }
    LoadOptions lo;
    lo.pack_projections = false;  // the optimizer updates the weights in place; a packed copy would go stale
    try {
      lo.device = torch::Device(o_.device);
    } catch (const std::exception&) {
      throw std::invalid_argument("device must be cpu or cuda[:N], got '" + o_.device + "'");
    }
    check_device_available(lo.device);
    mode_.mixed = parse_autocast(o_.autocast);
    if (mode_.mixed) {
      const auto why = autocast_unsupported_reason(lo.device.type(), *mode_.mixed);
      if (!why.empty()) throw std::invalid_argument("--autocast " + o_.autocast + ": " + why + "; use bf16 or off");
    }
    scaler_ = LossScaler(mode_.mixed == c10::ScalarType::Half, saved_scale_, saved_good_updates_);
    model_ = from_checkpoint([&] { return load_model(load_dir_, lo); });
    // A target of n tokens is read at decoder positions 0 .. n - 1 (BART's are learned: so many of them).
    if (const int64_t positions = decoder_positions(model_->config());
        positions > 0 && o_.max_target_tokens > positions) {
      throw std::invalid_argument("--max-target-tokens " + std::to_string(o_.max_target_tokens) +
                                  " is more than this model's " + std::to_string(positions) +
                                  " decoder positions (max_position_embeddings); set it to at most " +
                                  std::to_string(positions));
    }
    if (const int64_t cut = input_tokens_for(model_->config(), o_); cut < o_.max_input_tokens) {
      console_ << "note: --max-input-tokens " << o_.max_input_tokens << " is more than this model's " << cut
               << " encoder positions (max_position_embeddings): documents are cut to " << cut << " tokens"
               << std::endl;
    }
    mode_.dropout = o_.dropout ? DropoutRates{*o_.dropout, *o_.dropout, *o_.dropout} : model_->config().dropout;
    console_ << "dropout: hidden " << mode_.dropout.hidden << ", attention " << mode_.dropout.attention
             << ", activation " << mode_.dropout.activation << (o_.dropout ? " (--dropout)" : " (the model's config)")
             << (mode_.mixed ? "; autocast " + o_.autocast : std::string()) << std::endl;
    tokenizer_ = from_checkpoint([&] { return load_tokenizer(load_dir_); });
    classes_ = std::min(tokenizer_->vocab_size(), model_->config().vocab_size);
    for (const auto& [name, p] : model_->named_parameters()) {
      if (!p.is_floating_point()) continue;
      p.requires_grad_(true);  // the loader's tensors are leaves made without grad
      params_.emplace_back(name, p);
      // Kept in the optimizer (its state file keeps the layout of checkpoints that trained it), never updated.
      if (is_frozen(name)) frozen_.push_back(p);
    }
    optimizer_ = std::make_unique<AdamW>(params_, o_.adam);
    if (o_.resume) {
      from_checkpoint([&] {
        optimizer_->load(load_dir_ / kOptimizerFile);
        // Updates skipped for overflowing fp16 gradients did not step the optimizer.
        if (optimizer_->steps() + skipped_ != start_step_) {
          throw std::runtime_error((load_dir_ / kOptimizerFile).string() + " is at step " +
                                   std::to_string(optimizer_->steps()) + " but " + kStateFile + " says " +
                                   std::to_string(start_step_) + " with " + std::to_string(skipped_) +
                                   " skipped updates");
        }
      });
      console_ << "resuming from " << load_dir_.string() << " at step " << start_step_ << std::endl;
    }
    files_from_ = load_dir_;
  }

  // Runs `read` on the files of the checkpoint a resumed run loads (its weights, config, tokenizer, optimizer
  // state); a file it cannot read (missing, cut short or damaged: a checkpoint copied back in part, or edited)
  // is named with the checkpoint and what to do, as a damaged trainer_state.json is. It named the file alone,
  // and the user had to work out that the checkpoint was to blame and that an earlier one could resume.
  // LibTorch's errors (out of memory) and std::bad_alloc are not the checkpoint's fault: they pass unchanged.
  template <typename Read>
  auto from_checkpoint(const Read& read) -> decltype(read()) {
    if (!o_.resume) return read();
    const auto damaged = [&](const std::exception& e) {
      return std::runtime_error("cannot resume from " + load_dir_.string() + ": " + error_message(e) + "; " +
                                advice_for_damaged(load_dir_));
    };
    try {
      return read();
    } catch (const std::runtime_error& e) {
      throw damaged(e);
    } catch (const std::invalid_argument& e) {  // a config.json the loader refuses
      throw damaged(e);
    }
  }

  void read_data() {
    train_raw_ = data::read_examples(o_.train_file.string(), o_.train_limit);
    if (!o_.validation_file.empty()) {
      validation_raw_ = data::read_examples(
          o_.validation_file.string(), o_.eval_examples > 0 ? std::optional<int64_t>(o_.eval_examples) : std::nullopt);
    }
  }

  void prepare_data() {
    const auto train_raw = std::move(train_raw_);  // tokenized below; not needed after
    train_data_ = {{"examples", train_raw.size()}, {"fingerprint", fingerprint(train_raw)}};
    // The same path with other lines (a rebuilt or edited split) gives other batches: the options'
    // comparison could not see it.
    if (saved_train_data_.is_object() && saved_train_data_ != train_data_) {
      console_ << "warning: the training data (" << o_.train_file.string() << ": " << train_data_["examples"]
               << " examples, fingerprint " << train_data_["fingerprint"].get<std::string>()
               << ") are not those the checkpoint was trained on ("
               << saved_train_data_.value("examples", nlohmann::json()) << " examples, fingerprint "
               << saved_train_data_.value("fingerprint", std::string("?"))
               << "): the resumed run will differ from an uninterrupted one" << std::endl;
    }
    Cuts cuts;
    train_ = tokenize(train_raw, *tokenizer_, model_->config(), o_, &cuts, o_.train_file);
    batches_per_epoch_ = (static_cast<int64_t>(train_.size()) + o_.batch_size - 1) / o_.batch_size;
    int64_t target_tokens = 0, input_tokens = 0;
    for (const auto& e : train_) {
      target_tokens += static_cast<int64_t>(e.labels.size());
      input_tokens += static_cast<int64_t>(e.input.size());
    }
    console_ << "training on " << train_.size() << " examples (" << input_tokens << " input / " << target_tokens
             << " target tokens; " << cuts.documents << " documents truncated to "
             << input_tokens_for(model_->config(), o_) << " tokens, " << cuts.summaries << " summaries to "
             << o_.max_target_tokens << " (--max-target-tokens)), " << batches_per_epoch_ << " batches of "
             << o_.batch_size << " per epoch; " << o_.steps << " updates = " << std::setprecision(3)
             << static_cast<double>(o_.steps * o_.grad_accum) / static_cast<double>(batches_per_epoch_) << " epochs"
             << std::endl;
    if (!o_.validation_file.empty()) {
      Cuts validation_cuts;
      validation_ = tokenize(validation_raw_, *tokenizer_, model_->config(), o_, &validation_cuts, o_.validation_file);
      // `srformer eval` reads documents up to the model's limit, not this run's: its ROUGE differs unless
      // given the same cut.
      const auto cut = input_tokens_for(model_->config(), o_);
      console_ << "validation: " << validation_.size() << " examples of " << o_.validation_file.string()
               << ", documents cut to " << cut << " tokens as in training (`srformer eval --max-input-tokens " << cut
               << "` scores the saved model alike; " << validation_cuts.documents << " were longer), "
               << validation_cuts.summaries << " summaries cut to " << o_.max_target_tokens
               << " tokens for the loss (ROUGE takes them whole)" << std::endl;
    }
  }

  const std::vector<size_t>& micro_batch(int64_t index) {
    const int64_t epoch = index / batches_per_epoch_;
    if (epoch != plan_epoch_) {
      plan_ = epoch_batches(train_, o_.batch_size, o_.seed, epoch);
      plan_epoch_ = epoch;
    }
    return plan_[static_cast<size_t>(index % batches_per_epoch_)];
  }

  // A diverged run stops with an error and saves nothing: a model of NaN weights looked like a finished
  // run (exit 0) until something summarized with it.
  [[noreturn]] void diverged(int64_t update, const std::string& what) const {
    std::ostringstream lr;
    lr << o_.lr;
    throw std::runtime_error("training diverged at update " + std::to_string(update) + ": " + what +
                             "; nothing from it was saved (checkpoints written before it are kept). Lower --lr (" +
                             lr.str() + ") or check the data");
  }

  void check_weights_finite(int64_t update) const {
    torch::NoGradGuard no_grad;
    for (const auto& [name, p] : params_) {
      if (!torch::isfinite(p).all().item<bool>()) diverged(update, "the weights of " + name + " are NaN or infinite");
    }
  }

  void save_checkpoint(int64_t step, double elapsed) {
    check_weights_finite(step);
    const auto dir = o_.out_dir / (kCheckpointPrefix + std::to_string(step));
    const auto tmp = o_.out_dir / (kCheckpointPrefix + std::to_string(step) + ".tmp");
    const auto discard_tmp = [&] {
      std::error_code ec;
      fs::remove_all(tmp, ec);  // a model-sized directory no run would read
    };
    try {
      fs::remove_all(tmp);
      save_model(*model_, tmp, files_from_);
      set_generation_defaults(tmp, o_.max_target_tokens);
      optimizer_->save(tmp / kOptimizerFile);
      nlohmann::json state = {{"step", step},
                              {"elapsed_seconds", elapsed},
                              {"skipped_updates", skipped_},
                              {"options", options_json(o_)},
                              {"train_data", train_data_}};
      if (scaler_.enabled()) {
        state["loss_scale"] = scaler_.scale();
        state["loss_scale_good_updates"] = scaler_.good_updates();
      }
      // Every write is checked (a full disk): an unchecked one left a config.json or trainer_state.json cut
      // short in a checkpoint that was then renamed into place, and rotation removed the good ones before it.
      write_file_atomically(tmp / kStateFile, state.dump(2) + "\n");
      // On the disk before the rename (the copied tokenizer files too), so that a crash or power loss after
      // it cannot leave a checkpoint-N of empty files.
      for (const auto& entry : fs::directory_iterator(tmp)) sync_path(entry.path());
      sync_path(tmp);
      // Into place, a checkpoint complete or absent (over a directory of its name without trainer_state.json).
      // A move that failed (an --out made read-only meanwhile) left the .tmp directory, and named a path alone.
      std::error_code ec;
      if (fs::remove_all(dir, ec); !ec) fs::rename(tmp, dir, ec);
      if (ec) throw std::runtime_error("cannot move " + tmp.string() + " to " + dir.string() + ": " + ec.message());
    } catch (const std::runtime_error& e) {  // a failed write (a full disk): what is kept, too
      discard_tmp();
      throw std::runtime_error(save_error(e) + "; " + dir.filename().string() + " was not saved: " + where_to_resume());
    } catch (...) {
      discard_tmp();
      throw;
    }
    sync_path(o_.out_dir);  // the rename itself, before rotation removes the checkpoints before it
    // The newest checkpoint is never rotated away: later saves take their tokenizer files from it, not
    // from the directory loaded, which rotation removes once a resumed run has saved --keep more.
    files_from_ = dir;
    auto all = checkpoints(o_.out_dir);
    while (static_cast<int64_t>(all.size()) > o_.keep_checkpoints) {
      // One that cannot be removed (a file another machine holds open on NFS, another user's) is left, named:
      // the error ended the run after every save, though the new checkpoint was whole. A later save tries again.
      if (std::error_code ec; fs::remove_all(all.front().second, ec) == static_cast<std::uintmax_t>(-1)) {
        end_line();
        console_ << "warning: could not remove " << all.front().second.string() << " (the oldest of more than --keep "
                 << o_.keep_checkpoints << " checkpoints): " << ec.message()
                 << "; the run goes on, and a later save tries again" << std::endl;
      }
      all.erase(all.begin());
    }
  }

  // The trained model into --out whole: written and given its generation defaults in a directory beside
  // (synced, as a checkpoint), then moved in with config.json last, an earlier one removed first, so that
  // --out holds a config.json only with the weights and tokenizer it goes with. Saved in place, config.json
  // was written before the tokenizer's files and given the trained length after them: a run killed in
  // between (or a failed write) left a model directory without a tokenizer, or with the starting model's
  // expected length.
  void save_final_model() {
    const auto staged = o_.out_dir / kStagedModel;
    const auto discard_staged = [&] {
      std::error_code ec;
      fs::remove_all(staged, ec);  // a model-sized directory no run would read
    };
    fs::remove_all(staged);  // an earlier run's, killed while saving
    try {
      save_model(*model_, staged, files_from_);
      set_generation_defaults(staged, o_.max_target_tokens);
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(staged)) {
        sync_path(entry.path());
        if (entry.path().filename() != "config.json") files.push_back(entry.path().filename());
      }
      sync_path(staged);
      fs::remove(o_.out_dir / "config.json");
      sync_path(o_.out_dir);
      for (const auto& f : files) fs::rename(staged / f, o_.out_dir / f);
      // An earlier model's files that this one lacks, as save_model removes them.
      remove_other_weight_files(o_.out_dir);
      for (const auto& f : model_side_files()) {
        if (std::find(files.begin(), files.end(), fs::path(f)) == files.end()) fs::remove(o_.out_dir / f);
      }
      fs::rename(staged / "config.json", o_.out_dir / "config.json");
      sync_path(o_.out_dir);
    } catch (const std::runtime_error& e) {
      discard_staged();
      // It named the file alone, as if the whole run were lost: the last checkpoint holds the model.
      throw std::runtime_error(save_error(e) + "; the trained model was not written to " + o_.out_dir.string() +
                               ", but " + latest_checkpoint(o_.out_dir).string() +
                               " holds it: run again with --resume once it can be written, which writes it "
                               "without training");
    } catch (...) {
      discard_staged();
      throw;
    }
    std::error_code ec;
    fs::remove(staged, ec);  // emptied by the moves
  }

  // Validates the model after update `done`, logs and prints the figures (the result's for the `last`
  // update). Throws ValidationStopped when a stop is requested meanwhile.
  void run_validation(int64_t done, bool last, TrainResult& result) {
    const auto v = validate_model(*model_, *tokenizer_, validation_raw_, validation_, o_, classes_);
    nlohmann::json entry = {{"step", done},
                            {"validation_loss", v.loss},
                            {"validation_seconds", v.seconds},
                            {"validation_max_input_tokens", input_tokens_for(model_->config(), o_)}};
    for (const auto t : eval::kRougeTypes) entry[eval::rouge_type_name(t)] = 100 * (*v.rouge)[t].fmeasure;
    write_log(entry);
    end_line();
    console_ << "step " << done << ": validation loss " << std::fixed << std::setprecision(4) << v.loss
             << ", ROUGE-1/2/L " << std::setprecision(2) << entry["rouge1"].get<double>() << "/"
             << entry["rouge2"].get<double>() << "/" << entry["rougeL"].get<double>() << " on " << validation_.size()
             << " examples, documents cut to " << entry["validation_max_input_tokens"] << " tokens ("
             << std::setprecision(1) << v.seconds << " s)" << std::endl;
    if (last) {
      result.validation_loss = v.loss;
      result.rouge1 = entry["rouge1"].get<double>();
      result.rouge2 = entry["rouge2"].get<double>();
      result.rougeL = entry["rougeL"].get<double>();
      result.rougeLsum = entry["rougeLsum"].get<double>();
    }
  }

  void refuse_earlier_checkpoints() const {
    if (const auto earlier = checkpoints(o_.out_dir); !o_.resume && !earlier.empty()) {
      // A new run would interleave its checkpoints and log with the earlier run's, and --resume would
      // then pick whichever step is highest.
      throw std::invalid_argument(o_.out_dir.string() + " holds an earlier run's checkpoints (" +
                                  earlier.back().second.filename().string() +
                                  "); pass --resume to continue it, or choose another --out");
    }
  }

  // A checkpoint-N.tmp is what a run killed while saving checkpoint N left (a second Ctrl-C, SIGKILL, a power
  // loss): model-sized, never read, and removed by a later save at that same N only, which a resumed run
  // with another --stop-after or --save-every never makes.
  void remove_unfinished_checkpoints() {
    std::vector<fs::path> unfinished;
    for (const auto& entry : fs::directory_iterator(o_.out_dir)) {
      if (is_checkpoint_name(entry.path().filename().string(), ".tmp")) unfinished.push_back(entry.path());
    }
    for (const auto& dir : unfinished) {
      fs::remove_all(dir);
      console_ << "note: removed " << dir.string() << ", a checkpoint an earlier run did not finish saving"
               << std::endl;
    }
  }

  // Loss scaling: the gradients of the scaled loss back to their true size (inf/NaN stay so).
  void unscale_gradients() {
    torch::NoGradGuard no_grad;
    const double inverse = 1.0 / scaler_.scale();
    for (const auto& [name, p] : params_) {
      if (p.grad().defined()) p.mutable_grad().mul_(inverse);
    }
  }

  // Checked: a line that could not be written (a full disk) left the stream failed, and every line after it
  // was dropped without a word while the run went on to exit 0 with its log cut. The run stops, resumable
  // from its last checkpoint (a resume drops a line cut short).
  void write_log(const nlohmann::json& entry) {
    errno = 0;
    log_ << entry.dump() << "\n";
    log_.flush();
    if (!log_) throw std::runtime_error(std::string(log_failure().what()) + "; " + where_to_resume());
  }

  // What a run ended by a failed write (a full disk, an --out that can no longer be written) leaves to continue
  // from: its error named the file alone, and the user could not tell what was lost or where to go on from.
  std::string where_to_resume() const {
    const auto all = checkpoints(o_.out_dir);
    if (all.empty()) {
      return "this run has no checkpoint to resume from; run it again once " + o_.out_dir.string() +
             " can be written (--save-every N keeps checkpoints along the way)";
    }
    return "the newest checkpoint is " + all.back().second.string() + " (update " + std::to_string(all.back().first) +
           "); continue from it with --resume once " + o_.out_dir.string() + " can be written";
  }

  std::runtime_error log_failure() const {
    const int error = errno;
    return std::runtime_error("cannot write " + log_path_.string() + ": " +
                              (error != 0 ? std::strerror(error) : "the write failed"));
  }

  void progress(int64_t done, double loss, double lr, double tps, double eta) {
    std::ostringstream line;
    const int width = 24;
    const auto filled = static_cast<int>(width * done / o_.steps);
    line << "step " << done << "/" << o_.steps << " [" << std::string(static_cast<size_t>(filled), '=')
         << std::string(static_cast<size_t>(width - filled), ' ') << "] loss " << std::fixed << std::setprecision(4)
         << loss << " lr " << std::scientific << std::setprecision(2) << lr << std::fixed << std::setprecision(0) << " "
         << tps << " tok/s ETA " << format_duration(eta);
    if (o_.progress_bar) {
      console_ << "\r" << line.str() << "   " << std::flush;
      bar_open_ = true;
    } else {
      console_ << line.str() << std::endl;
    }
  }

  void end_line() {
    if (bar_open_) console_ << std::endl;
    bar_open_ = false;
  }

  OutLock out_lock_;  // first: released last, once everything else this run wrote is closed
  const TrainOptions& o_;
  std::ostream& console_;
  fs::path load_dir_;
  fs::path files_from_;  // whose tokenizer and config files go beside saved weights (save_model)
  std::unique_ptr<Seq2SeqModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Params params_;
  std::vector<torch::Tensor> frozen_;  // of params_, those training leaves as they are (is_frozen)
  std::unique_ptr<AdamW> optimizer_;
  int64_t classes_ = 0, start_step_ = 0, batches_per_epoch_ = 1, plan_epoch_ = -1;
  double elapsed_before_ = 0.0;
  TrainingMode mode_;
  LossScaler scaler_{false};
  int64_t skipped_ = 0, saved_good_updates_ = 0;
  double saved_scale_ = LossScaler::kInitialScale;
  nlohmann::json train_data_, saved_train_data_;  // {"examples", "fingerprint"}: this run's, the checkpoint's
  std::vector<TokenizedExample> train_, validation_;
  std::vector<data::Example> train_raw_, validation_raw_;
  std::vector<std::vector<size_t>> plan_;
  fs::path log_path_;
  std::ofstream log_;
  bool bar_open_ = false;
};

}  // namespace

double validation_loss(Seq2SeqModel& model, const Tokenizer& tokenizer, const std::vector<data::Example>& examples,
                       const TrainOptions& options) {
  const auto set = tokenize(examples, tokenizer, model.config(), options, nullptr);
  return mean_loss(model, set, options, std::min(tokenizer.vocab_size(), model.config().vocab_size));
}

fs::path latest_checkpoint(const fs::path& out_dir) {
  const auto all = checkpoints(out_dir);
  return all.empty() ? fs::path() : all.back().second;
}

TrainResult train(const TrainOptions& options, std::ostream& console) { return Run(options, console).go(); }

}  // namespace srformer::train
