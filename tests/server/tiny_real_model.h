#pragma once
// A real (tiny, random) SRformer T5 model directory with a real SentencePiece tokenizer: the
// reference fixture's config + weights, plus a spiece.model trained here on synthetic text whose
// ids fit the fixture's 64-token vocabulary (the rest is filled with T5 sentinel ids).
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "model/tokenizer/sentencepiece_library.h"

namespace srformer::testing {

inline std::string synthetic_text(int sentences, uint32_t seed) {
  static const char* words[] = {"the", "cat", "sat", "on",  "mat",  "a",    "dog", "ran",  "to", "park", "red", "sun",
                                "is",  "hot", "and", "big", "tree", "fell", "in",  "rain", "it", "was",  "not", "old"};
  std::mt19937 rng(seed);
  std::string out;
  for (int s = 0; s < sentences; ++s) {
    const int n = 4 + static_cast<int>(rng() % 8);
    for (int w = 0; w < n; ++w) out += std::string(words[rng() % 24]) + (w + 1 < n ? " " : ".\n");
  }
  return out;
}

inline std::string fixtures_dir() {
  const char* env = std::getenv("SRFORMER_FIXTURES_DIR");
  return env && *env ? env : SRFORMER_FIXTURES_DIR;
}

// Returns "" when the fixture is missing (callers GTEST_SKIP).
inline std::filesystem::path make_tiny_t5_srformer(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(fixtures_dir()) / "t5-srformer" / "model";
  if (!fs::exists(src / "config.json")) return {};
  fs::create_directories(dir);
  fs::copy_file(src / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  fs::copy_file(src / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
  if (!fs::exists(dir / "spiece.model")) {
    const fs::path corpus = dir / "corpus.txt";
    std::ofstream(corpus) << synthetic_text(400, 7);
    train_sentencepiece("--input=" + corpus.string() + " --model_prefix=" + (dir / "spiece").string() +
                        " --vocab_size=60 --model_type=unigram --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1"
                        " --character_coverage=1.0 --hard_vocab_limit=false --minloglevel=2");
    const int sp = SentencePieceProcessor::load(dir / "spiece.model").vocab_size();
    std::ofstream(dir / "tokenizer_config.json") << "{\"extra_ids\": " << (64 - sp) << "}";
  }
  return dir;
}

}  // namespace srformer::testing
