#pragma once
// A call's deadline as the time left before it, from gRPC's raw deadline.
#include <grpc/support/time.h>

#include <chrono>
#include <cstdint>
#include <optional>

namespace srformer::server {

// The time left before `deadline` (negative once past), or none. Not ServerContext::deadline(): it counts
// system_clock nanoseconds since 1970, which overflow past the year 2262, so that a client's far deadline
// (grpc-timeout takes up to 99999999H, 11,000 years; a Go client's longest timeout is 292 years) came out
// in the past and the call was refused with DEADLINE_EXCEEDED. A deadline more than a century away is
// taken as none.
inline std::optional<std::chrono::nanoseconds> time_left(gpr_timespec deadline) {
  if (gpr_time_cmp(deadline, gpr_inf_future(deadline.clock_type)) == 0) return std::nullopt;
  const gpr_timespec left =
      gpr_time_sub(gpr_convert_clock_type(deadline, GPR_CLOCK_MONOTONIC), gpr_now(GPR_CLOCK_MONOTONIC));
  constexpr int64_t kCenturySeconds = int64_t{100} * 366 * 24 * 3600;
  if (left.tv_sec >= kCenturySeconds) return std::nullopt;
  return std::chrono::seconds(left.tv_sec) + std::chrono::nanoseconds(left.tv_nsec);
}

}  // namespace srformer::server
