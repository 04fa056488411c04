#include <filesystem>
#include <nlohmann/json.hpp>

#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_error.h"
#include "model/tokenizer/tokenizer_files.h"
#include "model/tokenizer/unigram_tokenizer_json.h"

namespace srformer {

namespace fs = std::filesystem;

namespace {

std::unique_ptr<Tokenizer> load_tokenizer_files(const fs::path& model_dir) {
  if (!fs::is_directory(model_dir)) {
    throw TokenizerLoadError("tokenizer directory " + model_dir.string() + " does not exist or is not a directory");
  }
  if (fs::exists(model_dir / "spiece.model")) return SentencePieceTokenizer::load(model_dir);
  const bool has_vocab = fs::exists(model_dir / "vocab.json"), has_merges = fs::exists(model_dir / "merges.txt");
  if (has_vocab && has_merges) return ByteLevelBpeTokenizer::load(model_dir);
  // A fast-tokenizer-only checkpoint: its tokenizer.json holds a SentencePiece unigram model (T5) or
  // byte-level BPE (BART); anything else is refused with what to copy.
  if (!has_vocab && !has_merges && fs::exists(model_dir / "tokenizer.json")) {
    const auto tokenizer_json = read_tokenizer_file(model_dir / "tokenizer.json");
    if (is_unigram_tokenizer_json(tokenizer_json)) return SentencePieceTokenizer::load(model_dir, &tokenizer_json);
    return ByteLevelBpeTokenizer::load(model_dir, &tokenizer_json);
  }
  if (has_vocab != has_merges) {
    throw TokenizerLoadError("incomplete byte-level BPE tokenizer in " + model_dir.string() + ": found " +
                             (has_vocab ? "vocab.json but not merges.txt" : "merges.txt but not vocab.json") +
                             "; copy both files from the model's repository");
  }
  throw TokenizerLoadError("no tokenizer in " + model_dir.string() +
                           ": looked for spiece.model or a Unigram tokenizer.json (SentencePiece, T5), vocab.json + "
                           "merges.txt or a BPE tokenizer.json (byte-level BPE, BART); copy the tokenizer files from "
                           "the model's repository");
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& model_dir) {
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = load_tokenizer_files(model_dir);
  } catch (const TokenizerFileCutShortError& e) {
    throw TokenizerLoadError(std::string(e.what()) + "; download it again");
  } catch (const nlohmann::json::exception& e) {
    // A key of the wrong type ("lstrip": "yes") that no reader checked by itself: say where to look.
    throw TokenizerLoadError(model_dir.string() + ": a tokenizer file (tokenizer.json, tokenizer_config.json, " +
                             "special_tokens_map.json, added_tokens.json) holds a value of the wrong type: " +
                             e.what() + "; restore the files from the model's repository");
  }
  // transformers' decode cleans up spaces where tokenizer_config.json says so (its default has changed
  // between versions: absent, we leave the text as the tokens spell it).
  if (const auto config = read_tokenizer_file_if_present(model_dir / "tokenizer_config.json");
      config && config->is_object()) {
    const auto it = config->find("clean_up_tokenization_spaces");
    tokenizer->set_clean_up_spaces(it != config->end() && it->is_boolean() && it->get<bool>());
  }
  return tokenizer;
}

}  // namespace srformer
