#pragma once
// The files of a saved model directory besides config.json and the weights.
#include <string>
#include <vector>

namespace srformer {

// What save_model (model/seq2seq.h) takes from its source directory: the tokenizer's files and
// generation_config.json (an earlier one in the target that the source lacks is removed).
const std::vector<std::string>& model_side_files();

}  // namespace srformer
