// `srformer eval MODEL_DIR DATA.jsonl` / `srformer eval --predictions PRED.jsonl DATA.jsonl`: summarize a
// dataset split (or take existing predictions) and score it with ROUGE-1/2/L/Lsum (model/eval/rouge.h),
// writing every prediction next to the scores.
//
// Generation goes through model/generation generate(), not the server's Engine: generate() drives the
// same Seq2SeqModel encode/start/step code and the same searchers the Engine does (one model step per
// iteration over every live row), without linking the server library (gRPC, Prometheus) into the tool.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/generation_flags_usage.h"
#include "model/cuda_device.h"
#include "model/data/examples.h"
#include "model/dtype_name.h"
#include "model/eval/batch_summarize.h"
#include "model/eval/rouge.h"
#include "model/generation/generate.h"
#include "model/io/atomic_file.h"
#include "model/limits.h"
#include "model/seq2seq.h"
#include "model/tokenizer/tokenizer.h"
#include "model/usable_cpus.h"
#include "tools/arg_reader.h"
#include "tools/device_flag.h"
#include "tools/generation_flags.h"

namespace srformer::tools {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using data::Example;
using data::for_each_jsonl;
using data::id_field;
using data::read_examples;
using data::string_field;

const std::string kUsage =
    std::string(
        "usage: srformer eval MODEL_DIR DATA.jsonl [options]\n"
        "       srformer eval --predictions PRED.jsonl DATA.jsonl [options]\n"
        "  DATA.jsonl: {\"id\", \"document\", \"summary\"} per line; PRED.jsonl: {\"id\", \"prediction\"} per line.\n"
        "  --split-name NAME   label in scores.json (default: DATA's file name without extension; \"pipe\" for\n"
        "                      a pipe such as <(zcat test.jsonl.gz), which needs --out DIR in model mode)\n"
        "  --limit N           score only the first N examples of DATA (PRED's others are left out)\n"
        "  --out DIR           output directory for predictions.jsonl and scores.json; default, next to DATA:\n"
        "                      DATA-stem.MODEL.eval/ (MODEL: MODEL_DIR's name), or PRED-stem.eval/ next to PRED.\n"
        "                      A default directory holding another model's results is refused (pass --out);\n"
        "                      --out DIR replaces what DIR holds, with a note when it was another's\n"
        "  --stem              Porter-stem tokens (rouge-score's use_stemmer)\n"
        "  --bootstrap N       bootstrap resamples for the 95% intervals (default 1000, at most 100000)\n"
        "  --seed N            the bootstrap resampling's seed, 0 to 2^64-1 (default 0): it moves the intervals\n"
        "                      only (generation never samples)\n"
        "  generation (model mode only; defaults from the model's generation_config.json, else config.json,\n"
        "  as in `summarize`, but never sampled: greedy or beam search; the options below as `summarize` and\n"
        "  srformer-client take them):\n"
        "  --batch N (default 8) --no-sample (what eval does anyway, taken as `summarize` takes it)\n") +
    kSearchFlagsUsage +
    "  --max-input-tokens N (truncate documents to N tokens; default: the model's limit, which N may lower;\n"
    "  a T5's n_positions is advisory: N may raise it, a BART's positions it may not)\n"
    "  --threads N (default: OMP_NUM_THREADS, else the CPUs this process may use, after taskset/cpuset and a CPU\n"
    "              quota)\n"
    "  --dtype fp32|fp16|bf16 --device cpu|cuda[:N] (as in `summarize`)\n";

// Generation flags of `summarize` and srformer-client that only act when sampling, or return more than the
// one summary eval scores.
const std::set<std::string> kSamplingFlags = {"--do-sample",      "--temperature", "--top-k",
                                              "--top-p",          "--min-p",       "--typical-p",
                                              "--epsilon-cutoff", "--eta-cutoff",  "--num-return-sequences"};

// More resamples only refine the intervals' third digit; each one costs a pass over every pair.
constexpr int64_t kMaxBootstrap = 100000;

struct Args {
  std::vector<std::string> positional;
  std::string predictions_path, split_name, out_dir;
  std::optional<int64_t> limit, max_input;
  GenerationFlags gen;  // summarize's, but for the sampling flags (refused)
  int64_t batch = 8;
  int threads = 0;
  LoadOptions load;
  bool dtype_given = false;
  bool stem = false;
  int bootstrap = 1000;
  uint64_t seed = 0;
  std::vector<std::string> generation_flags;  // given generation options (an error in predictions mode)
};

// Returns std::nullopt for --help.
std::optional<Args> parse_args(const std::vector<std::string>& args) {
  Args a;
  for (ArgReader r(args); r.next();) {
    const auto& f = r.arg();
    auto gen = [&] { a.generation_flags.push_back(f); };
    if (f == "--help" || f == "-h") {
      std::cout << kUsage;
      return std::nullopt;
    } else if (f == "--predictions") {
      a.predictions_path = r.value();
    } else if (f == "--split-name") {
      a.split_name = r.value();
    } else if (f == "--limit") {
      a.limit = r.int_value(1);
    } else if (f == "--out") {
      a.out_dir = r.value();
    } else if (f == "--stem") {
      a.stem = true;
    } else if (f == "--bootstrap") {
      const auto n = r.int_value(1);
      if (n > kMaxBootstrap) {
        throw std::invalid_argument("--bootstrap " + std::to_string(n) + " is more than the " +
                                    std::to_string(kMaxBootstrap) + " resamples it takes (1000, the default, is " +
                                    "rouge-score's)");
      }
      a.bootstrap = static_cast<int>(n);
    } else if (f == "--seed") {
      a.seed = r.unsigned_value();  // as summarize's and convert's
    } else if (f == "--batch") {
      gen();
      a.batch = r.int_value(1);
    } else if (f == "--max-input-tokens") {
      gen();
      a.max_input = r.int_value(1);
    } else if (f == "--threads") {
      gen();
      a.threads = r.threads_value();
    } else if (f == "--dtype") {
      gen();
      a.load.dtype = float_dtype_from_flag(r.value());
      a.dtype_given = true;
    } else if (f == "--device") {
      gen();
      a.load.device = device_from_flag(r.value());
    } else if (kSamplingFlags.count(f) > 0) {
      // `summarize` and srformer-client take them; here they were "unknown", which said nothing of why.
      throw std::invalid_argument(f + " does not go with eval, which never samples (its scores must not depend " +
                                  "on a seed) and scores one summary per document; srformer summarize and " +
                                  "srformer-client take it");
    } else if (a.gen.read(r)) {
      gen();  // --no-sample among them: what eval does anyway; summarize's command lines may carry it
    } else if (!f.empty() && f[0] == '-') {
      throw unknown_option(f);
    } else {
      a.positional.push_back(f);
    }
  }
  const size_t want = a.predictions_path.empty() ? 2 : 1;
  if (a.positional.size() != want) {
    throw std::invalid_argument(a.predictions_path.empty()
                                    ? "expected MODEL_DIR and DATA.jsonl (or --predictions PRED.jsonl DATA.jsonl)"
                                    : "with --predictions, expected only DATA.jsonl besides the options");
  }
  if (!a.predictions_path.empty() && !a.generation_flags.empty()) {
    throw std::invalid_argument(a.generation_flags.front() +
                                " is a generation option; --predictions scores existing outputs without a model");
  }
  return a;
}

// The predictions of `data`'s examples, in its order; those of the examples past --limit (`past_limit`) are
// left out unsaid: they were counted with ids not in the data, as if the predictions were of another split.
std::vector<std::string> read_predictions(const std::string& path, const std::vector<Example>& data,
                                          const std::vector<std::string>& past_limit) {
  std::map<std::string, std::string> by_id;
  std::map<std::string, std::string> where_of;
  for_each_jsonl(path, [&](const nlohmann::json& j, const std::string& where) {
    auto id = id_field(j, where);
    const auto [it, fresh] = where_of.emplace(id, where);
    if (!fresh) throw std::invalid_argument(where + ": duplicate id '" + id + "' (first at " + it->second + ")");
    by_id[std::move(id)] = string_field(j, "prediction", where);
  });
  std::vector<std::string> out, missing;
  for (const auto& e : data) {
    const auto it = by_id.find(e.id);
    if (it == by_id.end()) {
      missing.push_back(e.id);
      continue;
    }
    out.push_back(it->second);
    by_id.erase(it);
  }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 10; ++i) list += (i ? ", '" : "'") + missing[i] + "'";
    if (missing.size() > 10) list += ", ...";
    throw std::invalid_argument("'" + path + "' has no prediction for " + std::to_string(missing.size()) +
                                " id(s) of the data: " + list);
  }
  for (const auto& id : past_limit) by_id.erase(id);
  if (!by_id.empty()) std::cerr << "note: ignored " << by_id.size() << " prediction(s) whose id is not in the data\n";
  return out;
}

