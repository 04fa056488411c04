#pragma once
// How deeply a JSON text nests its arrays and objects, read without parsing it. nlohmann's dump() and
// destructor recurse once per level: a file of a few hundred KB of brackets overflows the stack (found by
// fuzzing), so files we read are refused past kMaxJsonDepth first. Ours and Hugging Face's nest a few
// levels.
#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace srformer {

inline constexpr size_t kMaxJsonDepth = 64;

inline size_t json_nesting_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// Throws Error(`where` + what is wrong) when `text` nests deeper than kMaxJsonDepth.
template <typename Error>
void check_json_depth(std::string_view text, const std::string& where) {
  if (json_nesting_depth(text) > kMaxJsonDepth) {
    throw Error(where + "nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) +
                " levels, which no model file does: is it damaged?");
  }
}

}  // namespace srformer
