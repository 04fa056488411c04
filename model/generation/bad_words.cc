#include "model/generation/bad_words.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "model/tokenizer/document_check.h"

namespace srformer {

void add_bad_words(GenerationOptions& options, const std::vector<std::string>& words, const Tokenizer& tokenizer,
                   int64_t vocab, const std::string& list, const std::function<std::string(size_t)>& entry) {
  const auto refuse = [](const std::string& message) { throw std::invalid_argument(message); };
  if (words.size() > kMaxBadWords) {
    refuse(list + " holds " + std::to_string(words.size()) + " words; at most " + std::to_string(kMaxBadWords) +
           " may be banned in one request: ban fewer");
  }
  std::set<std::vector<int64_t>> added(options.bad_words_ids.begin(), options.bad_words_ids.end());
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (const auto fault = find_document_fault(word)) {
      refuse(entry(i) + " " + fault->what +
             (fault->kind == DocumentFault::Kind::kNotUtf8 ? "; re-encode it as UTF-8"
                                                           : "; give a word or phrase to ban, or leave it out"));
    }
    if (word.size() > kMaxBadWordBytes) {
      refuse(entry(i) + " is " + std::to_string(word.size()) + " bytes; at most " + std::to_string(kMaxBadWordBytes) +
             ": ban a shorter word or phrase");
    }
    const std::string named = entry(i) + " \"" + word + "\"";
    bool any = false;
    for (const bool after_space : {true, false}) {
      std::vector<int64_t> ids = tokenizer.encode_word(word, after_space);
      if (ids.empty()) continue;
      any = true;
      if (ids.size() > kMaxBadWordTokens) {
        refuse(named + " is " + std::to_string(ids.size()) + " tokens with this model's tokenizer; at most " +
               std::to_string(kMaxBadWordTokens) + ": ban a shorter phrase");
      }
      for (const int64_t id : ids) {
        if (is_eos(options, id)) {
          refuse(named + " holds the end-of-sequence token '" + tokenizer.id_to_token(id) + "' (id " +
                 std::to_string(id) +
                 "): banning it would keep the model from ending its summary; leave it out (max_new_tokens bounds "
                 "the length)");
        }
      }
      const bool writable = std::all_of(ids.begin(), ids.end(), [vocab](int64_t id) { return id >= 0 && id < vocab; });
      if (writable && added.insert(ids).second) options.bad_words_ids.push_back(std::move(ids));
    }
    if (!any) refuse(named + " gives no tokens with this model's tokenizer; leave it out");
  }
}

}  // namespace srformer
