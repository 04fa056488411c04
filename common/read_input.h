#pragma once
// Reading a FILE argument, or stdin, alike in srformer-client and the offline tools.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>

namespace srformer {

// The bytes of `path`, or of stdin for "-".
inline std::string read_input(const std::string& path) {
  const auto failure = [&path](const std::string& why) {
    return std::runtime_error("cannot read '" + path + "': " + why);
  };
  std::error_code ec;
  if (path != "-" && std::filesystem::is_directory(path, ec)) throw failure("it is a directory");
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) throw failure(std::strerror(errno));
  }
  std::istream& in = path == "-" ? std::cin : file;
  errno = 0;
  try {
    return std::string(std::istreambuf_iterator<char>(in), {});
  } catch (const std::exception&) {
    // A read that fails partway (EIO) throws from the stream buffer, worded "basic_filebuf::underflow
    // error reading the file" without the file's name.
    throw failure(errno != 0 ? std::strerror(errno) : "read error");
  }
}

// A document's text: the bytes of `path` (or stdin) without a leading UTF-8 byte-order mark, which marks
// the file's encoding (Windows editors write one) and is no part of the text. The client and
// `srformer summarize` read documents alike, so that the server and the offline tool see the same text.
inline std::string read_document(const std::string& path) {
  constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
  std::string text = read_input(path);
  if (std::string_view(text).substr(0, kUtf8Bom.size()) == kUtf8Bom) text.erase(0, kUtf8Bom.size());
  return text;
}

}  // namespace srformer
