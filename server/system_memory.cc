#include "server/system_memory.h"

#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace srformer::server {

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<int64_t> parse_bytes(const std::string& text) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    return v >= 0 ? std::optional<int64_t>(v) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The cgroup path of this process: the v2 line "0::/path", or the v1 "N:memory:/path" line.
std::optional<std::string> own_cgroup(const std::string& proc_cgroup, bool v2) {
  std::istringstream lines(proc_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (v2 ? (line.substr(0, a) == "0" && controllers.empty()) : controllers.find("memory") != std::string::npos) {
      return line.substr(b + 1);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> meminfo_available(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (lines >> key >> kib) {
    std::getline(lines, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> cgroup_headroom(const std::string& limit, const std::string& usage) {
  if (limit.rfind("max", 0) == 0) return std::nullopt;
  const auto l = parse_bytes(limit), u = parse_bytes(usage);
  if (!l || !u || *l >= (int64_t{1} << 62)) return std::nullopt;  // v1 writes ~2^63 for "no limit"
  return std::max<int64_t>(0, *l - *u);
}

std::optional<int64_t> memory_available_bytes() {
  std::optional<int64_t> available;
  if (const auto meminfo = read_text("/proc/meminfo")) available = meminfo_available(*meminfo);
  std::optional<int64_t> headroom;
  if (const auto cgroups = read_text("/proc/self/cgroup")) {
    // Inside a container the cgroup namespace makes its own group the root; either way the files are
    // under /sys/fs/cgroup, at the process's path (v2) or in the memory controller's tree (v1).
    for (const bool v2 : {true, false}) {
      const auto path = own_cgroup(*cgroups, v2);
      if (!path) continue;
      for (const std::string& dir :
           v2 ? std::vector<std::string>{"/sys/fs/cgroup" + *path, "/sys/fs/cgroup"}
              : std::vector<std::string>{"/sys/fs/cgroup/memory" + *path, "/sys/fs/cgroup/memory"}) {
        const auto limit = read_text(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
        const auto usage = read_text(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
        if (limit && usage) {
          headroom = cgroup_headroom(*limit, *usage);
          break;
        }
      }
      if (headroom) break;
    }
  }
  if (available && headroom) return std::min(*available, *headroom);
  return available ? available : headroom;
}

namespace {

// gperftools' C entry points (malloc_extension_c.h), found only when tcmalloc is loaded.
using ReleaseFn = void (*)();
using PropertyFn = int (*)(const char*, size_t*);

template <typename Fn>
Fn tcmalloc_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

void release_free_memory() {
  if (const auto release = tcmalloc_symbol<ReleaseFn>("MallocExtension_ReleaseFreeMemory")) {
    release();
    return;
  }
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

std::optional<int64_t> allocator_free_bytes() {
  const auto property = tcmalloc_symbol<PropertyFn>("MallocExtension_GetNumericProperty");
  size_t value = 0;
  if (!property || !property("tcmalloc.pageheap_free_bytes", &value)) return std::nullopt;
  return static_cast<int64_t>(value);
}

}  // namespace srformer::server
