#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "model/bart.h"
#include "model/io/atomic_file.h"
#include "model/io/checkpoint.h"
#include "model/io/json_file.h"
#include "model/io/load_error.h"
#include "model/io/model_files.h"
#include "model/io/safetensors.h"
#include "model/kernels/bf16_linear.h"
#include "model/seq2seq.h"
#include "model/t5.h"

namespace srformer {

void check_device_available(const torch::Device& device) {
  if (!device.is_cuda()) return;
  const std::string name = device.str();
  if (!torch::cuda::is_available()) {
    throw std::invalid_argument("device " + name +
                                ": this build or machine has no CUDA (LibTorch without CUDA, or no NVIDIA GPU and "
                                "driver); use --device cpu, or build on a GPU machine with deploy/gpu/build.sh");
  }
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  if (device.has_index() && device.index() >= count) {
    throw std::invalid_argument("device " + name + ": this machine has " + std::to_string(count) +
                                " CUDA device(s), cuda:0 to cuda:" + std::to_string(count - 1));
  }
}

namespace {

// A model fine-tuned with the authors' code holds trained RAF parameters, but their config.json has no
// "srformer" block: it loads as plain full attention (our rule), which is right for a plain checkpoint
// and silently wrong for theirs. Said once at load, with the fix.
void warn_if_raf_parameters_unused(const std::filesystem::path& dir, const ModelConfig& config,
                                   const CheckpointReader& ckpt) {
  if (config.srformer.from_block) return;
  const auto names = ckpt.names();
  const auto raf = std::count_if(names.begin(), names.end(), [](const std::string& n) {
    constexpr std::string_view kSuffix = "SNN_kv.weight";
    return n.size() >= kSuffix.size() && n.compare(n.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
  });
  if (raf == 0) return;
  spdlog::warn(
      "{}: the checkpoint holds RAF parameters (SNN_kv, threshold, leak in {} layers: an SRformer trained with the "
      "authors' code?) but config.json has no \"srformer\" block, so it runs as plain full attention and they stay "
      "unused; to run it as SRformer, add the block with the segment size it was trained with (docs/MODELS.md), "
      "or `srformer convert {} DST --cross-attention srformer --segment-size S`, which keeps them (a full-attention "
      "model trained with that code holds them too: then nothing is wrong)",
      dir.string(), raf, dir.string());
}

// config.json's "architectures" naming a class without a language-model head: its weights fail to bind (a
// classification head unexpected, the decoder missing), and the list of names alone does not say that
// the checkpoint cannot summarize at all, nor what to serve instead.
std::optional<std::string> architecture_hint(const std::filesystem::path& dir, const ModelConfig& config) {
  struct Kind {
    std::string_view suffix;
    const char* what;
  };
  static constexpr Kind kKinds[] = {
      {"ForSequenceClassification", "a classifier (its head scores labels, as bart-large-mnli's)"},
      {"ForTokenClassification", "a token classifier (its head labels each token)"},
      {"ForQuestionAnswering", "an extractive question-answering model (its head marks answer spans)"},
      {"EncoderModel", "an encoder alone (as a text-to-image pipeline's text encoder), without a decoder"},
      {"ForCausalLM", "a decoder alone, without the encoder that reads the document"},
  };
  nlohmann::json architectures;
  try {  // config.json read as ModelConfig::load read it; a hint only, so any failure gives none
    const auto j = read_json_file<LoadError>(dir / "config.json", "the model's JSON configuration");
    if (j.is_object() && j.contains("architectures") && j["architectures"].is_array()) {
      architectures = j["architectures"];
    }
  } catch (const LoadError&) {
    return std::nullopt;
  }
  for (const auto& entry : architectures) {
    if (!entry.is_string()) continue;
    const std::string name = entry.get<std::string>();
    for (const Kind& k : kKinds) {
      if (name.size() >= k.suffix.size() &&
          name.compare(name.size() - k.suffix.size(), k.suffix.size(), k.suffix) == 0) {
        const std::string type = config.type_name();
        const std::string generator = type == "bart"  ? "BartForConditionalGeneration (as facebook/bart-large-cnn)"
                                      : type == "mt5" ? "MT5ForConditionalGeneration (as google/mt5-base)"
                                                      : "T5ForConditionalGeneration (as google/flan-t5-base)";
        return "config.json's \"architectures\" says " + name + ": " + k.what +
               ", not a model that writes text; serve a " + generator +
               " checkpoint, or the base model this one was fine-tuned from";
      }
    }
  }
  return std::nullopt;
}

}  // namespace

torch::ScalarType default_dtype(const ModelConfig& config, const torch::Device& device, bool gpu_has_bf16) {
  if (!device.is_cuda()) return torch::kFloat32;
  return config.arch == Architecture::kT5 && gpu_has_bf16 ? torch::kBFloat16 : torch::kFloat16;
}

std::unique_ptr<Seq2SeqModel> load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  check_device_available(options.device);
  auto config = ModelConfig::load(dir / "config.json");
  if (options.srformer) config.srformer = *options.srformer;
  if (options.device.is_cpu() && options.dtype == torch::kFloat16) {
    throw std::invalid_argument(
        "fp16 is for CUDA devices; on the CPU use fp32, or bf16 where the CPU has AMX or AVX512-BF16");
  }
  if (options.device.is_cpu() && options.dtype == torch::kBFloat16 && !kernels::cpu_bf16_available()) {
    throw std::invalid_argument(
        "bf16 on the CPU needs Intel AMX (Xeon Sapphire Rapids or newer, Linux 5.16 or newer) or AVX512-BF16 "
        "(AMD Zen 4 or newer, Intel Cooper Lake), which this CPU lacks (or SRFORMER_CPU_AMX=0 and "
        "SRFORMER_CPU_BF16_DOT=0 turned them off); use fp32");
  }
  if (options.device.is_cuda() && options.dtype == torch::kFloat16 && config.arch == Architecture::kT5) {
    spdlog::warn(
        "{}: T5 in fp16 can overflow (clamped as Hugging Face does, which changes the outputs where it "
        "happens); on a GPU with bfloat16 (compute capability 8.0 or newer) bf16 keeps fp32's range",
        dir.string());
  }
  const auto ckpt = CheckpointReader::open_dir(dir);
  if (!options.srformer) warn_if_raf_parameters_unused(dir, config, ckpt);
  try {
    if (config.arch == Architecture::kBart) return load_bart(config, ckpt, options);
    return load_t5(config, ckpt, options);
  } catch (const LoadError& e) {
    const auto hint = architecture_hint(dir, config);
    if (!hint) throw;
    throw LoadError(std::string(e.what()) + "\n" + *hint);
  }
}

}  // namespace srformer

