// `srformer convert SRC DST [--cross-attention KIND --segment-size S]`: rewrites any loadable model
// as a Hugging Face directory; turning a plain BART/T5 into SRformer adds the RAF parameters with
// the authors' initial values (threshold 0.1; leak 0.1 T5 / 0.5 BART).
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "model/dtype_name.h"
#include "model/seq2seq.h"
#include "tools/arg_reader.h"

namespace srformer::tools {

int run_convert(const std::vector<std::string>& args) {
  std::string src, dst, kind;
  int64_t segment = 0;
  uint64_t seed = 0;
  bool seed_given = false;
  std::optional<double> weight_scale;
  torch::ScalarType storage = torch::kFloat32;
  for (ArgReader r(args); r.next();) {
    const auto& a = r.arg();
    if (a == "--help" || a == "-h") {
      std::cout << "usage: srformer convert SRC_DIR DST_DIR [--cross-attention srformer --segment-size S] [--seed N]\n"
                   "                        [--dtype fp32|fp16|bf16]\n"
                   "  Loads SRC (safetensors, shards or pytorch_model.bin) and writes DST as config.json +\n"
                   "  model.safetensors (+ tokenizer files). With --cross-attention the model's variant changes;\n"
                   "  RAF parameters it lacks are created with the authors' initial values (SNN_kv seeded).\n"
                   "  --dtype: how the weights are stored (default fp32; fp16/bf16 halve the file, and the model\n"
                   "  then computes with the rounded weights).\n"
                   "  --raf-init-weight-scale X: SNN_kv starts as U(-X/sqrt(d), X/sqrt(d)) (default 1, the authors'\n"
                   "  nn.Linear init); recorded in config.json's srformer.raf_init (docs/TRAINING.md, Table 3).\n"
                   "  With it, RAF parameters a full or segmented checkpoint holds (unused by its attention)\n"
                   "  are drawn anew; an SRformer checkpoint's are trained, and the flag is refused.\n"
                   "  --segment-size, --seed and --raf-init-weight-scale need --cross-attention.\n";
      return 0;
    }
    if (a == "--cross-attention") {
      kind = r.value();
    } else if (a == "--segment-size") {
      segment = r.int_value(1);
    } else if (a == "--seed") {
      seed = r.unsigned_value();
      seed_given = true;
    } else if (a == "--raf-init-weight-scale") {
      weight_scale = r.number_value();
    } else if (a == "--dtype") {
      storage = float_dtype_from_flag(r.value());
    } else if (a == "--model") {
      // As summarize takes it: '--model X Y' was read as SRC_DIR '--model', DST_DIR X, then 'unexpected
      // argument Y'.
      throw std::invalid_argument(
          "convert has no --model: it takes the model as its first argument (srformer convert SRC_DIR DST_DIR "
          "[options])");
    } else if (!a.empty() && a[0] == '-') {
      throw unknown_option(a);
    } else if (src.empty()) {
      src = a;
    } else if (dst.empty()) {
      dst = a;
    } else {
      throw std::invalid_argument("unexpected argument '" + a + "': convert takes SRC_DIR and DST_DIR (see --help)");
    }
  }
  if (src.empty() || dst.empty()) throw std::invalid_argument("need SRC_DIR and DST_DIR (see --help)");
  if (std::error_code ec; std::filesystem::equivalent(src, dst, ec)) {
    // Writing over the weights being converted would lose the model if anything failed half-way.
    throw std::invalid_argument("DST_DIR " + dst + " is SRC_DIR " + src + "; convert into a new directory");
  }
  LoadOptions o;
  o.seed = seed;
  o.pack_projections = false;  // converts and saves the weights, never multiplies them
  std::string raf_note;
  if (kind.empty()) {
    // Each shapes only a change of variant: alone it would be dropped without a word.
    if (segment > 0 || seed_given || weight_scale) {
      throw std::invalid_argument(
          "--segment-size, --seed and --raf-init-weight-scale set up a new cross-attention variant: give "
          "--cross-attention too (e.g. --cross-attention srformer --segment-size 64)");
    }
  } else {
    const auto source = ModelConfig::load(std::filesystem::path(src) / "config.json");
    auto cfg = source;
    cfg.srformer.cross_attention = cross_attention_from_string(kind);
    if (cfg.srformer.segmented() && segment <= 0) throw std::invalid_argument("--segment-size is required for " + kind);
    if (!cfg.srformer.segmented() && segment > 0) {
      throw std::invalid_argument("--cross-attention full has no segments; leave out --segment-size");
    }
    cfg.srformer.segment_size = cfg.srformer.segmented() ? segment : 0;
    o.raf_init = RafInit::kCreateMissing;
    if (weight_scale) {
      check_raf_init_weight_scale(*weight_scale, "--raf-init-weight-scale");
      if (!cfg.srformer.uses_raf()) {
        throw std::invalid_argument("--raf-init-weight-scale sets how RAF parameters start, and " + kind +
                                    " cross-attention has none; leave it out");
      }
      // A checkpoint whose attention used its RAF parameters has trained them: a new start would throw
      // that away. One whose attention did not (the authors' modules save them with full attention
      // too) holds only their initial values: those are drawn anew at the scale asked for (they were
      // kept, the scale recorded but not applied).
      if (source.srformer.uses_raf()) {
        throw std::invalid_argument(src + " uses its RAF parameters (cross-attention " +
                                    to_string(source.srformer.cross_attention) +
                                    "), so they are trained; --raf-init-weight-scale only sets how new ones start");
      }
      cfg.srformer.raf_init_weight_scale = *weight_scale;
      o.raf_init = RafInit::kCreateAll;
      std::ostringstream scale;
      scale << *weight_scale;
      raf_note = "; RAF parameters drawn at weight scale " + scale.str() +
                 " (any the checkpoint held were unused by its " + to_string(source.srformer.cross_attention) +
                 " attention, and are replaced)";
    }
    o.srformer = cfg.srformer;
  }
  const auto model = load_model(src, o);
  save_model(*model, dst, src, storage);
  std::cout << "wrote " << dst << " (" << to_string(model->config().srformer.cross_attention) << ", "
            << model->parameter_count() << " parameters" << raf_note << ")\n";
  return 0;
}

}  // namespace srformer::tools
