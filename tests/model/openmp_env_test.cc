// The OpenMP wait policy the server and the CLI re-execute themselves with (model/openmp_env.h).
#include "model/openmp_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace srformer {
namespace {

std::map<std::string, std::string>& fake_env() {
  static std::map<std::string, std::string> env;
  return env;
}

const char* fake_get(const char* name) {
  const auto it = fake_env().find(name);
  return it == fake_env().end() ? nullptr : it->second.c_str();
}

// PASSIVE, not a spin: on cores shared with other busy processes the spinning workers took the cores from
// the threads they waited for (session 56: 1.6-12x fewer tokens/s, up to 8x the CPU per token).
TEST(OpenMpEnv, PassiveUnlessTheUserChoseOrItAlreadyRan) {
  fake_env().clear();
  const auto setting = openmp_setting_to_apply(fake_get);
  ASSERT_TRUE(setting.has_value());
  EXPECT_EQ(setting->first, "OMP_WAIT_POLICY");
  EXPECT_EQ(setting->second, "PASSIVE");
  for (const char* chosen : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "SRFORMER_KEEP_OMP_POLICY"}) {
    fake_env() = {{chosen, "1"}};
    EXPECT_FALSE(openmp_setting_to_apply(fake_get).has_value()) << chosen << " set: left as it is";
  }
  fake_env() = {{"OMP_WAIT_POLICY", ""}};  // set but empty counts as unset
  EXPECT_TRUE(openmp_setting_to_apply(fake_get).has_value());
}

}  // namespace
}  // namespace srformer
