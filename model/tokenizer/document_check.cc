#include "model/tokenizer/document_check.h"

#include "model/tokenizer/utf8.h"

namespace srformer {

namespace {

bool starts_with_utf16_bom(std::string_view text) {
  return text.size() >= 2 && ((text[0] == '\xFF' && text[1] == '\xFE') || (text[0] == '\xFE' && text[1] == '\xFF'));
}

// Characters that show nothing: whitespace, and the zero-width space and byte-order mark, which Unicode
// does not count as White_Space but which a "blank" document made of them is no less.
bool shows_nothing(char32_t cp) { return utf8::is_whitespace(cp) || cp == 0x200B || cp == 0xFEFF; }

}  // namespace

std::optional<DocumentFault> find_document_fault(std::string_view text) {
  using Kind = DocumentFault::Kind;
  if (text.empty()) return DocumentFault{Kind::kEmpty, 0, "is empty"};
  bool blank = true;
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8::sequence_length(text, i);
    if (len == 0) {
      std::string what = "is not valid UTF-8 (bad byte sequence at byte offset " + std::to_string(i);
      if (starts_with_utf16_bom(text)) what += ": it starts with a UTF-16 byte-order mark, the text is UTF-16";
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
