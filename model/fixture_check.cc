#include "model/fixture_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/dtype_name.h"
#include "model/generation/generate.h"
#include "model/io/json_file.h"
#include "model/io/safetensors.h"
#include "model/seq2seq.h"

namespace srformer {

namespace {

struct Comparison {
  double max_abs = 0;
  double worst_excess = 0;
};

Comparison compare(const torch::Tensor& actual, const torch::Tensor& expected, double atol, double rtol,
                   const torch::Tensor& where = {}) {
  auto diff = (actual.to(torch::kCPU, torch::kFloat64) - expected.to(torch::kFloat64)).abs();
  auto excess = diff - (atol + rtol * expected.to(torch::kFloat64).abs());
  if (where.defined()) {
    diff = diff.masked_select(where);
    excess = excess.masked_select(where);
  }
  if (diff.numel() == 0) return {};
  return {diff.max().item<double>(), excess.max().item<double>()};
}

// A fixture that does not hold what its format says: which file, and what is wrong.
class FixtureFormatError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

std::string shape_string(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

// `name` from `file` must have `sizes` (-1: any size in that dimension).
void expect_shape(const torch::Tensor& t, const std::vector<int64_t>& sizes, const std::string& file,
                  const char* name) {
  bool ok = t.dim() == static_cast<int64_t>(sizes.size());
  for (size_t d = 0; ok && d < sizes.size(); ++d) ok = sizes[d] < 0 || t.size(static_cast<int64_t>(d)) == sizes[d];
  if (!ok) {
    std::string want = "[";
    for (size_t d = 0; d < sizes.size(); ++d) {
      want += (d ? ", " : "") + (sizes[d] < 0 ? std::string("*") : std::to_string(sizes[d]));
    }
    throw FixtureFormatError(file + ": '" + name + "' has shape " + shape_string(t) + ", expected " + want + "]");
  }
}

// ids [B][len] from JSON, each starting with decoder_start; compare to our new tokens padded with pad.
bool ids_match(const nlohmann::json& expected, const std::vector<std::vector<int64_t>>& ours, int64_t start,
               int64_t pad, std::string& detail, const char* what) {
  if (!expected.is_array() || expected.size() != ours.size()) {
    throw FixtureFormatError(
        std::string("case.json: ") + what + ".ids must list " + std::to_string(ours.size()) +
        " rows (one per input), it has " +
        (expected.is_array() ? std::to_string(expected.size()) : std::string(expected.type_name())));
  }
  bool ok = true;
  for (size_t b = 0; b < ours.size(); ++b) {
    std::vector<int64_t> row{start};
    row.insert(row.end(), ours[b].begin(), ours[b].end());
    const auto want = expected.at(b).get<std::vector<int64_t>>();
    while (row.size() < want.size()) row.push_back(pad);
    if (row.size() > want.size()) {
      ok = false;
      detail += std::string(what) + " row " + std::to_string(b) + " is longer than the reference; ";
    } else if (row != want) {
      ok = false;
      detail += std::string(what) + " row " + std::to_string(b) + " differs; ";
    }
  }
  return ok;
}

GenerationOptions options_from(const nlohmann::json& rec, const ModelConfig& cfg) {
  const auto& s = rec.at("settings");
  GenerationOptions o;
  o.max_new_tokens = rec.at("max_new_tokens").get<int64_t>();
  // int64_t defaults: with `1`, nlohmann reads into int and 2^40 beams came out as 0.
  o.num_beams = s.value("num_beams", int64_t{1});
  o.length_penalty = s.value("length_penalty", 1.0);
  if (const auto it = s.find("early_stopping"); it != s.end() && !it->is_null()) {
    o.early_stopping = early_stopping_from_json(*it, "case.json settings");
  }
  o.min_new_tokens = std::max<int64_t>(0, s.value("min_length", int64_t{0}) - 1);
  o.no_repeat_ngram_size = s.value("no_repeat_ngram_size", int64_t{0});
  o.repetition_penalty = s.value("repetition_penalty", 1.0);
  o.num_return_sequences = s.value("num_return_sequences", int64_t{1});
  return with_model_tokens(o, cfg);
}

}  // namespace

nlohmann::json FixtureReport::to_json() const {
  nlohmann::json j;
  j["fixture"] = fixture;
  j["device"] = device;
  j["dtype"] = dtype;
  j["max_abs_diff_logits"] = max_abs_diff_logits;
  j["max_abs_diff_encoder"] = max_abs_diff_encoder;
  j["greedy_match"] = greedy_match ? nlohmann::json(*greedy_match) : nlohmann::json(nullptr);
  j["beam_match"] = beam_match ? nlohmann::json(*beam_match) : nlohmann::json(nullptr);
  if (max_abs_diff_beam_scores) j["max_abs_diff_beam_scores"] = *max_abs_diff_beam_scores;
  if (greedy_step_logits_ok) j["max_abs_diff_greedy_step_logits"] = max_abs_diff_greedy_step_logits;
  j["atol"] = atol;
  j["rtol"] = rtol;
  j["ok"] = ok;
  if (!detail.empty()) j["detail"] = detail;
  return j;
}

namespace {

FixtureReport replay(const std::filesystem::path& dir, const LoadOptions& load) {
  FixtureReport r;
  r.fixture = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  r.device = load.device.str();
  r.dtype = dtype_name(load.dtype);
  if (!std::filesystem::exists(dir / "case.json")) {
    throw std::runtime_error("no case.json in " + dir.string() + ": not a fixture directory");
  }
  const auto meta = read_json_file<FixtureFormatError>(dir / "case.json", "the fixture's JSON description");
  if (!meta.is_object()) throw FixtureFormatError("case.json: the top level must be a JSON object");
  const double widened = half_precision_tolerance(load.dtype);
  r.atol = std::max(meta.value("atol", 1e-4), widened);
  r.rtol = std::max(meta.value("rtol", 1e-4), widened);
  auto model = load_model(dir / "model", load);
  const bool replay_generation = widened == 0;
  if (!replay_generation) r.detail += "generation not replayed in " + dtype_name(load.dtype) + "; ";
  const auto& cfg = model->config();
  const auto data = SafetensorsFile::open(dir / "case.safetensors");
  const auto input_ids = data.tensor("input_ids");
  const auto mask = data.tensor("attention_mask");
  const auto dec = data.tensor("decoder_input_ids");
  expect_shape(input_ids, {-1, -1}, "case.safetensors", "input_ids");
  const int64_t B = input_ids.size(0);
  expect_shape(mask, {B, input_ids.size(1)}, "case.safetensors", "attention_mask");
  expect_shape(dec, {B, -1}, "case.safetensors", "decoder_input_ids");
  expect_shape(data.tensor("encoder_hidden"), {B, input_ids.size(1), cfg.d_model}, "case.safetensors",
               "encoder_hidden");
  expect_shape(data.tensor("logits"), {B, dec.size(1), cfg.vocab_size}, "case.safetensors", "logits");

  torch::NoGradGuard no_grad;
  const auto enc = model->encode(input_ids, mask);
  const auto real = mask.ne(0).unsqueeze(-1).expand_as(enc.hidden).cpu();
  // In fp16/bf16 the absolute part of the tolerance scales with each tensor's largest reference value.
  const auto atol_for = [&](const torch::Tensor& expected) {
    return widened == 0 ? r.atol : widened * expected.abs().max().item<double>();
  };
  const auto ce =
      compare(enc.hidden, data.tensor("encoder_hidden"), atol_for(data.tensor("encoder_hidden")), r.rtol, real);
  r.max_abs_diff_encoder = ce.max_abs;
  r.worst_excess_encoder = ce.worst_excess;
  const auto logits = model->forward(enc, dec);
  const auto cl = compare(logits, data.tensor("logits"), atol_for(data.tensor("logits")), r.rtol);
  r.max_abs_diff_logits = cl.max_abs;
  r.worst_excess_logits = cl.worst_excess;
  bool ok = ce.worst_excess <= 0 && cl.worst_excess <= 0;
  if (ce.worst_excess > 0) r.detail += "encoder_hidden outside tolerance; ";
  if (cl.worst_excess > 0) r.detail += "logits outside tolerance; ";

  if (replay_generation && meta.contains("generate_greedy") && !meta["generate_greedy"].is_null()) {
    const auto& rec = meta["generate_greedy"];
    const auto opts = options_from(rec, cfg);
    const auto res = generate(*model, input_ids, mask, opts);
    std::vector<std::vector<int64_t>> ours;
    for (const auto& g : res) ours.push_back(g.hypotheses.at(0).tokens);
    r.greedy_match =
        ids_match(rec.at("ids"), ours, cfg.decoder_start_token_id, cfg.pad_token_id, r.detail, "generate_greedy");
    ok = ok && *r.greedy_match;
    // Per-step logits of the cached decoder, while each row is unfinished.
    if (std::filesystem::exists(dir / "generate.safetensors")) {
      const auto gen = SafetensorsFile::open(dir / "generate.safetensors");
      const auto want = gen.tensor("greedy_step_logits");
      const auto ids = gen.tensor("greedy_ids");
      expect_shape(want, {B, -1, cfg.vocab_size}, "generate.safetensors", "greedy_step_logits");
      const int64_t steps = want.size(1);
      if (ids.dim() != 2 || ids.size(0) != B || ids.size(1) < steps) {
        throw FixtureFormatError("generate.safetensors: 'greedy_ids' has shape " + shape_string(ids) + ", expected [" +
                                 std::to_string(B) + ", at least " + std::to_string(steps) +
                                 "] (a column per step of greedy_step_logits)");
      }
      auto state = model->start(enc, torch::full({B}, opts.max_new_tokens, torch::kLong));
      double worst = -1e30;
      for (int64_t s = 0; s < steps; ++s) {
        const auto step_logits = model->step(state, ids.select(1, s));
        for (int64_t b = 0; b < B; ++b) {
          const auto prev = ids[b].narrow(0, 1, s);
          // A row that ended (at any of the EOS ids) is padded from there on, its logits no one's to check.
          bool ended = false;
          for (const int64_t eos : eos_token_ids(opts)) ended = ended || prev.eq(eos).any().item<bool>();
          if (ended) continue;
          const auto c = compare(step_logits[b], want[b][s], r.atol, r.rtol);
          r.max_abs_diff_greedy_step_logits = std::max(r.max_abs_diff_greedy_step_logits, c.max_abs);
          worst = std::max(worst, c.worst_excess);
        }
      }
      r.greedy_step_logits_ok = worst <= 0;
      if (!*r.greedy_step_logits_ok) r.detail += "greedy step logits outside tolerance; ";
      ok = ok && *r.greedy_step_logits_ok;
    }
  }
  if (replay_generation && meta.contains("generate_beam") && !meta["generate_beam"].is_null()) {
    const auto& rec = meta["generate_beam"];
    const auto res = generate(*model, input_ids, mask, options_from(rec, cfg));
    const bool scored = rec.contains("sequences_scores");
    if (scored && (!rec["sequences_scores"].is_array() || rec["sequences_scores"].size() != res.size())) {
      throw FixtureFormatError("case.json: generate_beam.sequences_scores must list " + std::to_string(res.size()) +
                               " numbers (one per input)");
    }
    std::vector<std::vector<int64_t>> ours;
    double worst = 0;
    for (size_t b = 0; b < res.size(); ++b) {
      ours.push_back(res[b].hypotheses.at(0).tokens);
      if (scored) {
        worst = std::max(worst, std::abs(res[b].hypotheses.at(0).score - rec["sequences_scores"].at(b).get<double>()));
      }
    }
    r.beam_match =
        ids_match(rec.at("ids"), ours, cfg.decoder_start_token_id, cfg.pad_token_id, r.detail, "generate_beam");
    ok = ok && *r.beam_match;
    if (scored) {
      r.max_abs_diff_beam_scores = worst;
      if (worst > r.atol + 1e-4) {
        ok = false;
        r.detail += "beam sequences_scores outside tolerance; ";
      }
    }
  }
  r.ok = ok;
  return r;
}

}  // namespace

double half_precision_tolerance(torch::ScalarType dtype) {
  // 16 units in the last place of the 16-bit format (bf16 2^-8, fp16 2^-11): its rounding of every
  // product's output, grown through a tiny model's layers, stays within this (the CPU's bf16 projections
  // reach half of it on t5-srformer); a wrong segment or state is off by far more.
  if (dtype == torch::kBFloat16) return 16.0 / 256;
  if (dtype == torch::kFloat16) return 16.0 / 2048;
  return 0;
}

FixtureReport check_fixture(const std::filesystem::path& dir, const LoadOptions& load) {
  // Errors in the fixture's own files (not the model's) name the file in the fixture directory.
  try {
    return replay(dir, load);
  } catch (const FixtureFormatError& e) {
    throw std::invalid_argument((dir / e.what()).string());
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument((dir / "case.json").string() + ": " + e.what() +
                                " (the format is in shared/fixtures/README.md)");
  }
}

}  // namespace srformer
