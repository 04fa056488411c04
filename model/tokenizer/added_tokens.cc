#include "model/tokenizer/added_tokens.h"

#include <algorithm>
#include <iterator>
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

// Unicode's \w as Hugging Face's single_word check sees it (the regex crate's: Alphabetic, marks, decimal
// digits, connector punctuation, joiners), recorded from the reference by tests/tokenizer/word_char_table.js.
bool is_word_char(char32_t cp) {
  static constexpr std::pair<char32_t, char32_t> kWord[] = {
#include "model/tokenizer/word_chars.inc"
  };
  const auto* it = std::upper_bound(std::begin(kWord), std::end(kWord), cp,
                                    [](char32_t c, const auto& range) { return c < range.first; });
  return it != std::begin(kWord) && cp <= std::prev(it)->second;
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

// Hugging Face (added_vocabulary.rs, find_matches): a single_word match stands where no word character is
// just before or just after it, whatever characters the token itself starts and ends with.
bool stands_alone(std::string_view text, size_t pos, size_t len) {
  const auto before = code_point_before(text, pos), after = code_point_at(text, pos + len);
  return !(before && is_word_char(*before)) && !(after && is_word_char(*after));
}

}  // namespace

AddedTokenSplitter::AddedTokenSplitter(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  tokens_.erase(std::remove_if(tokens_.begin(), tokens_.end(), [](const AddedToken& t) { return t.content.empty(); }),
                tokens_.end());
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.normalized != b.normalized ? b.normalized : a.content.size() > b.content.size();
  });
  const auto first_normalized = static_cast<size_t>(
      std::find_if(tokens_.begin(), tokens_.end(), [](const AddedToken& t) { return t.normalized; }) - tokens_.begin());
  raw_.end = normalized_.begin = first_normalized;
  normalized_.end = tokens_.size();
  for (Pass* pass : {&raw_, &normalized_}) {
    for (size_t i = pass->begin; i < pass->end; ++i) {
      pass->by_first[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
    }
  }
}

std::vector<AddedTokenSplitter::Segment> AddedTokenSplitter::split(std::string_view text) const {
  std::vector<Segment> out;
  split_pass(raw_, text, out);
  if (normalized_.begin == normalized_.end) return out;
  // Each plain piece is a text of its own to the second pass: its ends are a single_word token's word
  // boundaries, and whitespace is stripped within it alone.
  std::vector<Segment> both;
  for (const auto& seg : out) {
    if (seg.id) {
      both.push_back(seg);
    } else {
      split_pass(normalized_, seg.text, both);
    }
  }
  return both;
}

void AddedTokenSplitter::split_pass(const Pass& pass, std::string_view text, std::vector<Segment>& out) const {
  size_t plain_begin = 0;  // start of the pending plain segment
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& candidates = pass.by_first[static_cast<unsigned char>(text[pos])];
    const AddedToken* match = nullptr;
    for (const size_t i : candidates) {
      if (text.compare(pos, tokens_[i].content.size(), tokens_[i].content) == 0) {
        match = &tokens_[i];
        break;  // longest first
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    // A single_word match that does not stand alone stays text, and so does all it covered: Hugging Face's
    // leftmost-longest search resumes after it, trying neither shorter tokens here nor any inside it.
    if (match->single_word && !stands_alone(text, pos, match->content.size())) {
      pos += match->content.size();
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
}

}  // namespace srformer
