#pragma once
// How much memory this process could still take, for the automatic decoder-state budget
// (--max-state-memory auto): the kernel's MemAvailable, lowered to what the cgroup (a container's
// limit) leaves.
#include <cstdint>
#include <optional>
#include <string>

namespace srformer::server {

// MemAvailable of a /proc/meminfo text, in bytes.
std::optional<int64_t> meminfo_available(const std::string& meminfo);

// What a cgroup leaves: limit ("max" = none; v2 memory.max, v1 memory.limit_in_bytes, where values near
// 2^63 also mean none) minus usage (memory.current / memory.usage_in_bytes), in bytes.
std::optional<int64_t> cgroup_headroom(const std::string& limit, const std::string& usage);

// The smaller of MemAvailable and this process's cgroup headroom (v2, else v1); nullopt when neither
// can be read.
std::optional<int64_t> memory_available_bytes();

}  // namespace srformer::server
