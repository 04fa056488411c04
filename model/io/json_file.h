#pragma once
// Reading one of the JSON files a model directory or fixture holds (config.json, generation_config.json,
// a shard index, tokenizer files, case.json). Every reader needs the same guards, so they live here:
// a directory in the file's place, nesting deep enough to overflow nlohmann's recursion (json_depth.h),
// a Git LFS pointer where the JSON should be, and an error that names the file.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "model/io/json_depth.h"
#include "model/io/lfs_pointer.h"

namespace srformer {

// Parses `file`, throwing Error(message) when it cannot: `role` ends "FILE is a directory; it must be
// ROLE", and `remedy`, when given, ends the message for a file that is not valid JSON.
template <typename Error>
nlohmann::json read_json_file(const std::filesystem::path& file, const std::string& role,
                              const std::string& remedy = "") {
  if (std::filesystem::is_directory(file)) throw Error(file.string() + " is a directory; it must be " + role);
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error("cannot open " + file.string() + ": " + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("cannot read " + file.string());
  check_json_depth<Error>(text, file.string() + ": ");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    if (auto pointer = lfs_pointer_message(file, text.substr(0, 1024))) throw Error(*pointer);
    throw Error(file.string() + " is not valid JSON (" + e.what() + ")" + (remedy.empty() ? "" : "; " + remedy));
  }
}

}  // namespace srformer
