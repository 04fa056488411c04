#pragma once
// Walks a subcommand's arguments one at a time; a flag's value is taken on demand, with an error
// naming the flag when it is missing. Shared by the tools/cmd_*.cc parsers.
#include <cctype>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace srformer::tools {

// `text` as a whole 64-bit integer, or an error naming `flag` (std::stoll alone says "stoll" and takes
// "12abc" as 12).
inline int64_t parse_integer(const std::string& flag, const std::string& text) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw std::invalid_argument(flag + " needs an integer, got '" + text + "'");
  return n;
}

class ArgReader {
 public:
  explicit ArgReader(const std::vector<std::string>& args) : args_(args) {}
  // Moves to the next argument; false when there is none.
  bool next() { return ++at_ < args_.size(); }
  const std::string& arg() const { return args_[at_]; }
  // The argument after the current one (the current flag's value).
  const std::string& value() {
    if (at_ + 1 >= args_.size()) throw std::invalid_argument(args_[at_] + " needs a value");
    return args_[++at_];
  }
  // The value as an integer (the option's own checks say what range it takes), or an error naming the flag.
  int64_t integer_value() {
    const auto& flag = arg();  // before value() moves past it
    return parse_integer(flag, value());
  }
  // The value as an integer >= min, or an error naming the flag.
  int64_t int_value(int64_t min) {
    const auto& flag = arg();
    const auto& v = value();
    const int64_t n = parse_integer(flag, v);
    if (n < min) throw std::invalid_argument(flag + " needs an integer >= " + std::to_string(min) + ", got '" + v + "'");
    return n;
  }
  // The value as an unsigned 64-bit integer (seeds), or an error naming the flag.
  uint64_t unsigned_value() {
    const auto& flag = arg();
    const auto& v = value();
    size_t used = 0;
    uint64_t n = 0;
    try {
      // stoull takes "-1" as 2^64 - 1 (and skips blanks before it): take digits only.
      if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0]))) n = std::stoull(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) {
      throw std::invalid_argument(flag + " needs an integer from 0 to 18446744073709551615, got '" + v + "'");
    }
    return n;
  }
  // The value as a number, or an error naming the flag.
  double number_value() {
    const auto& flag = arg();
    const auto& v = value();
    size_t used = 0;
    double x = 0;
    try {
      x = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) throw std::invalid_argument(flag + " needs a number, got '" + v + "'");
    return x;
  }

 private:
  const std::vector<std::string>& args_;
  size_t at_ = static_cast<size_t>(-1);  // before the first argument
};

}  // namespace srformer::tools