struct GenerationRun {
  std::vector<std::string> predictions;  // in data order
  int64_t input_tokens = 0, generated_tokens = 0, truncated = 0, max_input_tokens = 0;
  double seconds = 0.0;
  nlohmann::json options;
};

GenerationOptions generation_options(const Args& a, const ModelConfig& c, const Tokenizer& tokenizer) {
  const GenerationOptions d = model_generation_defaults(c);  // as `srformer summarize` and the server
  if (const auto warning = unsupported_generation_warning(c); !warning.empty()) {
    std::cerr << "warning: the model: " << warning << "\n";
  }
  if (const auto warning = unusable_generation_defaults(c); !warning.empty()) {
    std::cerr << "warning: the model: " << warning << " (set those options with their flags)\n";
  }
  GenerationFlags flags = a.gen;
  flags.sample = false;  // scores must not depend on a seed: greedy or beams even where the checkpoint samples
  flags.returned = 1;    // one summary scored per document
  return flags.over(d, c, tokenizer);
}

// Generated with --expected-length L, else the model's default (default_expected_length), in data order
// (model/eval/batch_summarize.h).
GenerationRun generate_all(const Args& a, const std::string& model_dir, const std::vector<Example>& data) {
  if (!fs::is_directory(model_dir)) throw std::invalid_argument("model directory '" + model_dir + "' not found");
  at::set_num_threads(a.threads > 0 ? a.threads : offline_intra_op_threads());  // a CPU quota counts
  check_device_available(a.load.device);
  auto load = a.load;
  if (!a.dtype_given) load.dtype = default_dtype_for(model_dir, load.device);
  auto model = load_model(model_dir, load);
  const auto tokenizer = load_tokenizer(model_dir);
  const auto& c = model->config();
  const auto o = generation_options(a, c, *tokenizer);

  GenerationRun run;
  run.max_input_tokens = input_limit_with(c, a.max_input);
  std::vector<std::string> documents, names;  // names: what a document the model cannot read is called
  for (const auto& e : data) {
    documents.push_back(e.document);
    names.push_back(a.positional.back() + ": example '" + e.id + "'");
  }
  const auto started = Clock::now();
  auto last_report = started;
  const auto batches = [&](size_t docs) {
    return (docs + static_cast<size_t>(a.batch) - 1) / static_cast<size_t>(a.batch);
  };
  auto s = eval::summarize_all(
      *model, *tokenizer, documents, o, a.batch, run.max_input_tokens,
      [&](size_t done, size_t total) {
        const auto now = Clock::now();
        if (now - last_report < std::chrono::seconds(1) && done != total) return;
        const double secs = std::chrono::duration<double>(now - started).count();
        std::cerr << "batch " << batches(done) << "/" << batches(total) << ", " << std::fixed << std::setprecision(1)
                  << static_cast<double>(done) / std::max(secs, 1e-9) << " docs/s\n";
        last_report = now;
      },
      a.gen.expected, names);
  if (s.truncated > 0) {
    std::cerr << s.truncated << " of " << data.size() << " documents truncated to " << run.max_input_tokens
              << " tokens\n";
  }
  run.predictions = std::move(s.predictions);
  run.input_tokens = s.input_tokens;
  run.generated_tokens = s.generated_tokens;
  run.truncated = s.truncated;
  run.seconds = s.seconds;
  run.options = {{"batch", a.batch},
                 {"max_new_tokens", o.max_new_tokens},
                 {"min_new_tokens", o.min_new_tokens},
                 {"num_beams", o.num_beams},
                 {"length_penalty", o.length_penalty},
                 {"early_stopping", early_stopping_to_json(o.early_stopping)},
                 {"num_beam_groups", o.num_beam_groups},
                 {"diversity_penalty", o.diversity_penalty},
                 {"no_repeat_ngram_size", o.no_repeat_ngram_size},
                 {"repetition_penalty", o.repetition_penalty},
                 {"encoder_repetition_penalty", o.encoder_repetition_penalty},
                 {"encoder_no_repeat_ngram_size", o.encoder_no_repeat_ngram_size},
                 {"bad_words", a.gen.bad_words},
                 {"expected_length", a.gen.expected.value_or(default_expected_length(c, o.max_new_tokens))},
                 {"max_input_tokens", run.max_input_tokens},
                 {"summarization_prefix", c.summarization_prefix ? nlohmann::json(*c.summarization_prefix) : nullptr},
                 {"threads", at::get_num_threads()}};
  return run;
}

