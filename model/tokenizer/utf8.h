#pragma once
// Small UTF-8 helpers shared by the tokenizers and the incremental detokenizer.
#include <cstddef>
#include <string>
#include <string_view>

namespace srformer::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed sequence starting at s[pos], or 0 when it is not one (RFC 3629:
// no overlongs, no surrogates, nothing above U+10FFFF).
size_t sequence_length(std::string_view s, size_t pos);

bool is_valid(std::string_view s);

// Replaces every ill-formed subsequence by U+FFFD, one per maximal subpart (the WHATWG / Python /
// Rust from_utf8_lossy convention), so an incomplete trailing character becomes exactly one U+FFFD.
std::string to_valid(std::string_view s);

// Decodes the well-formed sequence at s[pos] (caller checked sequence_length(s, pos) == len > 0).
char32_t decode_at(std::string_view s, size_t pos, size_t len);

void append(std::string& out, char32_t cp);

// Unicode White_Space property (what Rust's char::is_whitespace tests).
bool is_whitespace(char32_t cp);

// Byte length of the trailing run of U+FFFD characters (0 when s does not end with one).
size_t trailing_replacement_bytes(std::string_view s);

}  // namespace srformer::utf8
