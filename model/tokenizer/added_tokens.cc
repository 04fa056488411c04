#include "model/tokenizer/added_tokens.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "model/tokenizer/utf8.h"

namespace srformer {

namespace {

// Length of the whitespace run that ends at `end` (not reaching before `begin`).
size_t whitespace_before(std::string_view s, size_t begin, size_t end) {
  size_t pos = end;
  while (pos > begin) {
    size_t start = pos - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    const size_t len = pos - start;
    if (utf8::sequence_length(s, start) != len || !utf8::is_whitespace(utf8::decode_at(s, start, len))) break;
    pos = start;
  }
  return end - pos;
}

size_t whitespace_after(std::string_view s, size_t begin) {
  size_t pos = begin;
  while (pos < s.size()) {
    const size_t len = utf8::sequence_length(s, pos);
    if (len == 0 || !utf8::is_whitespace(utf8::decode_at(s, pos, len))) break;
    pos += len;
  }
  return pos - begin;
}

// Unicode's \w (letters, marks, decimal digits, connector punctuation, joiners), approximated: ASCII
// exactly; past it, everything but whitespace and the punctuation and symbol blocks real text meets
// (typographic quotes and dashes, CJK and full-width punctuation, arrows, math, shapes, emoji).
bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z') || cp == '_';
  if (utf8::is_whitespace(cp)) return false;
  if (cp == 0x200C || cp == 0x200D || cp == 0x203F || cp == 0x2040 || cp == 0x2054) return true;  // joiners, Pc
  constexpr std::pair<char32_t, char32_t> kNotWord[] = {
      {0x00A1, 0x00A9}, {0x00AB, 0x00B4}, {0x00B6, 0x00B9},  {0x00BB, 0x00BF}, {0x00D7, 0x00D7}, {0x00F7, 0x00F7},
      {0x2000, 0x206F}, {0x20A0, 0x20CF}, {0x2190, 0x2BFF},  {0x2E00, 0x2E7F}, {0x3000, 0x3004}, {0x3008, 0x3020},
      {0x30FB, 0x30FB}, {0xFE10, 0xFE19}, {0xFE30, 0xFE6B},  {0xFF01, 0xFF0F}, {0xFF1A, 0xFF20}, {0xFF3B, 0xFF3E},
      {0xFF40, 0xFF40}, {0xFF5B, 0xFF65}, {0x1F000, 0x1FAFF}};
  for (const auto& [first, last] : kNotWord) {
    if (cp >= first && cp <= last) return false;
  }
  return true;
}

// The code point that ends at `end` (none at the start or after an ill-formed byte).
std::optional<char32_t> code_point_before(std::string_view s, size_t end) {
  if (end == 0) return std::nullopt;
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  const size_t len = utf8::sequence_length(s, start);
  if (len != end - start) return std::nullopt;
  return utf8::decode_at(s, start, len);
}

std::optional<char32_t> code_point_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return std::nullopt;
  const size_t len = utf8::sequence_length(s, pos);
  if (len == 0) return std::nullopt;
  return utf8::decode_at(s, pos, len);
}

// A single_word token at `pos` stands as a word: no word character runs on into it at a word-character end.
bool stands_alone(std::string_view text, size_t pos, const AddedToken& t) {
  const auto first = code_point_at(t.content, 0), last = code_point_before(t.content, t.content.size());
  const auto before = code_point_before(text, pos), after = code_point_at(text, pos + t.content.size());
  if (first && is_word_char(*first) && before && is_word_char(*before)) return false;
  if (last && is_word_char(*last) && after && is_word_char(*after)) return false;
  return true;
}

}  // namespace

AddedTokenSplitter::AddedTokenSplitter(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  tokens_.erase(std::remove_if(tokens_.begin(), tokens_.end(), [](const AddedToken& t) { return t.content.empty(); }),
                tokens_.end());
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_first_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
}

std::vector<AddedTokenSplitter::Segment> AddedTokenSplitter::split(std::string_view text) const {
  std::vector<Segment> out;
  size_t plain_begin = 0;  // start of the pending plain segment
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& candidates = by_first_[static_cast<unsigned char>(text[pos])];
    const AddedToken* match = nullptr;
    for (const size_t i : candidates) {
      if (text.compare(pos, tokens_[i].content.size(), tokens_[i].content) == 0 &&
          (!tokens_[i].single_word || stands_alone(text, pos, tokens_[i]))) {
        match = &tokens_[i];
        break;  // longest first
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t plain_end = pos;
    if (match->lstrip) plain_end -= whitespace_before(text, plain_begin, pos);
    if (plain_end > plain_begin) out.push_back({text.substr(plain_begin, plain_end - plain_begin), std::nullopt});
    out.push_back({{}, match->id});
    pos += match->content.size();
    if (match->rstrip) pos += whitespace_after(text, pos);
    plain_begin = pos;
  }
  if (plain_begin < text.size()) out.push_back({text.substr(plain_begin), std::nullopt});
  return out;
}

}  // namespace srformer
