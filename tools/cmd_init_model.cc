// `srformer init-model`: writes a randomly initialised SRformer BART/T5 directory with a real tokenizer
// (T5: SentencePiece trained on a corpus; BART: byte-level BPE): the start of training, tests and the demo.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/data/examples.h"
#include "model/io/atomic_file.h"
#include "model/random_model.h"
#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/sentencepiece_library.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
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
  write_file_atomically(dir + "/vocab.json", vocab.dump() + "\n");
  write_file_atomically(dir + "/merges.txt", "#version: 0.2\n");
}

// --heads, --d-model, --d-ff, --layers and --dropout over a shape's configuration (0: the shape's own).
void apply_overrides(ModelConfig& c, int64_t heads, int64_t d_model, int64_t d_ff, int64_t layers, double dropout) {
  if (heads > 0) c.num_heads = heads;
  if (d_model > 0) {
    c.d_model = d_model;
    c.d_ff = 2 * d_model;
  }
  if (d_model > 0 || heads > 0) {
    if (c.d_model % c.num_heads != 0) {
      throw std::invalid_argument("--d-model (" + std::to_string(c.d_model) + ") must be a multiple of --heads (" +
                                  std::to_string(c.num_heads) + ")");
    }
    c.head_dim = c.d_model / c.num_heads;
  }
  if (d_ff > 0) c.d_ff = d_ff;
  if (layers > 0) c.encoder_layers = c.decoder_layers = layers;
  if (!(dropout >= 0.0 && dropout < 1.0)) throw std::invalid_argument("--dropout must be in [0, 1)");
  c.dropout = {dropout, dropout, dropout};
}

// Removes the output directory it was made for unless kept: a failed init-model (out of memory, a
// corpus SentencePiece cannot learn from) leaves no partial model, which would also refuse the next
// attempt as a directory that is not empty.
class RemovedUnlessKept {
 public:
  explicit RemovedUnlessKept(std::filesystem::path dir) : dir_(std::move(dir)) {}
  RemovedUnlessKept(const RemovedUnlessKept&) = delete;
  RemovedUnlessKept& operator=(const RemovedUnlessKept&) = delete;
  ~RemovedUnlessKept() {
    std::error_code ec;
    if (!kept_) std::filesystem::remove_all(dir_, ec);
  }
  void keep() { kept_ = true; }

 private:
  std::filesystem::path dir_;
  bool kept_ = false;
};

// SentencePiece skips a line longer than its max_sentence_length (4192 bytes unless set) with a warning that
// --minloglevel=2 hides: a corpus's long paragraphs (a split's documents are written a paragraph a line) were
// left out of the tokenizer's training, unsaid. The limit is raised to the corpus's longest line, up to this
// bound (a line's lattice in SentencePiece's EM grows with its length); longer lines are counted and named.
constexpr size_t kMaxSentenceBytes = size_t{1} << 16;
constexpr size_t kSentencePieceDefaultMaxSentence = 4192;

// What SentencePiece is given to learn from, as it reads it: lines, their bytes without the newline.
struct CorpusLines {
  bool has_text = false;  // a character other than white space: SentencePiece refuses a corpus without one
                          // with an internal check ("!sentences_.empty()")
  size_t longest = 0;     // bytes of the longest line
  int64_t too_long = 0;   // lines over kMaxSentenceBytes
};

// Read in blocks, not lines: a corpus of one huge line is not held in memory whole.
CorpusLines scan_lines(const std::filesystem::path& file) {
  CorpusLines lines;
  size_t length = 0;  // of the line read so far
  const auto end_line = [&] {
    lines.longest = std::max(lines.longest, length);
    if (length > kMaxSentenceBytes) ++lines.too_long;
    length = 0;
  };
  std::ifstream in(file, std::ios::binary);
  std::vector<char> buffer(1 << 16);
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
    for (auto c = buffer.data(), end = c + in.gcount(); c != end; ++c) {
      if (*c == '\n') {
        end_line();
        continue;
      }
      ++length;
      lines.has_text = lines.has_text || !std::isspace(static_cast<unsigned char>(*c));
    }
  }
  if (length > 0) end_line();
  return lines;
}

// The corpus opens as a file, or an error saying why not: scan_lines() reads an unopenable file as
// empty, which said "only white space" of a missing file or a directory.
void check_readable(const std::string& corpus) {
  std::error_code ec;
  if (std::filesystem::is_directory(corpus, ec)) {
    throw std::invalid_argument("cannot read --corpus '" + corpus +
                                "': a directory; pass a text file or a SPLIT.jsonl");
  }
  if (!std::filesystem::exists(corpus, ec)) {
    throw std::invalid_argument("cannot read --corpus '" + corpus + "': no such file");
  }
  errno = 0;
  if (!std::ifstream(corpus, std::ios::binary)) {
    throw std::invalid_argument("cannot read --corpus '" + corpus +
                                "': " + (errno != 0 ? std::strerror(errno) : "it cannot be opened"));
  }
}

