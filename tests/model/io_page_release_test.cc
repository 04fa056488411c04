// io/page_release.h: released pages leave the process's resident memory, and their contents are intact
// when read again (file-backed pages from the file, anonymous ones from wherever the kernel kept them).
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/io/mapped_file.h"
#include "model/io/page_release.h"

namespace {

// VmRSS of this process, in bytes (0 where /proc is absent).
int64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(4096, '\n');
  }
  return 0;
}

uint32_t pattern(size_t i) { return static_cast<uint32_t>(i * 2654435761U); }

TEST(PageRelease, MappedCheckpointPagesLeaveResidentMemoryAndReadBackIntact) {
  constexpr size_t kWords = 16 << 20;  // 64 MiB
  const auto dir = std::filesystem::temp_directory_path();
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
    GTEST_SKIP() << dir << " is a tmpfs: its pages are shared memory, which the kernel can only swap out "
                 << "(TMPDIR=/var/tmp runs this test)";
  }
  const auto path = dir / ("srformer_page_release_" + std::to_string(::getpid()));
  {
    std::vector<uint32_t> words(kWords);
    for (size_t i = 0; i < kWords; ++i) words[i] = pattern(i);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(words.data()), static_cast<std::streamsize>(kWords * sizeof(uint32_t)));
  }
  {
    const srformer::MappedFile file(path);
    const auto* words = reinterpret_cast<const uint32_t*>(file.data());
    uint64_t sum = 0;
    for (size_t i = 0; i < kWords; ++i) sum += words[i];  // fault every page in, as packing does
    const int64_t before = resident_bytes();
    if (before == 0) GTEST_SKIP() << "no /proc/self/status here";
    if (!srformer::release_pages(file.data(), file.size())) {
      GTEST_SKIP() << "this kernel does not take MADV_PAGEOUT (Linux 5.4+): nothing to check";
    }
    const int64_t after = resident_bytes();
    EXPECT_GT(before - after, int64_t{48} << 20) << "resident " << before << " -> " << after << " bytes";
    // Read again: every word as written, from the file.
    uint64_t again = 0;
    size_t wrong = 0;
    for (size_t i = 0; i < kWords; ++i) {
      again += words[i];
      wrong += words[i] != pattern(i) ? 1 : 0;
    }
    EXPECT_EQ(wrong, 0U);
    EXPECT_EQ(again, sum);
  }
  std::filesystem::remove(path);
}

TEST(PageRelease, WrittenAndAnonymousPagesKeepTheirContents) {
  std::vector<uint32_t> words(4 << 20);
  for (size_t i = 0; i < words.size(); ++i) words[i] = pattern(i) ^ 0x5A5A5A5AU;
  (void)srformer::release_pages(words.data(), words.size() * sizeof(uint32_t));
  size_t wrong = 0;
  for (size_t i = 0; i < words.size(); ++i) wrong += words[i] != (pattern(i) ^ 0x5A5A5A5AU) ? 1 : 0;
  EXPECT_EQ(wrong, 0U);
  // A partial range and an empty one change nothing and do not fail loudly.
  EXPECT_FALSE(srformer::release_pages(words.data(), 100));
  EXPECT_FALSE(srformer::release_pages(nullptr, 0));
}

}  // namespace
