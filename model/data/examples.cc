#include "model/data/examples.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include "model/tokenizer/document_check.h"

namespace srformer::data {

namespace {

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

// What a line that is no JSON says the file is instead ("; the file is gzip-compressed: ..."), or "". The
// first line (`first`) tells a compressed file; any line, a UTF-16 one (by its mark), one in an 8-bit
// encoding or one whose lines end in CR alone.
std::string file_hint(std::string_view line, bool first, const nlohmann::json::parse_error& e) {
  const auto starts = [&](std::string_view magic) { return line.substr(0, magic.size()) == magic; };
  using Format = std::tuple<std::string_view, const char*, const char*>;  // magic, name, decompressor
  for (const auto& [magic, name, cat] :
       {Format{"\x1F\x8B", "gzip", "zcat"}, Format{"\xFD\x37\x7A\x58\x5A", "xz", "xzcat"},
        Format{"BZh", "bzip2", "bzcat"}, Format{"\x28\xB5\x2F\xFD", "zstd", "zstdcat"}}) {
    if (first && starts(magic)) {
      return std::string("; the file is ") + name + "-compressed: decompress it, or pass <(" + cat + " FILE)";
    }
  }
  // A byte-order mark (also on a later line: a UTF-16 file joined to others with `cat`), or the NUL byte
  // beside each ASCII character of UTF-16 JSON.
  if (starts_with_utf16_bom(line) || (first && line.size() >= 2 && (line[0] == '\0' || line[1] == '\0'))) {
    return "; the file is UTF-16: re-encode it as UTF-8 (iconv -f UTF-16 -t UTF-8)";
  }
  // A carriage return between values: lines ended by CR alone, which getline() does not split (a CR before
  // the newline, or at the end, is JSON whitespace and parses). One inside a string is another fault.
  const auto last = line.find_last_not_of(" \t\r");
  if (last != std::string_view::npos && line.substr(0, last).find('\r') != std::string_view::npos &&
      std::string_view(e.what()).find("U+000D") == std::string_view::npos) {
    return "; its lines end in a carriage return alone (classic Mac OS): convert them to newlines (tr '\\r' "
           "'\\n' < FILE > NEW.jsonl)";
  }
  if (std::string_view(e.what()).find("ill-formed UTF-8") != std::string_view::npos) {
    return "; the file must be UTF-8: re-encode it (iconv -f ENCODING -t UTF-8)";
  }
  // A first line of nothing but an opening bracket or brace ("[", "{", "[{"): one JSON document over many
  // lines (json.dump(rows, f, indent=2), `jq .`), which nlohmann calls only an "unexpected end of input".
  const auto opening = line.find_first_not_of(" \t\r");
  if (first && opening != std::string_view::npos && line.find_first_not_of(" \t\r[{") == std::string_view::npos) {
    return "; the file looks like one JSON document over several lines, not JSON Lines (one object per line): "
           "rewrite it with jq -c " +
           std::string(line[opening] == '[' ? "'.[]'" : ".") + " FILE > NEW.jsonl";
  }
  return "";
}

}  // namespace

void for_each_jsonl(const std::string& path, const std::function<void(const nlohmann::json&, const std::string&)>& fn) {
  // Read once, front to back: a pipe (`<(jq ...)`, /dev/stdin) does as well as a file. It was refused as
  // "no such file".
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    throw std::invalid_argument("cannot read '" + path + "': no such file");
  }
  if (std::filesystem::is_directory(status)) {
    throw std::invalid_argument("cannot read '" + path + "': a directory; pass a JSONL file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read '" + path + "': " + std::strerror(errno));
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    // Files joined with `cat` leave each one's UTF-8 byte-order mark at the start of a later line, on a line
    // of its own (an empty file) or twice: nlohmann skips one at the start of a line, not more.
    size_t marks = 0;
    while (line.compare(marks, kUtf8Bom.size(), kUtf8Bom) == 0) marks += kUtf8Bom.size();
    line.erase(0, marks);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    // A key given twice in the line's object kept its last value without a word (as Python's json does):
    // which of two summaries was meant is not for the reader to guess.
    std::set<std::string> keys;
    const auto no_repeated_keys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      if (depth == 1 && event == nlohmann::json::parse_event_t::key && !keys.insert(parsed.get<std::string>()).second) {
        throw std::invalid_argument(where + ": field \"" + parsed.get<std::string>() +
                                    "\" appears twice in the line's object; keep one");
      }
      return true;
    };
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line, no_repeated_keys);
    } catch (const nlohmann::json::parse_error& e) {
      // nlohmann's words name the byte, not the cause: a compressed file, or one in another encoding, fails
      // on its first line.
      throw std::invalid_argument(where + ": not valid JSON (" + e.what() + ")" + file_hint(line, n == 1, e));
    } catch (const nlohmann::json::out_of_range& e) {
      // A number past double's range (1e999, a 400-digit integer): valid JSON that nlohmann refuses with
      // another exception than parse_error, which left the file and line unnamed.
      throw std::invalid_argument(where + ": a number past the range of a double (" + e.what() + ")");
    }
    if (!j.is_object()) {
      // A JSON array of the objects on one line (json.dump(rows, f)) is the whole data set in the wrong shape.
      const bool array_of_objects = j.is_array() && !j.empty() && j.front().is_object();
      throw std::invalid_argument(where + ": expected a JSON object per line" +
                                  (array_of_objects ? "; this line is an array of objects: write one object per line "
                                                      "(jq -c '.[]' FILE > NEW.jsonl)"
                                                    : ""));
    }
    fn(j, where);
  }
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw std::invalid_argument(where + ": missing field \"" + key + "\"");
  if (!it->is_string()) throw std::invalid_argument(where + ": field \"" + key + "\" must be a string");
  return it->get<std::string>();
}

