#pragma once
// The reference fixture directories under SRFORMER_FIXTURES_DIR (../shared/fixtures), sorted; none when
// shared/ is absent (tests then skip, saying so).
#include <algorithm>
#include <filesystem>
#include <vector>

namespace srformer::testing {

inline std::vector<std::filesystem::path> fixture_dirs() {
  namespace fs = std::filesystem;
  std::vector<fs::path> dirs;
  const fs::path root = SRFORMER_FIXTURES_DIR;
  if (!fs::is_directory(root)) return dirs;
  for (const auto& e : fs::directory_iterator(root)) {
    if (fs::exists(e.path() / "case.json") && fs::exists(e.path() / "model" / "config.json")) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

}  // namespace srformer::testing
