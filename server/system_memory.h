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

// Hands the memory the allocator keeps freed back to the kernel: tcmalloc's free page heap
// (MallocExtension_ReleaseFreeMemory) where the process runs on tcmalloc, else glibc's malloc_trim(0).
// Looked up at run time, so that builds without tcmalloc (sanitizers, -DSRFORMER_TCMALLOC=OFF) need nothing.
void release_free_memory();

// Bytes the allocator holds freed and still mapped (tcmalloc's tcmalloc.pageheap_free_bytes); nullopt
// where the process does not run on tcmalloc.
std::optional<int64_t> allocator_free_bytes();

}  // namespace srformer::server
