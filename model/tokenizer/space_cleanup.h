#pragma once
// Hugging Face's clean_up_tokenization_spaces (tokenizer_config.json): the space a decode leaves before
// . ? ! , and English contractions removed, by its ten replacements in its order.
#include <string>
#include <string_view>

namespace srformer {

// " ." -> ".", " ?" -> "?", " !" -> "!", " ," -> ",", " ' " -> "'", " n't" -> "n't", " 'm" -> "'m",
// " 's" -> "'s", " 've" -> "'ve", " 're" -> "'re", each over the whole text, left to right, as Python's
// str.replace.
std::string clean_up_spaces(std::string_view text);

// The same over text that arrives in pieces (a stream of decoded deltas): what it returns, concatenated,
// is clean_up_spaces of all the text. It holds back text from the last point that a replacement could still
// reach over (space_cleanup.cc's can_cut), and looks at each character once.
class SpaceCleanupStream {
 public:
  std::string push(std::string_view text);
  std::string finish();

 private:
  std::string pending_;
};

}  // namespace srformer
