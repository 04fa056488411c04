#pragma once
// Literal matching of added/special tokens ("</s>", "<mask>", "<extra_id_7>") in input text, the way
// Hugging Face tokenizers split them out before the model sees the text: leftmost match, longest
// token first, optional stripping of the whitespace around a token; tokens that are not `normalized`
// first, then the others between their matches.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace srformer {

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = true;
  bool lstrip = false;  // swallow whitespace just before the token
  bool rstrip = false;  // swallow whitespace just after the token
  // Only as a word of its own: not where a word character (Unicode's \w) is just before or after it,
  // whatever the token's own ends are (Hugging Face's added_vocabulary.rs; added_tokens.cc).
  bool single_word = false;
  // Hugging Face matches the tokens that see the raw text (normalized false) over the whole text first, then
  // those that see the normalized text in the pieces between those matches, each piece on its own.
  bool normalized = false;
};

class AddedTokenSplitter {
 public:
  struct Segment {
    std::string_view text;      // plain text to tokenize (when !id)
    std::optional<int64_t> id;  // a matched added token
  };

  AddedTokenSplitter() = default;
  explicit AddedTokenSplitter(std::vector<AddedToken> tokens);

  // Splits text (valid UTF-8) into plain segments and matched tokens, in order. Empty plain
  // segments are dropped.
  std::vector<Segment> split(std::string_view text) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // One matching pass over tokens_[begin, end): sorted by descending length, indexed by first byte.
  struct Pass {
    size_t begin = 0, end = 0;
    std::array<std::vector<size_t>, 256> by_first;
  };
  void split_pass(const Pass& pass, std::string_view text, std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;  // the raw-text ones, then the normalized ones
  Pass raw_, normalized_;
};

}  // namespace srformer
