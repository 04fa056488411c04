#include "model/tokenizer/document_check.h"

#include "model/tokenizer/utf8.h"

namespace srformer {

bool starts_with_utf16_bom(std::string_view text) {
  return text.size() >= 2 && ((text[0] == '\xFF' && text[1] == '\xFE') || (text[0] == '\xFE' && text[1] == '\xFF'));
}

namespace {

// Characters that show nothing: whitespace, and the zero-width space and byte-order mark, which Unicode
// does not count as White_Space but which a "blank" document made of them is no less.
bool shows_nothing(char32_t cp) { return utf8::is_whitespace(cp) || cp == 0x200B || cp == 0xFEFF; }

// Why the bad sequence at text[i] is there, where it is a known mis-encoding of Unicode: a UTF-16 surrogate
// written as a 3-byte sequence (CESU-8, Java's modified UTF-8: a character above U+FFFF as two halves), or
// modified UTF-8's two-byte NUL. Such text passes for UTF-8 in most places, so the plain refusal puzzles.
std::string mis_encoding(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u; };
  if (byte(0) == 0xED && byte(1) >= 0xA0 && byte(1) <= 0xBF && (byte(2) & 0xC0) == 0x80) {
    const unsigned unit = 0xD000 | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string hex;
    for (int shift = 12; shift >= 0; shift -= 4) hex += kHex[(unit >> shift) & 0xF];
    return ": the UTF-16 surrogate U+" + hex +
           " in three bytes, as CESU-8 and Java's modified UTF-8 write half of a character above U+FFFF; UTF-8 "
           "writes such a character in one 4-byte sequence";
  }
  if (byte(0) == 0xC0 && byte(1) == 0x80) return ": C0 80, Java's modified UTF-8 for NUL, which text does not hold";
  return {};
}

}  // namespace

std::optional<DocumentFault> find_document_fault(std::string_view text) {
  using Kind = DocumentFault::Kind;
  if (text.empty()) return DocumentFault{Kind::kEmpty, 0, "is empty"};
  bool blank = true;
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8::sequence_length(text, i);
    if (len == 0) {
      std::string what = "is not valid UTF-8 (bad byte sequence at byte offset " + std::to_string(i);
      if (starts_with_utf16_bom(text)) {
        what += ": it starts with a UTF-16 byte-order mark, the text is UTF-16";
      } else {
        what += mis_encoding(text, i);
      }
      return DocumentFault{Kind::kNotUtf8, i, what + ")"};
    }
    if (text[i] == '\0') {
      return DocumentFault{Kind::kNul, i,
                           "contains a NUL byte (at byte offset " + std::to_string(i) +
                               "), which text does not hold (UTF-16 text, or binary data?)"};
    }
    if (blank && !shows_nothing(utf8::decode_at(text, i, len))) blank = false;
    i += len;
  }
  if (blank) return DocumentFault{Kind::kBlank, 0, "contains only whitespace"};
  return std::nullopt;
}

}  // namespace srformer