namespace srformer {

const std::vector<std::string>& model_side_files() {
  static const std::vector<std::string> files = {"spiece.model",
                                                 "vocab.json",
                                                 "merges.txt",
                                                 "tokenizer.json",
                                                 "tokenizer_config.json",
                                                 "special_tokens_map.json",
                                                 "added_tokens.json",
                                                 "generation_config.json"};
  return files;
}

void save_model(const Seq2SeqModel& model, const std::filesystem::path& dir, const std::filesystem::path& source_dir,
                torch::ScalarType storage) {
  namespace fs = std::filesystem;
  if (storage != torch::kFloat32 && storage != torch::kFloat16 && storage != torch::kBFloat16) {
    throw std::invalid_argument("weights can be stored as float32, float16 or bfloat16");
  }
  fs::create_directories(dir);
  nlohmann::json original;
  if (!source_dir.empty() && fs::exists(source_dir / "config.json")) {
    std::ifstream in(source_dir / "config.json");
    in >> original;
  }
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& [name, t] : model.named_parameters()) {
    tensors.emplace_back(name, t.detach().to(torch::kCPU, t.is_floating_point() ? storage : t.scalar_type()));
  }
  save_safetensors(dir / "model.safetensors", tensors);
  remove_other_weight_files(dir);
  const auto json = model.config().to_json(original.is_object() ? &original : nullptr);
  write_file_atomically(dir / "config.json", json.dump(2) + "\n");  // a failed write throws: no config cut short
  std::error_code ec;
  if (!source_dir.empty() && !fs::equivalent(source_dir, dir, ec)) {
    // The source's tokenizer and generation defaults, and none of an earlier model's that the source
    // lacks (a stale generation_config.json would cap every summary at its max_new_tokens).
    for (const auto& f : model_side_files()) {
      if (fs::exists(source_dir / f)) {
        copy_file_atomically(source_dir / f, dir / f);  // a server reloading `dir` never reads half a file
      } else if (fs::exists(dir / f)) {
        spdlog::info("{}: removed {}, which {} does not have", dir.string(), f, source_dir.string());
        fs::remove(dir / f);
      }
    }
  }
}

}  // namespace srformer