nlohmann::json interval_json(const eval::Interval& i) { return {{"low", i.low}, {"mid", i.mid}, {"high", i.high}}; }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::ostringstream s;
  s << std::put_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  return s.str();
}

// MODEL_DIR's own name ("runA" for runA/, runA/. or ./runA).
std::string model_dir_name(const fs::path& dir) {
  fs::path p = fs::absolute(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const auto name = p.filename().string();
  return name.empty() ? "model" : name;
}

// Whether `path` is a pipe (or a device) rather than a file, whose name labels the split and places the results:
// the name of `<(zcat test.jsonl.gz)` or /dev/stdin says neither. DATA was labelled "63" (/dev/fd/63) and its
// results went to /dev/fd/63.MODEL.eval, which cannot be made, or beside /dev/stdin into /dev.
bool is_a_pipe(const std::string& path) {
  std::error_code ec;
  const auto type = fs::status(path, ec).type();
  return !ec && type != fs::file_type::regular && type != fs::file_type::directory;
}

// Per model, so that evaluating a second model on the same split does not replace the first one's results
// (DATA.eval/ was shared by all); predictions files are their own source already.
fs::path default_out_dir(const Args& a) {
  const bool model_mode = a.predictions_path.empty();
  if (const auto& beside = model_mode ? a.positional.back() : a.predictions_path; is_a_pipe(beside)) {
    throw std::invalid_argument((model_mode ? "DATA '" : "PRED '") + beside +
                                "' is a pipe, not a file: the results have no default place beside it; pass "
                                "--out DIR" +
                                (model_mode ? " (and --split-name NAME to label them)" : ""));
  }
  if (!model_mode) {
    const fs::path pred(a.predictions_path);
    return pred.parent_path() / (pred.stem().string() + ".eval");
  }
  const fs::path data(a.positional.back());
  return data.parent_path() / (data.stem().string() + "." + model_dir_name(a.positional.front()) + ".eval");
}

// Whose results `out` holds when they are not this run's source (another model or predictions file):
// "model X" / "predictions X"; "" when it holds none, this source's, or a scores.json it cannot read.
std::string other_results_in(const fs::path& out, const Args& a) {
  std::ifstream in(out / "scores.json");
  if (!in) return {};
  const auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) return {};
  const bool model_mode = a.predictions_path.empty();
  const char* key = model_mode ? "model" : "predictions";
  const std::string mine = model_mode ? a.positional.front() : a.predictions_path;
  for (const char* k : {"model", "predictions"}) {
    const auto it = j.find(k);
    if (it == j.end() || !it->is_string()) continue;
    const auto theirs = it->get<std::string>();
    std::error_code ec;
    if (std::string(k) == key && (theirs == mine || fs::equivalent(theirs, mine, ec))) return {};
    return std::string(k) + " " + theirs;
  }
  return {};
}

