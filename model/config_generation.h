#pragma once
// Which of a checkpoint's two files holds its generation settings, for code that edits them
// (ModelConfig::from_json reads them so).
#include <nlohmann/json.hpp>

namespace srformer {

// Whether transformers 4's generate() takes config.json's (`config`) generation keys over
// generation_config.json's (`generation`): where that file was made from config.json ("_from_model_config":
// true) and config.json sets one of them to other than the defaults (model/config.cc says which).
bool config_json_generation_wins(const nlohmann::json& config, const nlohmann::json& generation, bool bart);

}  // namespace srformer
