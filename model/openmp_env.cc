#include "model/openmp_env.h"

#include <strings.h>
#include <unistd.h>

#include <cstdlib>

namespace srformer {

namespace {
bool set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}
}  // namespace

void reexec_with_passive_openmp(char** argv) {
  if (set("OMP_WAIT_POLICY") || set("GOMP_SPINCOUNT") || set("SRFORMER_KEEP_OMP_POLICY")) return;
  // Marks the second run so that a failing exec can never loop.
  if (::setenv("OMP_WAIT_POLICY", "PASSIVE", 0) != 0) return;
  if (::setenv("SRFORMER_KEEP_OMP_POLICY", "1", 0) != 0) return;
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc, seccomp): carry on with the policy libgomp already read.
  ::unsetenv("OMP_WAIT_POLICY");
}

const char* openmp_wait_policy() {
  const char* v = std::getenv("OMP_WAIT_POLICY");
  if (v == nullptr || *v == '\0') return set("GOMP_SPINCOUNT") ? "GOMP_SPINCOUNT" : "default (spinning)";
  return strcasecmp(v, "passive") == 0 ? "passive" : "active";
}

}  // namespace srformer