// Whether `file` is a dataset split ({"id", "document", "summary"} lines) rather than text: named .jsonl,
// or its first line that holds more than white space (a UTF-8 byte-order mark skipped) is a JSON object with
// a "document". The name alone decided: a split named .json or piped in (`<(zcat train.jsonl.gz)`) trained
// the tokenizer on its JSON text, learning quotes, braces, field names and \uXXXX escapes (json.dumps' way
// of writing every non-ASCII character) instead of the characters they stand for.
bool is_dataset_split(const std::filesystem::path& file) {
  if (file.extension() == ".jsonl") return true;
  std::ifstream in(file, std::ios::binary);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    const auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos) continue;
    if (line[start] != '{') return false;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    return j.is_object() && j.contains("document");
  }
  return false;
}

// BART's byte-level tokenizer holds its 4 specials, 256 byte symbols and <mask>.
constexpr int64_t kMinByteLevelVocab = 4 + 256 + 1;
// ... and at most every pair of byte symbols as filler: ids past the last token would not decode.
constexpr int64_t kMaxByteLevelVocab = 4 + 256 + 256 * 256 + 1;

}  // namespace

int run_init_model(const std::vector<std::string>& args) {
  std::string out, corpus, kind = "srformer", shape = "tiny";
  std::optional<std::string> arch;
  std::optional<int64_t> vocab;
  int64_t segment = 16;
  bool segment_given = false;
  uint64_t seed = 1;
  int64_t d_model = 0, layers = 0, heads = 0, d_ff = 0;
  double init_std = 0.0, dropout = 0.0;
  for (ArgReader r(args); r.next();) {
    const auto& a = r.arg();
    if (a == "--help" || a == "-h") {
      std::cout << "usage: srformer init-model [--arch t5|bart] [--corpus TEXT_FILE|SPLIT.jsonl]\n"
                   "                           [--cross-attention srformer|full|segmented|...]\n"
                   "                           [--segment-size 16] [--vocab 2000] [--d-model 32] [--seed 1]\n"
                   "                           [--shape tiny|t5-small|bart-base] [--layers N] [--heads N]\n"
                   "                           [--d-ff N] [--init-std X] [--dropout X] OUT_DIR\n"
                   "  Writes random weights: an untrained model whose output is not a summary (the start of\n"
                   "  `srformer train` from scratch, or a model for tests and benchmarks).\n"
                   "  T5 (the default): trains a SentencePiece tokenizer on TEXT_FILE, or on the documents and\n"
                   "  summaries of a SPLIT.jsonl (known by its lines: also named otherwise, or a pipe such as\n"
                   "  <(zcat train.jsonl.gz)) (T5 conventions: pad 0, eos 1, unk 2); --corpus is required. BART "
                   "(--arch bart or --shape bart-base): a byte-level BPE\n"
                   "  tokenizer without merges (one token per byte, filler tokens up to --vocab, at least 261),\n"
                   "  no corpus. Weights follow Hugging Face's initialisation (biases 0; RAF threshold 0.1, leak 0.1\n"
                   "  for T5 and 0.5 for BART, as the authors) unless --init-std X > 0 gives every matrix and bias\n"
                   "  N(0, X) and draws the RAF parameters at random.\n"
                   "  --segment-size S: the segment size of a segmented cross-attention (srformer, the default, and\n"
                   "  the other variants); --cross-attention full has none and refuses it.\n"
                   "  --shape: tiny (d_model 32, 4 heads, 2+2 layers), or the paper's base shapes t5-small and\n"
                   "  bart-base (for load benchmarks); --d-model (d_ff 2x unless --d-ff), --heads, --d-ff and\n"
                   "  --layers (encoder and decoder depth) change the shape's values.\n"
                   "  --dropout X: the config's dropout rates for training (default 0, as the recipes in docs/ were\n"
                   "  trained; Hugging Face's T5 default is 0.1; `srformer train --dropout` overrides it).\n";
      return 0;
    }
    if (a == "--corpus") {
      corpus = r.value();
    } else if (a == "--arch") {
      arch = r.value();
    } else if (a == "--dropout") {
      dropout = r.number_value();
    } else if (a == "--cross-attention") {
      kind = r.value();
    } else if (a == "--segment-size") {
      segment = r.int_value(1);
      segment_given = true;
    } else if (a == "--vocab") {
      vocab = r.int_value(1);
    } else if (a == "--d-model") {
      d_model = r.int_value(1);
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
      seed = r.unsigned_value();
    } else if (!a.empty() && a[0] == '-') {
      throw unknown_option(a);
    } else if (out.empty()) {
      out = a;
    } else {
      throw std::invalid_argument("unexpected argument '" + a + "': init-model takes one OUT_DIR (see --help)");
    }
  }
  if (shape != "tiny" && shape != "t5-small" && shape != "bart-base") {
    throw std::invalid_argument("--shape must be tiny, t5-small or bart-base");
  }
  if (arch && *arch != "t5" && *arch != "bart") throw std::invalid_argument("--arch must be t5 or bart");
  const std::string shape_arch = shape == "bart-base" ? "bart" : shape == "t5-small" ? "t5" : arch.value_or("t5");
  if (arch && *arch != shape_arch) {
    throw std::invalid_argument("--shape " + shape + " is a " + shape_arch + " shape, not --arch " + *arch);
  }
  if (out.empty()) throw std::invalid_argument("need OUT_DIR (see --help)");
  // A new directory, or an empty one: written over a model, it replaced the weights and left the other
  // model's tokenizer beside a BART's (which then read with it), and it deleted a corpus.txt it had not made.
  if (std::error_code ec;
      std::filesystem::exists(out, ec) && (!std::filesystem::is_directory(out) || !std::filesystem::is_empty(out))) {
    throw std::invalid_argument(out +
                                " exists and is not an empty directory; init-model writes a new model "
                                "directory: remove it or choose another OUT_DIR");
  }
  const auto cross_attention = cross_attention_from_string(kind);
  // The config of a full-attention model has no segment size (a config that sets one is refused on load).
  if (cross_attention == CrossAttentionKind::kFull && segment_given) {
    throw std::invalid_argument(
        "--segment-size is for a segmented cross-attention (--cross-attention srformer, the default, or "
        "another segmented variant); --cross-attention full has no segments");
  }
  // 0 keeps Hugging Face's initialisation; a negative or NaN std is no distribution.
  if (!(init_std >= 0.0 && std::isfinite(init_std))) {
    throw std::invalid_argument("--init-std must be a number > 0 (or 0, the default: Hugging Face's initialisation)");
  }
  if (!corpus.empty()) check_readable(corpus);
  const std::string segment_note =
      cross_attention == CrossAttentionKind::kFull ? "" : ", segment " + std::to_string(segment);

  if (shape_arch == "bart") {
    if (!corpus.empty()) {
      throw std::invalid_argument(
          "--corpus trains a T5's SentencePiece tokenizer; a BART gets a byte-level one "
          "and needs no corpus");
    }
    auto c = shape == "bart-base" ? bart_base_config(cross_attention, segment)
                                  : tiny_config(Architecture::kBart, cross_attention, segment, vocab.value_or(2000));
    if (vocab) c.vocab_size = *vocab;
    if (c.vocab_size < kMinByteLevelVocab) {
      throw std::invalid_argument("--vocab must be at least " + std::to_string(kMinByteLevelVocab) +
                                  " for a BART (its byte-level tokenizer's specials and 256 byte symbols)");
    }
    if (c.vocab_size > kMaxByteLevelVocab) {
      throw std::invalid_argument("--vocab must be at most " + std::to_string(kMaxByteLevelVocab) +
                                  " for a BART (its byte-level tokenizer's specials, 256 byte symbols and their "
                                  "pairs as filler tokens)");
    }
    apply_overrides(c, heads, d_model, d_ff, layers, dropout);
    std::filesystem::create_directories(out);
    RemovedUnlessKept made(out);
    write_byte_level_tokenizer(out, c.vocab_size);
    write_random_model(out, c, seed, init_std);
    made.keep();
    std::cout << "wrote " << out << " (BART, d_model " << c.d_model << ", " << c.encoder_layers << "+"
              << c.decoder_layers << " layers, vocab " << c.vocab_size << ", " << to_string(c.srformer.cross_attention)
              << segment_note << ")\n";
    return 0;
  }
  if (corpus.empty()) throw std::invalid_argument("a T5 needs --corpus FILE to train its tokenizer on (see --help)");
  auto c = shape == "t5-small" ? t5_small_config(cross_attention, segment)
                               : tiny_config(Architecture::kT5, cross_attention, segment);
  apply_overrides(c, heads, d_model, d_ff, layers, dropout);
  std::filesystem::create_directories(out);
  RemovedUnlessKept made(out);
  // A pipe is read once: copied here first, so that what is read below (which kind of corpus it is, whether
  // it holds text) and what SentencePiece learns from are the same bytes. The check for text took the pipe's
  // first line, and SentencePiece learnt from the rest.
  std::filesystem::path source = corpus;
  if (!std::filesystem::is_regular_file(corpus)) {
    source = std::filesystem::path(out) / "corpus-input";
    AtomicFile copy(source);
    std::ifstream in(corpus, std::ios::binary);
    std::vector<char> buffer(1 << 16);
    while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
      copy.write(buffer.data(), static_cast<size_t>(in.gcount()));
    }
    if (in.bad()) throw std::runtime_error("cannot read --corpus '" + corpus + "'");
    copy.commit();
  }
  std::filesystem::path text_corpus = source;
  if (is_dataset_split(source)) {
    // A dataset split ({"document", "summary"} lines): the tokenizer learns from both sides.
    text_corpus = std::filesystem::path(out) / "corpus.txt";
    // Checked: a write cut short (a full disk) trained the tokenizer on part of the corpus, unsaid.
    AtomicFile text(text_corpus);
    std::vector<data::Example> examples;
    try {
      examples = data::read_examples(source.string());
    } catch (const std::invalid_argument& e) {
      // A pipe's copy is named as the user named the corpus.
      std::string what = e.what();
      for (size_t at = 0; source != corpus && (at = what.find(source.string(), at)) != std::string::npos;) {
        what.replace(at, source.string().size(), corpus);
        at += corpus.size();
      }
      throw std::invalid_argument(what);
    }
    for (const auto& e : examples) {
      const std::string lines = e.document + "\n" + e.summary + "\n";
      text.write(lines.data(), lines.size());
    }
    text.commit();
  }
  const auto lines = scan_lines(text_corpus);
  if (!lines.has_text) {
    throw std::invalid_argument(corpus + " holds no text to train the tokenizer on (only white space)");
  }
  if (lines.too_long > 0) {
    std::cerr << "note: " << lines.too_long << " line(s) of the corpus are longer than " << kMaxSentenceBytes
              << " bytes and left out of the tokenizer's training (SentencePiece takes a line as a sentence): "
                 "break them into paragraphs to have them learnt\n";
  }
  const auto max_sentence = std::clamp(lines.longest, kSentencePieceDefaultMaxSentence, kMaxSentenceBytes);
  train_sentencepiece("--input=" + text_corpus.string() + " --model_prefix=" + out +
                      "/spiece --vocab_size=" + std::to_string(vocab.value_or(2000)) +
                      " --model_type=unigram --character_coverage=1.0 --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1"
                      " --hard_vocab_limit=false --max_sentence_length=" +
                      std::to_string(max_sentence) + " --minloglevel=2");
  for (const auto& made_here : {source, text_corpus}) {
    if (made_here != corpus) std::filesystem::remove(made_here);
  }
  // SentencePiece's trainer leaves its output stream to be flushed when closed, the error dropped: a full
  // disk or a file size limit cuts spiece.model short unsaid. Loaded back as a server would (a file cut at a
  // field's end parses, missing its normalizer), and synced like the files written here.
  const std::filesystem::path model_file = out + "/spiece.model";
  try {
    SentencePieceTokenizer::load(out);
    sync_path(model_file);
  } catch (const std::exception& e) {
    throw std::runtime_error("SentencePiece's trainer did not write " + model_file.string() +
                             " whole (a full disk?): " + e.what());
  }
  const auto sp = SentencePieceProcessor::load(model_file);
  if (sp.vocab_size() < vocab.value_or(2000)) {
    std::cerr << "note: the corpus gives the tokenizer " << sp.vocab_size() << " pieces, fewer than the "
              << vocab.value_or(2000) << " asked (--vocab): a larger corpus gives more\n";
  }
  // + T5's <extra_id_N> sentinels; the t5-small shape keeps T5's 32128 embedding rows (the LM head's
  // real cost) even past a smaller tokenizer, whose vocabulary bounds generation.
  c.vocab_size = std::max<int64_t>(sp.vocab_size() + 100, shape == "t5-small" ? c.vocab_size : 0);
  write_random_model(out, c, seed, init_std);
  write_file_atomically(out + "/tokenizer_config.json", R"({"extra_ids": 100, "model_max_length": 16384})"
                                                        "\n");
  made.keep();
  std::cout << "wrote " << out << " (vocab " << c.vocab_size << ", " << to_string(c.srformer.cross_attention)
            << segment_note << ")\n";
  return 0;
}

}  // namespace srformer::tools
