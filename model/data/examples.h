#pragma once
// Summarization examples in JSONL ({"id", "document", "summary"} per line): the format of
// tools/data/build_dataset.py, read by `srformer eval` and `srformer train`.
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace srformer::data {

struct Example {
  std::string id, document, summary;
};

// Calls fn(object, "file:line") for every non-blank line of `path` (a file or a pipe, read once), which
// must be a JSON object giving each field once. UTF-8 byte-order marks that start a line are skipped (files
// joined with `cat`); lines end in LF or CRLF (CR alone is named in the error). Throws std::invalid_argument naming the
// file and line of the first bad one (and saying to re-encode a file that is not UTF-8).
void for_each_jsonl(const std::string& path, const std::function<void(const nlohmann::json&, const std::string&)>& fn);

// The string field `key` of `j`; throws std::invalid_argument naming `where` when missing or not a string.
std::string string_field(const nlohmann::json& j, const char* key, const std::string& where);

// The "id" field of `j`: a string, or an integer as its decimal text; throws std::invalid_argument naming
// `where` when missing or of another type (a float, a boolean, null, an array or an object).
std::string id_field(const nlohmann::json& j, const std::string& where);

// Every example of `path` (ids must be unique), at most `limit` of them. Throws std::invalid_argument
// for a missing file, bad lines, duplicate ids, an empty file, or documents or summaries (of the first
// `limit`) that are empty, blank or hold a NUL byte (find_document_fault: what the server refuses).
// `ids_past_limit`, when given, gets the ids of the examples after the first `limit` (a pipe is read once).
std::vector<Example> read_examples(const std::string& path, std::optional<int64_t> limit = std::nullopt,
                                   std::vector<std::string>* ids_past_limit = nullptr);

}  // namespace srformer::data
