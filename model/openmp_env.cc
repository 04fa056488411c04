#include "model/openmp_env.h"

#include <strings.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "model/usable_cpus.h"

namespace srformer {

namespace {

bool is_set(const char* (*get)(const char*), const char* name) {
  const char* v = get(name);
  return v != nullptr && *v != '\0';
}

const char* getenv_fn(const char* name) { return std::getenv(name); }

// The name the kernel gave this process (ps, top, pgrep and killall go by it).
std::string process_name() {
  std::ifstream in("/proc/self/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace

int max_useful_threads() { return std::max(8, 4 * usable_cpus()); }

std::optional<std::pair<std::string, std::string>> openmp_setting_to_apply(const char* (*get)(const char*)) {
  if (is_set(get, "OMP_WAIT_POLICY") || is_set(get, "GOMP_SPINCOUNT") || is_set(get, "SRFORMER_KEEP_OMP_POLICY")) {
    return std::nullopt;
  }
  return std::make_pair(std::string("OMP_WAIT_POLICY"), std::string("PASSIVE"));
}

void reexec_with_openmp_policy(char** argv) {
  // An exec of /proc/self/exe (below) names the process "exe": the re-executed server was not found by
  // `pgrep srformer-server`, and ps and top listed it as exe. It takes the name it was started under back.
  if (argv[0] != nullptr && process_name() == "exe") {
    const char* slash = std::strrchr(argv[0], '/');
    prctl(PR_SET_NAME, slash != nullptr ? slash + 1 : argv[0]);
  }
  const auto setting = openmp_setting_to_apply(getenv_fn);
  if (!setting) return;
  if (::setenv(setting->first.c_str(), setting->second.c_str(), 0) != 0) return;
  // Marks the second run so that a failing exec can never loop.
  if (::setenv("SRFORMER_KEEP_OMP_POLICY", "1", 0) != 0) return;
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc, seccomp): carry on with the policy libgomp already read.
  ::unsetenv(setting->first.c_str());
}

std::string openmp_wait_policy() {
  if (is_set(getenv_fn, "OMP_WAIT_POLICY")) {
    return strcasecmp(std::getenv("OMP_WAIT_POLICY"), "passive") == 0 ? "passive" : "active";
  }
  if (is_set(getenv_fn, "GOMP_SPINCOUNT")) return std::string("spin ") + std::getenv("GOMP_SPINCOUNT") + ", then sleep";
  return "default (spinning)";
}

}  // namespace srformer
