#include "model/tokenizer/byte_level_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <climits>
#include <cstdio>
#include <functional>
#include <mutex>
#include <queue>
#include <stdexcept>

#include "model/tokenizer/utf8.h"

namespace srformer {

namespace {

// GPT-2's pre-tokenization: contractions, letter runs, digit runs, other-symbol runs (each with one
// optional leading space), then whitespace (a run before a non-space keeps its last space for the word).
// \s as Hugging Face's (Oniguruma's White_Space): PCRE2's \s also takes U+180E (Mongolian vowel separator,
// whitespace before Unicode 6.3), which HF leaves to the symbol runs, so \s is written [^\S\x{180E}].
// The symbol run's group is possessive (nothing after it could ask it to give characters back): the JIT
// keeps a backtracking frame for each pass of a plain repeated group, and ran out of stack ("JIT stack
// limit reached", the request refused) at 1365 symbols in a row, a line of dashes or underscores.
// LETTERS and NUMBERS: \p{L} and \p{N} with what Hugging Face's Unicode tables add to PCRE2's (gpt2_regex()).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?[LETTERS]+| ?[NUMBERS]+| ?(?:[^\sLETTERSNUMBERS]|\x{180E})++|[^\S\x{180E}]+(?![\S\x{180E}])|[^\S\x{180E}]+)";

constexpr size_t kCacheLimit = 1 << 16;
// Only words shorter than this are cached (Hugging Face's BPE bounds its cache's words too): a long word is rarely
// met twice, and caching each one held its bytes and ids until 65536 words later, so documents with
// distinct long runs of letters (DNA, hex dumps) grew the server by about 9 bytes per byte sent.
constexpr size_t kCacheMaxWordBytes = 256;
constexpr int64_t kMaxTokenIds = int64_t{1} << 24;

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

// The code points of `table` that PCRE2's `property` class does not match, as class ranges ("\x{1C89}-\x{1C8A}").
template <size_t N>
std::string missing_from(const char* property, const std::pair<char32_t, char32_t> (&table)[N]) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  const std::string outside = std::string("[^") + property + "]";
  const std::unique_ptr<pcre2_code, CodeDeleter> re(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(outside.c_str()),
                                                                  PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                                                                  &err_offset, nullptr));
  if (!re) throw std::runtime_error("cannot compile " + outside + " (PCRE2 error " + std::to_string(err) + ")");
  pcre2_jit_compile(re.get(), PCRE2_JIT_COMPLETE);
  const std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create_from_pattern(re.get(), nullptr));
  std::string out;
  char32_t run_first = 0, run_last = 0;
  bool in_run = false;
  const auto flush = [&] {
    if (!in_run) return;
    const auto hex = [](char32_t cp) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\x{%X}", static_cast<unsigned>(cp));
      return std::string(buf);
    };
    out += run_first == run_last ? hex(run_first) : hex(run_first) + "-" + hex(run_last);
    in_run = false;
  };
  for (const auto& [first, last] : table) {
    std::string text;
    for (char32_t cp = first; cp <= last; ++cp) utf8::append(text, cp);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    for (size_t offset = 0; offset < text.size();) {
      if (pcre2_match(re.get(), subject, text.size(), offset, PCRE2_NO_UTF_CHECK, md.get(), nullptr) < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      const char32_t cp = utf8::decode_at(text, ov[0], ov[1] - ov[0]);
      if (!in_run || cp != run_last + 1) {
        flush();
        run_first = cp;
        in_run = true;
      }
      run_last = cp;
      offset = ov[1];
    }
  }
  flush();
  return out;
}

// The code points Hugging Face's ByteLevel pre-tokenizer counts as letters and as numbers (generated from it by
// tests/tokenizer/letter_number_table.js).
constexpr std::pair<char32_t, char32_t> kLetters[] = {
#include "model/tokenizer/gpt2_letters.inc"
};
constexpr std::pair<char32_t, char32_t> kNumbers[] = {
#include "model/tokenizer/gpt2_numbers.inc"
};

