#include "tools/commands.h"

namespace srformer::tools {

// Each command is defined in its own file (tools/cmd_*.cc).
int run_check_fixture(const std::vector<std::string>& args);
int run_inspect(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
int run_init_model(const std::vector<std::string>& args);
int run_summarize(const std::vector<std::string>& args);
int run_convert(const std::vector<std::string>& args);
int run_eval(const std::vector<std::string>& args);
int run_train(const std::vector<std::string>& args);

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"check-fixture", "replay a reference fixture directory and compare (JSON line last)", run_check_fixture},
      {"inspect", "print a model's config, parameter count and per-request state bytes", run_inspect},
      {"summarize", "summarize a document offline (same code path as the server)", run_summarize},
      {"convert", "plain BART/T5 -> SRformer, or any model -> Hugging Face directory", run_convert},
      {"init-model", "write a random model (T5: SentencePiece tokenizer from a corpus; BART: byte-level BPE)",
       run_init_model},
      {"eval", "ROUGE-1/2/L/Lsum of a model (or of given predictions) on a JSONL split", run_eval},
      {"train", "fine-tune a model on a JSONL split (AdamW, checkpoints with optimizer state, resume)", run_train},
      {"bench", "model benchmarks: encode/decode speed, cross-attention cost vs input length", run_bench},
  };
  return list;
}

}  // namespace srformer::tools
