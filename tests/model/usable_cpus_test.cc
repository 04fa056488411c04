// The CPUs the server sizes its thread pools by: the affinity mask and a cgroup quota, not the machine's
// count (a pinned server ran 12-15% slower with the machine's count of threads).
#include "model/usable_cpus.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <fstream>
#include <thread>

#include "tests/model/io_test_util.h"

namespace srformer {
namespace {

using testing::ScratchDir;

void write(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

TEST(UsableCpus, CgroupV2QuotaIsTheTightestOnThePathUp) {
  const ScratchDir root;
  write(root / "cpu.max", "max 100000\n");
  write(root / "kubepods/pod1/cpu.max", "150000 100000\n");
  write(root / "kubepods/pod1/c1/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root.path(), "0::/kubepods/pod1/c1\n"), 1.5);
  write(root / "kubepods/cpu.max", "50000 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root.path(), "0::/kubepods/pod1/c1\n"), 0.5);
  EXPECT_EQ(cgroup_cpu_quota(root.path(), "0::/\n"), std::nullopt);  // "max": no quota
  EXPECT_EQ(cgroup_cpu_quota(root.path(), ""), std::nullopt);
}

TEST(UsableCpus, AQuotaThatIsNotAFiniteNumberIsNoQuota) {
  const ScratchDir root;
  for (const char* text : {"inf 100000\n", "nan 100000\n", "1e308 0.5\n", "junk 100000\n", "100000 0\n"}) {
    write(root / "cpu.max", text);
    EXPECT_EQ(cgroup_cpu_quota(root.path(), "0::/\n"), std::nullopt) << text;
  }
}

TEST(UsableCpus, CgroupV1QuotaAndItsNoQuotaValue) {
  const ScratchDir root;
  write(root / "cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  write(root / "cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  const std::string v1 = "4:memory:/x\n3:cpu,cpuacct:/\n0::/\n";
  EXPECT_EQ(cgroup_cpu_quota(root.path(), v1), std::nullopt);
  write(root / "cpu,cpuacct/cpu.cfs_quota_us", "250000\n");
  EXPECT_EQ(cgroup_cpu_quota(root.path(), v1), 2.5);
  // A group path that the container's mount shows as its root.
  EXPECT_EQ(cgroup_cpu_quota(root.path(), "3:cpu,cpuacct:/docker/abc\n"), 2.5);
  EXPECT_EQ(cgroup_cpu_quota(root.path(), "4:memory:/x\n"), std::nullopt);  // no cpu controller named
}

TEST(UsableCpus, FollowsTheAffinityMask) {
  const int all = usable_cpus();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  int pinned = 0;
  std::thread([&] {  // affinity is per thread: pin a thread of our own, not the test runner's
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    pinned = usable_cpus();
  })
      .join();
  EXPECT_EQ(pinned, 1);
}

// OMP_NUM_THREADS as libgomp takes it: its first entry, a positive integer; anything else is not a choice.
TEST(UsableCpus, OmpNumThreadsIsReadAsLibgompReadsIt) {
  EXPECT_EQ(omp_num_threads("3"), 3);
  EXPECT_EQ(omp_num_threads("4,2"), 4);  // nested levels: the outer one is ours
  for (const char* no : {"", "0", "-1", "two", "2x", " 2", ",2", "99999999999"}) {
    EXPECT_EQ(omp_num_threads(no), std::nullopt) << "'" << no << "'";
  }
  EXPECT_EQ(omp_num_threads(nullptr), std::nullopt);
}

}  // namespace
}  // namespace srformer
