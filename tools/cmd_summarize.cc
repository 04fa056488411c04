// `srformer summarize --model DIR [options] [FILE|-]`: offline summary through the same model,
// tokenizer and generation code the server uses.
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/alternative_line.h"
#include "common/generation_flags_usage.h"
#include "common/read_input.h"
#include "model/cuda_device.h"
#include "model/data/encode.h"
#include "model/dtype_name.h"
#include "model/generation/generate.h"
#include "model/limits.h"
#include "model/seq2seq.h"
#include "model/tokenizer/document_check.h"
#include "model/tokenizer/tokenizer.h"
#include "model/usable_cpus.h"
#include "tools/arg_reader.h"
#include "tools/device_flag.h"
#include "tools/generation_flags.h"

namespace srformer::tools {

namespace {

const std::string kUsage =
    std::string("usage: srformer summarize --model DIR [options] [FILE|-]\n") + kSearchFlagsUsage +
    kSamplingFlagsUsage +
    "  --num-return-sequences N (beams: also the next best hypotheses; sampling with one beam: N samples;\n"
    "  one line each after the summary, or --json's alternatives)\n"
    "  --truncate (cut over-long input instead of failing) --json --stream\n"
    "  --threads N (default: OMP_NUM_THREADS, else the CPUs this process may use, after taskset/cpuset and a CPU\n"
    "              quota)\n"
    "  --max-input-tokens N (lowers the model's input limit; a T5's n_positions is advisory: N may raise it)\n"
    "  --dtype fp32|bf16 (bf16: projections in bfloat16; needs a CPU with AMX or AVX512-BF16)\n"
    "  --device cpu|cuda[:N] (cuda: --dtype fp16, bf16 or fp32; default as the server's: fp16, bf16 for a T5\n"
    "  where the GPU has it)\n"
    "  Defaults come from the model's generation_config.json, else config.json (max_length, num_beams,\n"
    "  do_sample, top_k (else 50), ...), as in the server.\n";

}  // namespace

int run_summarize(const std::vector<std::string>& args) {
  std::string model_dir, input_path;
  bool json = false, stream = false, truncate = false;
  int threads = 0;
  LoadOptions load;
  bool dtype_given = false;
  std::optional<int64_t> max_input;
  GenerationFlags flags;
  uint64_t seed = 0;
  for (ArgReader r(args); r.next();) {
    const auto& a = r.arg();
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--model") {
      model_dir = r.value();
    } else if (a == "--seed") {
      seed = r.unsigned_value();
    } else if (flags.read(r)) {
    } else if (a == "--truncate") {
      truncate = true;
    } else if (a == "--max-input-tokens") {
      max_input = r.int_value(1);
    } else if (a == "--threads") {
      threads = r.threads_value();
    } else if (a == "--dtype") {
      load.dtype = float_dtype_from_flag(r.value());
      dtype_given = true;
    } else if (a == "--device") {
      load.device = device_from_flag(r.value());
    } else if (a == "--json") {
      json = true;
    } else if (a == "--stream") {
      stream = true;
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      throw unknown_option(a);
    } else if (!input_path.empty()) {
      if (model_dir.empty() && std::filesystem::is_directory(input_path)) break;  // the model given first: told below
      throw std::invalid_argument("one document at a time: got '" + input_path + "' and '" + a +
                                  "' (srformer eval summarizes a JSONL file of many)");
    } else {
      input_path = a;
    }
  }
  // inspect, eval and train take the model as their first argument; here it is --model DIR. A directory
  // given so was taken for a second document ("one document at a time").
  if (model_dir.empty() && !input_path.empty() && std::filesystem::is_directory(input_path)) {
    throw std::invalid_argument("'" + input_path + "' is a directory: summarize takes the model as --model " +
                                input_path + " (srformer summarize --model DIR [options] [FILE|-])");
  }
  if (model_dir.empty()) throw std::invalid_argument("--model DIR is required (see --help)");
  at::set_num_threads(threads > 0 ? threads : offline_intra_op_threads());  // a CPU quota counts
  check_device_available(load.device);
  if (!dtype_given) load.dtype = default_dtype_for(model_dir, load.device);
  auto model = load_model(model_dir, load);
  const auto tokenizer = load_tokenizer(model_dir);
  const auto& c = model->config();

  std::string text = read_document(input_path.empty() ? "-" : input_path);
  const std::string source = input_path.empty() || input_path == "-" ? "stdin" : input_path;
  // The server's checks (validate_document), so that both answer the same documents.
  if (const auto fault = find_document_fault(text)) {
    const bool encoding = fault->kind == DocumentFault::Kind::kNotUtf8 || fault->kind == DocumentFault::Kind::kNul;
    throw std::invalid_argument("the document (" + source + ") " + fault->what +
                                (encoding ? "; re-encode it as UTF-8 (iconv -f ENCODING -t UTF-8)" : ""));
  }
  if (c.summarization_prefix) text = *c.summarization_prefix + text;
  auto ids = tokenizer->encode(text);
  const int64_t original = static_cast<int64_t>(ids.size());
  bool truncated = false;
  // The server's rule (effective_max_input_tokens): the model's limit, which --max-input-tokens lowers,
  // or sets outright where the limit is advisory (T5's n_positions).
  const int64_t limit = input_limit_with(c, max_input);
  if (original > limit) {
    if (!truncate) {
      throw std::invalid_argument("the document has " + std::to_string(original) + " tokens, over the limit of " +
                                  std::to_string(limit) + "; pass --truncate to cut it" +
                                  (input_limit_can_be_raised(c) ? " or --max-input-tokens to raise it" : ""));
    }
    truncated = data::truncate_keeping_last(ids, limit);
  }
  // A token past the model's embedding (a tokenizer with more tokens than the model has rows) is named, as
  // the server, eval and train name it: the model said only "input_ids holds token id N outside the
  // vocabulary".
  data::check_in_embedding(ids, *tokenizer, c, "document (" + source + ")");