// kGpt2Pattern with \p{L} and \p{N} and, beside them, the code points of kLetters and kNumbers that this
// PCRE2's older Unicode tables leave out (Debian 12's 10.42 has Unicode 14, Hugging Face's Oniguruma 16: CJK
// extensions H and I, Kawi, Garay, Latin and Cyrillic additions). Worked out once per process: the full tables
// as classes cost 25 times the time on CJK text, 700 ranges to try for each character. A PCRE2 with newer tables
// than Hugging Face's would count letters it does not (nothing here takes them away).
const std::string& gpt2_regex() {
  static const std::string pattern = [] {
    const std::string letters = "\\p{L}" + missing_from("\\p{L}", kLetters);
    const std::string numbers = "\\p{N}" + missing_from("\\p{N}", kNumbers);
    std::string p = kGpt2Pattern;
    for (const auto& [name, value] : {std::pair<std::string, std::string>{"LETTERS", letters}, {"NUMBERS", numbers}}) {
      for (size_t at = p.find(name); at != std::string::npos; at = p.find(name, at + value.size())) {
        p.replace(at, name.size(), value);
      }
    }
    return p;
  }();
  return pattern;
}

uint64_t pair_key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

}  // namespace

// GPT-2's reversible byte -> code point map: printable Latin-1 bytes map to themselves, the rest to
// U+0100 onwards, so every byte string becomes printable text without spaces or control characters.
std::array<char32_t, 256> byte_to_code_point() {
  std::array<char32_t, 256> map{};
  std::array<bool, 256> direct{};
  for (int b = 0; b < 256; ++b) direct[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) map[b] = direct[b] ? static_cast<char32_t>(b) : next++;
  return map;
}

std::array<std::string, 256> byte_level_symbols() {
  const auto cps = byte_to_code_point();
  std::array<std::string, 256> symbols;
  for (int b = 0; b < 256; ++b) utf8::append(symbols[b], cps[b]);
  return symbols;
}

struct ByteLevelBpeTokenizer::Impl {
  std::unordered_map<std::string, int64_t> vocab;
  std::vector<std::string> id_to_token;
  std::vector<bool> special;
  std::array<std::string, 256> byte_symbol;  // byte -> its code point, UTF-8 encoded
  std::array<int64_t, 256> byte_id{};
  std::array<int16_t, 324> code_point_byte{};                        // inverse map, -1 when not a byte symbol
  std::unordered_map<uint64_t, std::pair<int32_t, int64_t>> merges;  // (left, right) -> (rank, merged id)
  std::unique_ptr<pcre2_code, CodeDeleter> regex;
  AddedTokenSplitter splitter;
  std::optional<int64_t> bos, eos, pad, unk;
  bool add_prefix_space = false;
  bool add_bos_eos = true;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache;

