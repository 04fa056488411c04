#pragma once
// Reading a FILE argument, or stdin, alike in srformer-client and the offline tools.
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ios>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

namespace srformer {

// The most read from one FILE or stdin: 2 GiB - 1, the largest message gRPC carries (the server's
// --max-message-bytes goes no higher), so no request could hold more. Read whole without a bound,
// /dev/zero or a mistaken huge file took all the memory there was.
inline constexpr std::uintmax_t kMaxInputBytes = std::numeric_limits<int>::max();

// The bytes of `path`, or of stdin for "-"; more than `max_bytes` of them is an error naming the file, and
// `bound`, where given, what sets the bound (the flag that raises it).
inline std::string read_input(const std::string& path, std::uintmax_t max_bytes = kMaxInputBytes,
                              const std::string& bound = "") {
  // stdin by its name: "cannot read '-': ..." read as a stray dash.
  const auto failure = [&path](const std::string& why) {
    return std::runtime_error("cannot read " + (path == "-" ? std::string("stdin") : "'" + path + "'") + ": " + why);
  };
  const auto too_large = [&] {
    return failure("it holds more than " + std::to_string(max_bytes) + " bytes, the most one input may have" +
                   (!bound.empty()                ? " (" + bound + ")"
                    : max_bytes == kMaxInputBytes ? " (the largest message gRPC carries)"
                                                  : ""));
  };
  std::error_code ec;
  if (path != "-" && std::filesystem::is_directory(path, ec)) throw failure("it is a directory");
  // A regular file says its size: refused before any of it is read.
  if (path != "-" && std::filesystem::is_regular_file(path, ec)) {
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec && size > max_bytes) throw too_large();
  }
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) throw failure(std::strerror(errno));
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string text;
  std::array<char, 1 << 16> chunk;
  errno = 0;
  try {
    // In chunks, so that a device or pipe without end (/dev/zero) stops at the bound.
    while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0) {
      const auto got = static_cast<std::size_t>(in.gcount());
      if (text.size() + got > max_bytes) throw too_large();
      text.append(chunk.data(), got);
    }
  } catch (const std::ios_base::failure&) {
    in.setstate(std::ios::badbit);
  }
  // A read that fails partway (EIO) leaves the stream bad (or throws from its buffer, worded
  // "basic_filebuf::underflow error reading the file" without the file's name). std::cin, which reads
  // through stdio, only ends: its error (EBADF for a stdin that is closed, EIO) is stdin's, and was read
  // as the end of the document, an empty one sent.
  if (in.bad() || (path == "-" && std::ferror(stdin))) throw failure(errno != 0 ? std::strerror(errno) : "read error");
  return text;
}

// A document's text: the bytes of `path` (or stdin) without a leading UTF-8 byte-order mark, which marks
// the file's encoding (Windows editors write one) and is no part of the text. The client and
// `srformer summarize` read documents alike, so that the server and the offline tool see the same text.
inline std::string read_document(const std::string& path, std::uintmax_t max_bytes = kMaxInputBytes,
                                 const std::string& bound = "") {
  constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
  std::string text = read_input(path, max_bytes, bound);
  if (std::string_view(text).substr(0, kUtf8Bom.size()) == kUtf8Bom) text.erase(0, kUtf8Bom.size());
  return text;
}

}  // namespace srformer