// predictions.jsonl and scores.json, each written to a temporary file beside its name and renamed over it
// (AtomicFile): scores.json last, an earlier one removed first. They were written in place, so that a run
// stopped while writing (killed, a full disk) left a predictions.jsonl cut short, or this run's predictions
// beside the scores of the run before, and either looked complete. Now a directory holds one run's pair, or
// predictions without scores. The predictions go out as they come, not held whole in memory.
class OutputFiles {
 public:
  // Creates `dir` and opens the predictions' temporary file, or says why it cannot.
  explicit OutputFiles(fs::path dir) : dir_(std::move(dir)) {
    std::error_code ec;
    created_ = fs::create_directories(dir_, ec);
    std::string why = ec.message();
    if (!ec) {
      try {
        predictions_.emplace(dir_ / kPredictions);
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    if (!predictions_) {
      remove_created_dir();
      throw std::invalid_argument("cannot write the results to " + dir_.string() + " (" + why +
                                  "); pass --out DIR to write them elsewhere");
    }
  }
  ~OutputFiles() {
    predictions_.reset();  // a run that failed leaves no temporary file (AtomicFile removes its own)
    scores_.reset();
    if (!committed_) remove_created_dir();
  }
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;

  // Appends one line of predictions.jsonl; throws naming the file and the system's reason when it cannot.
  void write_prediction(const std::string& line) {
    pending_ += line;
    pending_ += '\n';
    if (pending_.size() >= kFlushBytes) flush();
  }

  // Writes scores.json's text and puts both files in place.
  void commit(const std::string& scores) {
    flush();
    scores_.emplace(dir_ / kScores);
    scores_->write(scores.data(), scores.size());
    fs::remove(dir_ / kScores);
    predictions_->commit();
    scores_->commit();
    committed_ = true;
  }

 private:
  static constexpr const char* kPredictions = "predictions.jsonl";
  static constexpr const char* kScores = "scores.json";
  static constexpr size_t kFlushBytes = 1 << 20;

  void flush() {
    predictions_->write(pending_.data(), pending_.size());
    pending_.clear();
  }
  void remove_created_dir() {
    std::error_code ec;
    if (created_) fs::remove(dir_, ec);  // when empty
  }

  fs::path dir_;
  std::optional<AtomicFile> predictions_, scores_;
  std::string pending_;
  bool created_ = false, committed_ = false;
};

}  // namespace

int run_eval(const std::vector<std::string>& args) {
  const auto parsed = parse_args(args);
  if (!parsed) return 0;
  const Args& a = *parsed;
  const auto started = Clock::now();
  const std::string data_path = a.positional.back();
  const bool data_piped = is_a_pipe(data_path);  // before it is read
  std::vector<std::string> past_limit;           // ids of the examples after the first --limit
  const auto data = read_examples(data_path, a.limit, &past_limit);
  // Checked before generating: a refusal after an hour of generation would waste it.
  const fs::path out = a.out_dir.empty() ? default_out_dir(a) : fs::path(a.out_dir);
  if (const auto other = other_results_in(out, a); !other.empty()) {
    if (a.out_dir.empty()) {
      throw std::invalid_argument(out.string() + " holds the results of " + other +
                                  "; pass --out DIR to write these elsewhere, or remove " + out.string());
    }
    std::cerr << "note: replacing " << out.string() << "'s results of " << other << "\n";
  }
  // Also before generating: an --out (or a default next to the data) that cannot be written failed only
  // once every summary was made.
  OutputFiles files(out);

  std::optional<GenerationRun> run;
  std::vector<std::string> predictions;
  if (a.predictions_path.empty()) {
    run = generate_all(a, a.positional.front(), data);
    predictions = run->predictions;
  } else {
    predictions = read_predictions(a.predictions_path, data, past_limit);
  }

  std::vector<std::string> references;
  for (const auto& e : data) references.push_back(e.summary);
  const auto corpus = eval::score_corpus(predictions, references, {a.stem}, {a.bootstrap, 0.95, a.seed});

  for (size_t i = 0; i < data.size(); ++i) {
    nlohmann::json j = {{"id", data[i].id},
                        {"document", data[i].document},
                        {"reference", data[i].summary},
                        {"prediction", predictions[i]}};
    for (const auto t : eval::kRougeTypes) j[eval::rouge_type_name(t)] = corpus.per_pair[i][t].fmeasure;
    files.write_prediction(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }

  nlohmann::json scores;
  scores["split"] = !a.split_name.empty() ? a.split_name : data_piped ? "pipe" : fs::path(data_path).stem().string();
  scores["data"] = data_path;
  scores["n"] = data.size();
  if (run) {
    scores["model"] = a.positional.front();
  } else {
    scores["predictions"] = a.predictions_path;
  }
  nlohmann::json options = run ? run->options : nlohmann::json::object();
  options["stem"] = a.stem;
  options["bootstrap"] = a.bootstrap;
  options["confidence"] = 0.95;
  options["seed"] = a.seed;
  if (a.limit) options["limit"] = *a.limit;
  scores["options"] = options;
  for (const auto t : eval::kRougeTypes) {
    const auto& agg = corpus[t];
    scores["rouge"][eval::rouge_type_name(t)] = {
        {"mean_f1", corpus.mean[t].fmeasure},   {"mean_precision", corpus.mean[t].precision},
        {"mean_recall", corpus.mean[t].recall}, {"precision", interval_json(agg.precision)},
        {"recall", interval_json(agg.recall)},  {"fmeasure", interval_json(agg.fmeasure)}};
  }
  if (run) {
    scores["generation"] = {
        {"seconds", run->seconds},
        {"documents_per_second", static_cast<double>(data.size()) / std::max(run->seconds, 1e-9)},
        {"input_tokens", run->input_tokens},
        {"truncated_documents", run->truncated},
        {"generated_tokens", run->generated_tokens},
        {"tokens_per_second", static_cast<double>(run->generated_tokens) / std::max(run->seconds, 1e-9)}};
  }
  scores["created"] = utc_now();
  scores["elapsed_seconds"] = std::chrono::duration<double>(Clock::now() - started).count();
  files.commit(scores.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");

  std::cout << "split " << scores["split"].get<std::string>() << ", n = " << data.size() << (a.stem ? ", stemmed" : "")
            << "\n"
            << "            F1 x100   95% CI (" << a.bootstrap << " resamples)\n"
            << std::fixed << std::setprecision(2);
  static const char* kLabels[] = {"ROUGE-1", "ROUGE-2", "ROUGE-L", "ROUGE-Lsum"};
  for (const auto t : eval::kRougeTypes) {
    const auto& f = corpus[t].fmeasure;
    std::cout << std::left << std::setw(10) << kLabels[static_cast<size_t>(t)] << std::right << std::setw(9)
              << 100 * corpus.mean[t].fmeasure << "   [" << 100 * f.low << ", " << 100 * f.high << "]\n";
  }
  if (run) {
    std::cout << std::setprecision(1) << "generation: " << run->seconds << " s, "
              << scores["generation"]["documents_per_second"].get<double>() << " docs/s, "
              << scores["generation"]["tokens_per_second"].get<double>() << " tokens/s (" << run->generated_tokens
              << " tokens, batch " << a.batch << ", " << run->truncated << " documents truncated)\n";
  }
  std::cout << "wrote " << (out / "predictions.jsonl").string() << " and " << (out / "scores.json").string()
            << std::endl;
  return 0;
}

}  // namespace srformer::tools
