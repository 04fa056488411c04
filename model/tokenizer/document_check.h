#pragma once
// What makes a text unfit to summarize. The server refuses such a document (INVALID_ARGUMENT) and the
// offline tools stop on it alike, so that `srformer summarize` and the server answer the same documents.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace srformer {

struct DocumentFault {
  enum class Kind { kEmpty, kBlank, kNotUtf8, kNul };
  Kind kind = Kind::kEmpty;
  size_t offset = 0;  // kNotUtf8, kNul: the byte where the fault starts
  // What is wrong, as the end of a sentence whose subject is the document: "is empty", "contains only
  // whitespace", "is not valid UTF-8 (bad byte sequence at byte offset 4)", "contains a NUL byte ...".
  std::string what;
};

// The first fault of `text`, or none. Blank: nothing but Unicode White_Space, zero-width spaces and
// byte-order marks. A NUL byte is valid UTF-8 but no text holds one: a UTF-16 file or binary data does.
std::optional<DocumentFault> find_document_fault(std::string_view text);

// Whether `text` starts with a UTF-16 byte-order mark (FF FE or FE FF): the text is UTF-16, not UTF-8.
bool starts_with_utf16_bom(std::string_view text);

}  // namespace srformer
