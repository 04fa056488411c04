// Log messages quote client text (request ids, model names, error details): escaped, it can neither
// break a JSON log line nor start a forged line of its own.
#include "server/logging.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace srformer::server {
namespace {

TEST(LogEscaping, JsonLinesStayOneValidObjectWhateverTheMessageHolds) {
  const std::string message = "request a\"b\\c\nd\te\r\x01\x7F f: caf\xC3\xA9 \xF0\x9F\x98\x80";
  const std::string escaped = escape_log_message(message, true);
  EXPECT_EQ(escaped, "request a\\\"b\\\\c\\nd\\te\\r\\u0001\\u007f f: caf\xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(escaped.find('\n'), std::string::npos);
  // Inside the server's JSON pattern, the line parses back to the message, byte for byte.
  const auto j = nlohmann::json::parse(R"({"msg":")" + escaped + R"("})");
  EXPECT_EQ(j.at("msg").get<std::string>(), message);
}

TEST(LogEscaping, TextLinesEscapeControlCharactersOnly) {
  EXPECT_EQ(escape_log_message("id \"x\" \\ 5\nforged\x1B[31m", false), "id \"x\" \\ 5\\nforged\\x1b[31m");
  EXPECT_EQ(escape_log_message("plain text, unchanged: \xC3\xA9", false), "plain text, unchanged: \xC3\xA9");
  EXPECT_EQ(escape_log_message("", true), "");
}

}  // namespace
}  // namespace srformer::server