  const GenerationOptions d = model_generation_defaults(c);
  if (const auto warning = unsupported_generation_warning(c); !warning.empty()) {
    std::cerr << "warning: the model: " << warning << "\n";
  }
  if (const auto warning = unusable_generation_defaults(c); !warning.empty()) {
    std::cerr << "warning: the model: " << warning << " (set those options with their flags)\n";
  }
  GenerationOptions o = flags.over(d, c, *tokenizer);
  o.seed = seed;

  const auto input = torch::tensor(ids, torch::kLong).view({1, -1});
  const auto mask = torch::ones_like(input);
  const int64_t L = flags.expected.value_or(default_expected_length(c, o.max_new_tokens));
  // The encoder segments m and the one each step attends, as the server reports them (usage.segments,
  // TokenDelta.segment: segment_schedule, 0 for full attention).
  const auto k = static_cast<int64_t>(ids.size()), s = c.srformer.segment_size;
  const int64_t m = c.srformer.segmented() && s > 0 ? std::max<int64_t>(1, (k + s - 1) / s) : 1;
  const auto segment_at = [&](int64_t step) { return c.srformer.segmented() ? std::min(step * m / L, m - 1) : 0; };
  IncrementalDetokenizer detok(*tokenizer);
  // With --json the streamed pieces go into the object (as srformer-client's "stream"), so that stdout
  // stays one JSON object.
  nlohmann::json streamed = nlohmann::json::array();
  // Thrown from the token callback where a streamed piece did not reach stdout (a full disk, a closed
  // reader with SIGPIPE ignored): generating the rest, nowhere to go, only kept the CPU busy. main's
  // stdout check then says why, as srformer-client cancels its call.
  struct StdoutFailed {};
  std::vector<GenerateResult> res;
  int64_t generated = 0;
  try {
    res = generate(*model, input, mask, o, torch::full({1}, L, torch::kLong), [&](int64_t, int64_t tok) {
      ++generated;
      if (!stream) return;
      const std::string text = detok.push(tok);
      if (json) {
        // "logprob" once the sequence is known (below): the searchers report the token alone.
        const auto step = static_cast<int64_t>(streamed.size());
        streamed.push_back({{"token_id", tok}, {"text", text}, {"step", step}, {"segment", segment_at(step)}});
      } else {
        std::cout << text << std::flush;
        if (!std::cout) throw StdoutFailed{};
      }
    });
  } catch (const StdoutFailed&) {
    std::cerr << "srformer: summarize stopped after " << generated
              << " generated tokens: its output could not be written\n";
    return 1;
  }
  const auto& hypotheses = res.at(0).hypotheses;
  const auto& best = hypotheses.at(0);
  const auto summary = tokenizer->decode(best.tokens);
  if (stream) {
    const std::string rest = detok.finish();
    if (!json) {
      std::cout << rest << std::endl;
    } else if (!streamed.empty()) {
      streamed.back()["text"] = streamed.back()["text"].get<std::string>() + rest;
    }
    // The streamed tokens are the best hypothesis's (the first sample's), as the server's token deltas.
    for (size_t i = 0; i < streamed.size(); ++i) {
      streamed[i]["logprob"] = i < best.token_logprobs.size() ? best.token_logprobs[i] : 0.0f;
    }
  }
  if (json) {
    // The best hypothesis and the next best alike (as the server's responses and their alternatives).
    const auto hypothesis_json = [](const Hypothesis& h, const std::string& text) -> nlohmann::json {
      return {{"summary", text},
              {"token_ids", h.tokens},
              {"token_logprobs", h.token_logprobs},
              {"finish_reason", to_string(h.finish_reason)},
              {"score", h.score}};
    };
    auto j = hypothesis_json(best, summary);
    j["alternatives"] = nlohmann::json::array();
    for (size_t h = 1; h < hypotheses.size(); ++h) {
      j["alternatives"].push_back(hypothesis_json(hypotheses[h], tokenizer->decode(hypotheses[h].tokens)));
    }
    j["usage"] = {{"input_tokens", static_cast<int64_t>(ids.size())},
                  {"original_input_tokens", original},
                  {"truncated", truncated},
                  {"output_tokens", static_cast<int64_t>(best.tokens.size())},
                  {"segments", m},
                  {"expected_length", L}};
    if (stream) j["stream"] = streamed;
    std::cout << j.dump() << std::endl;
  } else {
    if (!stream) std::cout << summary << std::endl;
    // As srformer-client prints them: the next best hypotheses, or the further samples, one line each.
    for (size_t h = 1; h < hypotheses.size(); ++h) {
      print_alternative_line(std::cout, h + 1, static_cast<float>(hypotheses[h].score),
                             tokenizer->decode(hypotheses[h].tokens));
    }
  }
  return 0;
}

}  // namespace srformer::tools
