#pragma once
// The generation options `srformer summarize` and `srformer eval` take as flags, under srformer-client's
// names: read alike, and set over a model's defaults as the server sets a request's own values.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/generation/options.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/arg_reader.h"

namespace srformer::tools {

struct GenerationFlags {
  std::optional<int64_t> max_new, min_new, beams, groups, returned, no_repeat, top_k, encoder_no_repeat, expected;
  // Read as float32, as the API carries them (ArgReader::float32_value): a value such as 0.448 gives the
  // same beam scores offline and served.
  std::optional<double> length_penalty, diversity, temperature, top_p, rep, min_p, typical_p, epsilon, eta, encoder_rep;
  std::optional<EarlyStopping> early;
  std::optional<bool> sample;
  std::vector<std::string> bad_words;

  // Takes r.arg(), and its value, where it is one of these flags; false (nothing taken) for any other.
  bool read(ArgReader& r);
  // The model's defaults `d` with the given flags over them, refused as the server refuses a request's own
  // values, in the same words: check_given_options, the bad words' limits, validate(), the expected
  // length's range. The seed is the caller's (eval's --seed is its resampling's).
  GenerationOptions over(const GenerationOptions& d, const ModelConfig& c, const Tokenizer& tokenizer) const;
};

}  // namespace srformer::tools
