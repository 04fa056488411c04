// `srformer init-model`: writes a randomly initialised SRformer BART/T5 directory with a real
// SentencePiece tokenizer trained on a corpus: the starting point for training, tests and the demo.
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "model/random_model.h"
#include "model/tokenizer/sentencepiece_library.h"

namespace srformer::tools {

int run_init_model(const std::vector<std::string>& args) {
  std::string out, corpus, arch = "t5", kind = "srformer";
  int64_t segment = 16, vocab = 2000, seed = 1;
  int64_t d_model = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw std::invalid_argument(a + " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << "usage: srformer init-model --corpus TEXT_FILE [--arch t5] [--cross-attention srformer]\n"
                   "                           [--segment-size 16] [--vocab 2000] [--d-model 32] [--seed 1] OUT_DIR\n"
                   "  Trains a SentencePiece tokenizer on TEXT_FILE (T5 conventions: pad 0, eos 1, unk 2) and\n"
                   "  writes random weights: an untrained model whose output is not a summary.\n";
      return 0;
    }
    if (a == "--corpus") {
      corpus = next();
    } else if (a == "--arch") {
      arch = next();
    } else if (a == "--cross-attention") {
      kind = next();
    } else if (a == "--segment-size") {
      segment = std::stoll(next());
    } else if (a == "--vocab") {
      vocab = std::stoll(next());
    } else if (a == "--d-model") {
      d_model = std::stoll(next());
    } else if (a == "--seed") {
      seed = std::stoll(next());
    } else if (out.empty()) {
      out = a;
    } else {
      throw std::invalid_argument("unexpected argument '" + a + "'");
    }
  }
  if (out.empty() || corpus.empty()) throw std::invalid_argument("need --corpus FILE and OUT_DIR (see --help)");
  if (arch != "t5") throw std::invalid_argument("init-model writes T5-style models (SentencePiece); use --arch t5");
  std::filesystem::create_directories(out);
  train_sentencepiece("--input=" + corpus + " --model_prefix=" + out + "/spiece --vocab_size=" + std::to_string(vocab) +
                      " --model_type=unigram --character_coverage=1.0 --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1"
                      " --hard_vocab_limit=false --minloglevel=2");
  const auto sp = SentencePieceProcessor::load(out + "/spiece.model");
  auto c = tiny_config(Architecture::kT5, cross_attention_from_string(kind), segment, sp.vocab_size() + 100);
  if (d_model > 0) {
    c.d_model = d_model;
    c.head_dim = d_model / c.num_heads;
    c.d_ff = 2 * d_model;
  }
  write_random_model(out, c, static_cast<uint64_t>(seed));
  std::ofstream(out + "/tokenizer_config.json") << R"({"extra_ids": 100, "model_max_length": 16384})" << "\n";
  std::cout << "wrote " << out << " (vocab " << c.vocab_size << ", " << to_string(c.srformer.cross_attention)
            << ", segment " << segment << ")\n";
  return 0;
}

}  // namespace srformer::tools
