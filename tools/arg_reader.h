#pragma once
// Walks a subcommand's arguments one at a time; a flag's value is taken on demand, with an error
// naming the flag when it is missing. Shared by the tools/cmd_*.cc parsers.
#include <cctype>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/number_flags.h"
#include "model/openmp_env.h"

namespace srformer::tools {

// `text` read whole by `parse` (std::stoll and the like: they take "12abc" as 12), or an error naming
// `flag` and saying it needs `expected` (std::stoll alone says only "stoll").
template <typename T, typename Parse>
T parse_whole(const std::string& flag, const std::string& text, Parse parse, const std::string& expected) {
  size_t used = 0;
  T x{};
  try {
    x = parse(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw std::invalid_argument(flag + " needs " + expected + ", got '" + text + "'");
  }
  return x;
}

inline int64_t parse_integer(const std::string& flag, const std::string& text,
                             const std::string& expected = "an integer") {
  return parse_whole<int64_t>(
      flag, text, [](const std::string& t, size_t* used) { return std::stoll(t, used); }, expected);
}

// The error for a flag a subcommand does not take, worded alike by every srformer subcommand.
inline std::invalid_argument unknown_option(const std::string& flag) {
  return std::invalid_argument("unknown option '" + flag + "' (see --help)");
}

class ArgReader {
 public:
  explicit ArgReader(const std::vector<std::string>& args) : args_(args) {}
  // Moves to the next argument; false when there is none. "--flag=VALUE" is the flag with its value, as
  // srformer-client and srformer-server take it; a flag that took no value refuses one given so.
  bool next() {
    if (inline_value_) {
      throw std::invalid_argument(flag_ + " takes no value, got '" + args_[at_] + "' (see --help)");
    }
    if (++at_ >= args_.size()) return false;
    const std::string& a = args_[at_];
    const size_t eq = a.rfind("--", 0) == 0 ? a.find('=') : std::string::npos;
    flag_ = a.substr(0, eq);
    if (eq != std::string::npos) inline_value_ = a.substr(eq + 1);
    return true;
  }
  const std::string& arg() const { return flag_; }
  // The current flag's value: after its '=', else the next argument.
  const std::string& value() {
    if (inline_value_) {
      value_ = std::move(*inline_value_);
      inline_value_.reset();
      return value_;
    }
    if (at_ + 1 >= args_.size()) throw std::invalid_argument(flag_ + " needs a value");
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
    const std::string expected = "an integer >= " + std::to_string(min);
    const int64_t n = parse_integer(flag, v, expected);
    if (n < min) throw std::invalid_argument(flag + " needs " + expected + ", got '" + v + "'");
    return n;
  }
  // A --threads value: 1 to max_useful_threads(), or an error naming the flag.
  int threads_value() {
    const auto& flag = arg();
    const auto n = int_value(1);
    if (n > max_useful_threads()) {
      throw std::invalid_argument(flag + " " + std::to_string(n) +
                                  " is more than 4x the CPUs this process may use; use at most " +
                                  std::to_string(max_useful_threads()) + " (threads beyond the cores only wait)");
    }
    return static_cast<int>(n);
  }
  // The value as an unsigned 64-bit integer (seeds), or an error naming the flag.
  uint64_t unsigned_value() {
    const auto& flag = arg();
    // std::stoull takes "-1" as 2^64 - 1 (and skips blanks before it): digits only.
    const auto digits_only = [](const std::string& t, size_t* used) -> uint64_t {
      if (t.empty() || !std::isdigit(static_cast<unsigned char>(t[0]))) return 0;
      return std::stoull(t, used);
    };
    return parse_whole<uint64_t>(flag, value(), digits_only, "an integer from 0 to 18446744073709551615");
  }
  // The value of a generation option the API carries as an int32 or a float32 (srformer.v1.GenerationOptions),
  // refused as srformer-client refuses one out of that type's range (common/number_flags.h); the float
  // rounded as the API carries it, so that the server and the tools generate with the same value.
  int64_t int32_value() {
    const auto& flag = arg();
    return int32_flag(flag, value());
  }
  // As int32_value, and at least `min` (int_value's words): the counts of new tokens, beams and sequences.
  int64_t int32_value(int64_t min) {
    const auto& flag = arg();
    const auto& v = value();
    const int64_t n = int32_flag(flag, v);
    if (n < min)
      throw std::invalid_argument(flag + " needs an integer >= " + std::to_string(min) + ", got '" + v + "'");
    return n;
  }
  double float32_value() {
    const auto& flag = arg();
    return float32_flag(flag, value());
  }
  // The value as a number, or an error naming the flag.
  double number_value() {
    const auto& flag = arg();
    return parse_whole<double>(
        flag, value(), [](const std::string& t, size_t* used) { return std::stod(t, used); }, "a number");
  }

 private:
  const std::vector<std::string>& args_;
  size_t at_ = static_cast<size_t>(-1);  // before the first argument
  std::string flag_, value_;
  std::optional<std::string> inline_value_;  // "--flag=VALUE"'s, until value() takes it
};

}  // namespace srformer::tools