std::string id_field(const nlohmann::json& j, const std::string& where) {
  const auto it = j.find("id");
  if (it == j.end()) throw std::invalid_argument(where + ": missing field \"id\"");
  if (it->is_string()) return it->get<std::string>();
  // Datasets often number their examples. Stored as the decimal text, so 7 and "7" are one id, written
  // back (eval's predictions.jsonl) as the string "7".
  if (it->is_number_unsigned()) return std::to_string(it->get<uint64_t>());
  if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
  // 7.0 and 1e3 too: a float's text is not the id a reader wrote (nlohmann writes 1e3 back as 1000.0).
  const char* got = it->is_number()    ? "a number with a fraction or exponent"
                    : it->is_boolean() ? "a boolean"
                    : it->is_null()    ? "null"
                    : it->is_array()   ? "an array"
                                       : "an object";
  throw std::invalid_argument(where + ": field \"id\" must be a string or an integer, not " + got);
}

std::vector<Example> read_examples(const std::string& path, std::optional<int64_t> limit,
                                   std::vector<std::string>* ids_past_limit) {
  std::vector<Example> out;
  std::map<std::string, std::string> seen;  // id -> where
  // An empty or blank text (or one with a NUL byte) was read as any other: eval summarized a document the
  // server refuses and scored an empty reference 0 into the mean, train taught an immediate end. Such lines
  // (of the first `limit`) are counted, so that one run says how many there are.
  std::string first_fault;
  int64_t faults = 0;
  for_each_jsonl(path, [&](const nlohmann::json& j, const std::string& where) {
    Example e{id_field(j, where), string_field(j, "document", where), string_field(j, "summary", where)};
    const auto [it, fresh] = seen.emplace(e.id, where);
    if (!fresh) throw std::invalid_argument(where + ": duplicate id '" + e.id + "' (first at " + it->second + ")");
    const bool used = !limit || static_cast<int64_t>(out.size()) < *limit;
    const char* field = "document";
    auto fault = used ? find_document_fault(e.document) : std::nullopt;
    if (used && !fault) {
      fault = find_document_fault(e.summary);
      field = "summary";
    }
    if (fault && faults++ == 0) first_fault = where + ": the " + field + " " + fault->what;
    out.push_back(std::move(e));
  });
  if (faults > 0) {
    throw std::invalid_argument(first_fault +
                                (faults > 1 ? " (and " + std::to_string(faults - 1) + " more such lines)" : "") +
                                "; fix or remove such lines (each example needs a document to summarize and a "
                                "summary to train on or score against)");
  }
  if (out.empty()) {
    throw std::invalid_argument("'" + path + "' has no examples (expected {\"id\", \"document\", \"summary\"} lines)");
  }
  if (limit && static_cast<int64_t>(out.size()) > *limit) {
    if (ids_past_limit != nullptr) {
      for (auto it = out.begin() + *limit; it != out.end(); ++it) ids_past_limit->push_back(std::move(it->id));
    }
    out.resize(static_cast<size_t>(*limit));
  }
  return out;
}

}  // namespace srformer::data
