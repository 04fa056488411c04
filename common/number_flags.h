#pragma once
// A flag's value read whole as a number, and, for a field of srformer.v1.GenerationOptions, within the
// field's type: srformer-client, `srformer summarize` and `srformer eval` refuse alike a value the API
// cannot carry ("--temperature 1e40 is out of range (a float32 field)"), rather than sending inf or 0, or
// wrapping an int32, and then being refused by a value that is not the one typed.
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/whole_number.h"

namespace srformer {

// `range` names the range a value past int64's is out of (an integer of 20 digits "needed an integer").
inline int64_t int64_flag(const std::string& flag, const std::string& v, const std::string& range = "") {
  const auto x = whole_int64(v);
  if (!x) {
    const size_t sign = v.rfind('-', 0) == 0 ? 1 : 0;
    if (v.size() > sign && v.find_first_not_of("0123456789", sign) == std::string::npos) {
      throw std::invalid_argument(flag + " " + v + " is out of range" + range);
    }
    throw std::invalid_argument(flag + " needs an integer, got '" + v + "'");
  }
  return *x;
}

// An int32 field of the proto (it wrapped: --max-new-tokens 4294967299 asked for 3).
inline int32_t int32_flag(const std::string& flag, const std::string& v) {
  const std::string range = " (an int32 field)";
  const int64_t x = int64_flag(flag, v, range);
  if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
    throw std::invalid_argument(flag + " " + v + " is out of range" + range);
  }
  return static_cast<int32_t>(x);
}

// The proto's seed is a uint64, as the offline tool's --seed.
inline uint64_t uint64_flag(const std::string& flag, const std::string& v) {
  const auto x = whole_uint64(v);
  if (!x) throw std::invalid_argument(flag + " needs an integer from 0 to 18446744073709551615, got '" + v + "'");
  return *x;
}

// `range` as for int64_flag: 1e400 "needed a number".
inline double number_flag(const std::string& flag, const std::string& v, const std::string& range = "") {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::out_of_range&) {
    throw std::invalid_argument(flag + " " + v + " is out of range" + range);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size()) throw std::invalid_argument(flag + " needs a number, got '" + v + "'");
  return x;
}

// A float field of the proto: a number past float's range was sent as inf or 0, which the server then
// refused by a value that was not the one typed ("temperature must be a finite number, got inf" for 1e40).
inline float float32_flag(const std::string& flag, const std::string& v) {
  const std::string range = " (a float32 field)";
  const double x = number_flag(flag, v, range);
  const auto f = static_cast<float>(x);
  if ((std::isfinite(x) && !std::isfinite(f)) || (x != 0 && f == 0)) {
    throw std::invalid_argument(flag + " " + v + " is out of range" + range);
  }
  return f;
}

}  // namespace srformer