  std::vector<int64_t> bpe(std::string_view word) const;
  // prefix_space: add_prefix_space's space before text that starts with none.
  void encode_plain(std::string_view text, bool prefix_space, pcre2_match_data* md, TokenIds& out) const;
  // encode() with or without <s> ... </s>; first_prefix_space: encode_plain's prefix_space for a plain text at
  // the start (the rest get add_prefix_space's).
  TokenIds encode(std::string_view text, bool specials, bool first_prefix_space) const;
  std::optional<int64_t> find(const std::string& token) const {
    const auto it = vocab.find(token);
    return it == vocab.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
};

// The lowest-ranked adjacent pair is merged first, the leftmost of equal ranks first, until no pair has
// a merge: Hugging Face's order (and GPT-2's, for any merges file that creates a token before it uses
// it). Symbols form a linked list over the word's bytes and the candidate pairs a heap, so a word of n
// bytes takes O(n log n): rescanning every pair after each merge took minutes for a 1 MB word, which a
// client could send to hold a core.
std::vector<int64_t> ByteLevelBpeTokenizer::Impl::bpe(std::string_view word) const {
  struct Symbol {
    int64_t id;
    int32_t prev, next;  // -1: none
    bool alive = true;
  };
  struct Candidate {
    int32_t rank, left;         // the pair starting at symbol `left`
    int64_t left_id, right_id;  // what it was made of (stale once either symbol changed)
    int64_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  for (int32_t i = 0; i < n; ++i)
    syms.push_back({byte_id[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1});
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](int32_t left) {
    if (left < 0 || syms[left].next < 0) return;
    const int64_t a = syms[left].id, b = syms[syms[left].next].id;
    if (const auto it = merges.find(pair_key(a, b)); it != merges.end()) {
      heap.push({it->second.first, left, a, b, it->second.second});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = syms[c.left];
    if (!left.alive || left.id != c.left_id || left.next < 0 || syms[left.next].id != c.right_id) continue;
    Symbol& right = syms[left.next];
    left.id = c.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }
  std::vector<int64_t> out;
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
  return out;
}

void ByteLevelBpeTokenizer::Impl::encode_plain(std::string_view text, bool prefix_space, pcre2_match_data* md,
                                               TokenIds& out) const {
  std::string prefixed;
  if (prefix_space && !text.empty() && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset < text.size()) {
    // Valid UTF-8 was checked once by the caller; re-checking per match would make this quadratic.
    const int rc = pcre2_match(regex.get(), subject, text.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) {
      if (rc == PCRE2_ERROR_NOMATCH) break;
      std::array<PCRE2_UCHAR, 256> msg{};
      pcre2_get_error_message(rc, msg.data(), msg.size());
      throw std::runtime_error(std::string("byte-level BPE pre-tokenizer failed: ") +
                               reinterpret_cast<const char*>(msg.data()));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t begin = ov[0], end = ov[1];
    if (end <= begin) {  // cannot happen with this pattern; guard against an endless loop
      ++offset;
      continue;
    }
    const std::string_view word = text.substr(begin, end - begin);
    offset = end;
    if (word.size() >= kCacheMaxWordBytes) {
      const auto ids = bpe(word);
      out.insert(out.end(), ids.begin(), ids.end());
      continue;
    }
    const std::string key(word);
    {
      std::lock_guard<std::mutex> lock(cache_mutex);
      if (const auto it = cache.find(key); it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    auto ids = bpe(word);
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cache.size() >= kCacheLimit) cache.clear();
    cache.emplace(key, std::move(ids));
  }
}

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(ByteLevelBpeConfig config) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.vocab = std::move(config.vocab);
  m.add_prefix_space = config.add_prefix_space;
  // An added token the vocabulary has keeps the vocabulary's id, as in Hugging Face (which warns): the entry's
  // own id made another token special, or lay past the tables sized below.
  for (auto& t : config.added_tokens) t.id = m.vocab.emplace(t.content, t.id).first->second;
  int64_t size = 0;
  for (const auto& [token, id] : m.vocab) {
    // Tables are sized by the largest id: one far past any model's vocabulary (the largest hold ~256k)
    // is a damaged file, not a reason to allocate gigabytes.
    if (id < 0 || id >= kMaxTokenIds) {
      throw std::invalid_argument("token '" + token + "' has id " + std::to_string(id) + ", outside [0, " +
                                  std::to_string(kMaxTokenIds) + "): is the vocabulary file damaged?");
    }
    size = std::max(size, id + 1);
  }
  m.id_to_token.resize(static_cast<size_t>(size));
  m.special.assign(static_cast<size_t>(size), false);
  for (const auto& [token, id] : m.vocab) m.id_to_token[static_cast<size_t>(id)] = token;
  for (const auto& t : config.added_tokens) m.special[static_cast<size_t>(t.id)] = t.special;

  const auto cps = byte_to_code_point();
  m.code_point_byte.fill(-1);
  for (int b = 0; b < 256; ++b) {
    utf8::append(m.byte_symbol[b], cps[b]);
    m.code_point_byte[cps[b]] = static_cast<int16_t>(b);
    const auto id = m.find(m.byte_symbol[b]);
    if (!id) {
      throw std::invalid_argument("the vocabulary lacks the byte-level symbol for byte " + std::to_string(b) + " ('" +
                                  m.byte_symbol[b] + "'): it is not a GPT-2 style byte-level BPE vocabulary");
    }
    m.byte_id[b] = *id;
  }

  m.merges.reserve(config.merges.size());
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [left, right] = config.merges[rank];
    const auto a = m.find(left), b = m.find(right), merged = m.find(left + right);
    if (!a || !b || !merged) {
      throw std::invalid_argument("merge " + std::to_string(rank + 1) + " ('" + left + " " + right +
                                  "') uses a token missing from the vocabulary");
    }
    m.merges.emplace(pair_key(*a, *b), std::make_pair(static_cast<int32_t>(rank), *merged));
  }

  int err = 0;
  PCRE2_SIZE err_offset = 0;
  const std::string& pattern = gpt2_regex();
  m.regex.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                              &err_offset, nullptr));
  if (!m.regex)
    throw std::runtime_error("cannot compile the GPT-2 pre-tokenization regex (PCRE2 error " + std::to_string(err) +
                             ")");
  pcre2_jit_compile(m.regex.get(), PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter

  m.bos = m.find(config.bos_token);
  m.eos = m.find(config.eos_token);
  m.pad = m.find(config.pad_token);
  m.unk = m.find(config.unk_token);
  m.add_bos_eos = config.add_bos_eos && m.bos && m.eos;
  m.splitter = AddedTokenSplitter(std::move(config.added_tokens));
}

ByteLevelBpeTokenizer::~ByteLevelBpeTokenizer() = default;

TokenIds ByteLevelBpeTokenizer::Impl::encode(std::string_view text, bool specials, bool first_prefix_space) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::to_valid(text);
    text = repaired;
  }
  const std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(regex.get(), nullptr));
  if (!md) throw std::bad_alloc();
  TokenIds ids;
  ids.reserve(text.size() / 3 + 2);
  const bool wrap = specials && add_bos_eos;
  if (wrap) ids.push_back(*bos);
  for (const auto& seg : splitter.split(text)) {
    if (seg.id) {
      ids.push_back(*seg.id);
    } else {
      encode_plain(seg.text, seg.text.data() == text.data() ? first_prefix_space : add_prefix_space, md.get(), ids);
    }
  }
  if (wrap) ids.push_back(*eos);
  return ids;
}

