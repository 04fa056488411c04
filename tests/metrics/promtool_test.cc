// promtool (Debian package `prometheus`) validates our exposition and the shipped Prometheus files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "server/metrics/metrics.h"
#include "tests/metrics/scrape.h"

namespace srformer::server {
namespace {

const std::string kSource = SRFORMER_SOURCE_DIR;

#define REQUIRE_PROMTOOL()                                                                     \
  if (!testing::have_program("promtool")) {                                                    \
    GTEST_SKIP() << "promtool not installed (Debian package `prometheus`, see setup-deps.sh)"; \
  }

TEST(Promtool, ScrapePassesCheckMetrics) {
  REQUIRE_PROMTOOL();
  Metrics metrics("");
  testing::populate_every_family(metrics);
  const std::string path = ::testing::TempDir() + "srformer_scrape_" + std::to_string(getpid()) + ".txt";
  std::ofstream(path) << metrics.scrape_text();
  std::string out;
  const int rc = testing::run_command("promtool check metrics < " + path, out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "") << "promtool lint findings:\n" << out;
  std::remove(path.c_str());
}

TEST(Promtool, CheckMetricsCatchesABadExposition) {
  // Guards the test above: promtool must actually reject lint problems (counter without _total).
  REQUIRE_PROMTOOL();
  const std::string path = ::testing::TempDir() + "srformer_bad_" + std::to_string(getpid()) + ".txt";
  std::ofstream(path) << "# HELP srformer_requests Requests.\n# TYPE srformer_requests counter\nsrformer_requests 1\n";
  std::string out;
  EXPECT_NE(testing::run_command("promtool check metrics < " + path, out), 0) << out;
  std::remove(path.c_str());
}

TEST(Promtool, ShippedConfigIsValid) {
  REQUIRE_PROMTOOL();
  std::string out;
  EXPECT_EQ(testing::run_command("promtool check config " + kSource + "/deploy/prometheus/prometheus.yml", out), 0)
      << out;
}

TEST(Promtool, ShippedRulesAreValid) {
  REQUIRE_PROMTOOL();
  std::string out;
  EXPECT_EQ(testing::run_command("promtool check rules " + kSource + "/deploy/prometheus/alerts.yml", out), 0) << out;
}

TEST(Promtool, AlertsFireAsSpecified) {
  REQUIRE_PROMTOOL();
  std::string out;
  EXPECT_EQ(testing::run_command("cd " + kSource + "/tests/metrics && promtool test rules alerts_test.yml", out), 0)
      << out;
}

}  // namespace
}  // namespace srformer::server
