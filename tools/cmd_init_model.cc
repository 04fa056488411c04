// `srformer init-model`: writes a randomly initialised SRformer BART/T5 directory with a real
// SentencePiece tokenizer trained on a corpus: the starting point for training, tests and the demo.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/data/examples.h"
#include "model/random_model.h"
#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/sentencepiece_library.h"
#include "tools/arg_reader.h"

namespace srformer::tools {

namespace {

// A byte-level BPE tokenizer for a BART-shaped random model: BART's four specials, the 256 byte
// symbols, no merges (every byte is a token), filler tokens up to vocab_size - 1 so that any id the
// random LM head picks decodes, and <mask> last as in BART.
void write_byte_level_tokenizer(const std::string& dir, int64_t vocab_size) {
  nlohmann::json vocab = {{"<s>", 0}, {"<pad>", 1}, {"</s>", 2}, {"<unk>", 3}};
  const auto symbols = byte_level_symbols();
  int64_t id = 4;
  for (const auto& sym : symbols) vocab[sym] = id++;
  for (size_t a = 0; a < symbols.size() && id < vocab_size - 1; ++a) {
    for (size_t b = 0; b < symbols.size() && id < vocab_size - 1; ++b) {
      vocab[symbols[a] + symbols[b]] = id++;
    }
  }
  vocab["<mask>"] = id;
  std::ofstream(dir + "/vocab.json") << vocab.dump() << "\n";
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\n";
}

}  // namespace

int run_init_model(const std::vector<std::string>& args) {
  std::string out, corpus, arch = "t5", kind = "srformer", shape = "tiny";
  int64_t segment = 16, vocab = 2000, seed = 1;
  int64_t d_model = 0, layers = 0, heads = 0, d_ff = 0;
  double init_std = 0.0, dropout = 0.0;
  for (ArgReader r(args); r.next();) {
    const auto& a = r.arg();
    if (a == "--help" || a == "-h") {
      std::cout
          << "usage: srformer init-model --corpus TEXT_FILE|SPLIT.jsonl [--arch t5] [--cross-attention srformer]\n"
             "                           [--segment-size 16] [--vocab 2000] [--d-model 32] [--seed 1]\n"
             "                           [--shape tiny|t5-small|bart-base] [--layers N] [--heads N]\n"
             "                           [--d-ff N] [--init-std X] [--dropout X] OUT_DIR\n"
             "  Trains a SentencePiece tokenizer on TEXT_FILE (T5 conventions: pad 0, eos 1, unk 2) and\n"
             "  writes random weights: an untrained model whose output is not a summary (the start of\n"
             "  `srformer train` from scratch). Weights follow Hugging Face's initialisation unless\n"
             "  --init-std X > 0 gives every matrix N(0, X). --layers N sets encoder and decoder depth.\n"
             "  --shape t5-small / bart-base: the paper's base shapes (for load benchmarks); bart-base writes\n"
             "  a byte-level BPE tokenizer without merges (one token per byte) and needs no corpus.\n"
             "  --dropout X: the config's dropout_rate for training (default 0, as the recipes in docs/ were\n"
             "  trained; Hugging Face's T5 default is 0.1; `srformer train --dropout` overrides it).\n";
      return 0;
    }
    if (a == "--corpus") {
      corpus = r.value();
    } else if (a == "--arch") {
      arch = r.value();
    } else if (a == "--dropout") {
      dropout = std::stod(r.value());
    } else if (a == "--cross-attention") {
      kind = r.value();
    } else if (a == "--segment-size") {
      segment = std::stoll(r.value());
    } else if (a == "--vocab") {
      vocab = std::stoll(r.value());
    } else if (a == "--d-model") {
      d_model = std::stoll(r.value());
    } else if (a == "--layers") {
      layers = r.int_value(1);
    } else if (a == "--heads") {
      heads = r.int_value(1);
    } else if (a == "--d-ff") {
      d_ff = r.int_value(1);
    } else if (a == "--init-std") {
      init_std = r.number_value();
    } else if (a == "--shape") {
      shape = r.value();
    } else if (a == "--seed") {
      seed = std::stoll(r.value());
    } else if (out.empty()) {
      out = a;
    } else {
      throw std::invalid_argument("unexpected argument '" + a + "'");
    }
  }
  if (shape != "tiny" && shape != "t5-small" && shape != "bart-base") {
    throw std::invalid_argument("--shape must be tiny, t5-small or bart-base");
  }
  if (shape == "bart-base") {
    if (out.empty()) throw std::invalid_argument("need OUT_DIR (see --help)");
    std::filesystem::create_directories(out);
    const auto c = bart_base_config(cross_attention_from_string(kind), segment);
    write_byte_level_tokenizer(out, c.vocab_size);
    write_random_model(out, c, static_cast<uint64_t>(seed), init_std);
    std::cout << "wrote " << out << " (BART-base shape, vocab " << c.vocab_size << ", "
              << to_string(c.srformer.cross_attention) << ", segment " << segment << ")\n";
    return 0;
  }
  if (out.empty() || corpus.empty()) throw std::invalid_argument("need --corpus FILE and OUT_DIR (see --help)");
  if (arch != "t5") throw std::invalid_argument("init-model writes T5-style models (SentencePiece); use --arch t5");
  std::filesystem::create_directories(out);
  std::filesystem::path text_corpus = corpus;
  if (std::filesystem::path(corpus).extension() == ".jsonl") {
    // A dataset split ({"document", "summary"} lines): the tokenizer learns from both sides.
    text_corpus = std::filesystem::path(out) / "corpus.txt";
    std::ofstream text(text_corpus);
    for (const auto& e : data::read_examples(corpus)) text << e.document << "\n" << e.summary << "\n";
  }
  train_sentencepiece("--input=" + text_corpus.string() + " --model_prefix=" + out +
                      "/spiece --vocab_size=" + std::to_string(vocab) +
                      " --model_type=unigram --character_coverage=1.0 --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1"
                      " --hard_vocab_limit=false --minloglevel=2");
  if (text_corpus != corpus) std::filesystem::remove(text_corpus);
  const auto sp = SentencePieceProcessor::load(out + "/spiece.model");
  auto c = shape == "t5-small" ? t5_small_config(cross_attention_from_string(kind), segment)
                               : tiny_config(Architecture::kT5, cross_attention_from_string(kind), segment);
  // + T5's <extra_id_N> sentinels; the t5-small shape keeps T5's 32128 embedding rows (the LM head's
  // real cost) even past a smaller tokenizer, whose vocabulary bounds generation.
  c.vocab_size = std::max<int64_t>(sp.vocab_size() + 100, shape == "t5-small" ? c.vocab_size : 0);
  if (heads > 0) c.num_heads = heads;
  if (d_model > 0) {
    c.d_model = d_model;
    c.d_ff = 2 * d_model;
  }
  if (d_model > 0 || heads > 0) {
    if (c.d_model % c.num_heads != 0) throw std::invalid_argument("--d-model must be a multiple of --heads");
    c.head_dim = c.d_model / c.num_heads;
  }
  if (d_ff > 0) c.d_ff = d_ff;
  if (layers > 0) c.encoder_layers = c.decoder_layers = layers;
  c.dropout = {dropout, dropout, dropout};
  write_random_model(out, c, static_cast<uint64_t>(seed), init_std);
  std::ofstream(out + "/tokenizer_config.json") << R"({"extra_ids": 100, "model_max_length": 16384})"
                                                << "\n";
  std::cout << "wrote " << out << " (vocab " << c.vocab_size << ", " << to_string(c.srformer.cross_attention)
            << ", segment " << segment << ")\n";
  return 0;
}

}  // namespace srformer::tools