TokenIds ByteLevelBpeTokenizer::encode(std::string_view text) const {
  return impl_->encode(text, /*specials=*/true, impl_->add_prefix_space);
}

TokenIds ByteLevelBpeTokenizer::encode_word(std::string_view word, bool after_space) const {
  // After a space: " word" (Hugging Face's add_prefix_space=True, which its docs ask bad words to be
  // tokenized with); otherwise the word alone, with no prefix space even where the tokenizer adds one.
  if (after_space && !word.empty() && word.front() != ' ') return impl_->encode(" " + std::string(word), false, false);
  return impl_->encode(word, /*specials=*/false, /*first_prefix_space=*/false);
}

std::string ByteLevelBpeTokenizer::decode_raw(const TokenIds& ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string bytes;
  for (const int64_t id : ids) {
    check_id(id);
    const auto i = static_cast<size_t>(id);
    const std::string& token = m.id_to_token[i];
    if (m.special[i] && skip_special) continue;
    // Hugging Face's ByteLevel decoder, token by token, added tokens too: one whose every character is a byte
    // symbol gives those bytes ("Ġword" " word", "<s>" itself, "é" the lone byte 0xE9), any other its own text
    // ("日本", "a b"). Added tokens given as their content made an added "Ġword" "Ġword".
    const size_t start = bytes.size();
    bool all_symbols = true;
    for (size_t pos = 0; pos < token.size() && all_symbols;) {
      const size_t len = utf8::sequence_length(token, pos);
      const char32_t cp = len == 0 ? 0xFFFD : utf8::decode_at(token, pos, len);
      all_symbols = cp < m.code_point_byte.size() && m.code_point_byte[cp] >= 0;
      if (all_symbols) bytes.push_back(static_cast<char>(m.code_point_byte[cp]));
      pos += std::max<size_t>(len, 1);
    }
    if (!all_symbols) bytes.replace(start, std::string::npos, token);
  }
  return utf8::is_valid(bytes) ? bytes : utf8::to_valid(bytes);
}

int64_t ByteLevelBpeTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->id_to_token.size()); }

std::optional<int64_t> ByteLevelBpeTokenizer::token_to_id(std::string_view token) const {
  return impl_->find(std::string(token));
}

void ByteLevelBpeTokenizer::check_id(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw std::invalid_argument("token id " + std::to_string(id) + " is outside the tokenizer vocabulary [0, " +
                                std::to_string(vocab_size()) + ")");
  }
}

std::string ByteLevelBpeTokenizer::id_to_token(int64_t id) const {
  check_id(id);
  return impl_->id_to_token[static_cast<size_t>(id)];
}

bool ByteLevelBpeTokenizer::is_special(int64_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[static_cast<size_t>(id)];
}

size_t ByteLevelBpeTokenizer::cached_words() const {
  std::lock_guard<std::mutex> lock(impl_->cache_mutex);
  return impl_->cache.size();
}

std::optional<int64_t> ByteLevelBpeTokenizer::bos_id() const { return impl_->bos; }
std::optional<int64_t> ByteLevelBpeTokenizer::eos_id() const { return impl_->eos; }
std::optional<int64_t> ByteLevelBpeTokenizer::pad_id() const { return impl_->pad; }

}  // namespace srformer
