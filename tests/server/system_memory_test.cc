// The memory the automatic state budget halves: /proc/meminfo's MemAvailable, lowered to a cgroup's headroom.
#include "server/system_memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace srformer::server {
namespace {

TEST(SystemMemory, ReadsMemAvailableFromMeminfo) {
  const std::string meminfo =
      "MemTotal:       24641220 kB\nMemFree:         1234567 kB\nMemAvailable:   23526360 kB\nBuffers: 4 kB\n";
  EXPECT_EQ(meminfo_available(meminfo), int64_t{23526360} * 1024);
  EXPECT_EQ(meminfo_available("MemTotal: 5 kB\n"), std::nullopt);
  EXPECT_EQ(meminfo_available(""), std::nullopt);
}

TEST(SystemMemory, CgroupHeadroomIsTheLimitLessTheUsage) {
  EXPECT_EQ(cgroup_headroom("1073741824\n", "268435456\n"), int64_t{768} << 20);
  EXPECT_EQ(cgroup_headroom("1000\n", "4000\n"), 0);                         // over the limit already
  EXPECT_EQ(cgroup_headroom("max\n", "4000\n"), std::nullopt);               // v2: no limit
  EXPECT_EQ(cgroup_headroom("9223372036854771712\n", "5\n"), std::nullopt);  // v1: no limit
  EXPECT_EQ(cgroup_headroom("garbage", "5"), std::nullopt);
}

TEST(SystemMemory, ThisMachineReportsWhatMeminfoSays) {
  std::ifstream in("/proc/meminfo");
  if (!in) GTEST_SKIP() << "no /proc/meminfo here";
  std::stringstream text;
  text << in.rdbuf();
  const auto meminfo = meminfo_available(text.str());
  ASSERT_TRUE(meminfo.has_value());
  const auto available = memory_available_bytes();
  ASSERT_TRUE(available.has_value());
  EXPECT_GT(*available, 0);
  // Never above MemAvailable (allowing for what the system freed between the two reads).
  EXPECT_LE(*available, *meminfo + (int64_t{256} << 20));
}

// Frees a block of `bytes`, written to so that its pages are resident, back to the allocator.
void allocate_and_free(size_t bytes) {
  void* const block = std::malloc(bytes);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, bytes);
  asm volatile("" : : "r"(block) : "memory");  // the compiler may not drop the block
  std::free(block);
}

TEST(SystemMemory, ReleaseFreeMemoryGivesTheAllocatorsFreePagesBack) {
  if (!allocator_free_bytes()) GTEST_SKIP() << "not running on tcmalloc";
  constexpr int64_t kBlock = int64_t{256} << 20;
  allocate_and_free(kBlock);
  ASSERT_GE(*allocator_free_bytes(), kBlock);  // tcmalloc keeps it for reuse
  release_free_memory();
  EXPECT_LT(*allocator_free_bytes(), kBlock / 2);
}

}  // namespace
}  // namespace srformer::server
