// The shipped deploy files agree with each other and with the metrics we register (check_deploy.py does the
// YAML/JSON work; the registered names come from a scrape of a fully populated Metrics, not from a list).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "server/metrics/metrics.h"
#include "tests/metrics/scrape.h"

namespace srformer::server {
namespace {

const std::string kSource = SRFORMER_SOURCE_DIR;

class DeployFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string out;
    if (testing::run_command("python3 -c 'import yaml'", out) != 0) {
      GTEST_SKIP() << "python3 with PyYAML not available (Debian python3-yaml, see setup-deps.sh): " << out;
    }
    // "name type" for every family of a Metrics with a model, a fake GPU and a torch source.
    Metrics metrics("");
    testing::populate_every_family(metrics);
    types_path_ = ::testing::TempDir() + "srformer_types_" + std::to_string(getpid()) + ".txt";
    std::ofstream types(types_path_);
    std::istringstream in(metrics.scrape_text());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("# TYPE ", 0) == 0) types << line.substr(7) << "\n";
    }
  }
  void TearDown() override {
    if (!types_path_.empty()) std::remove(types_path_.c_str());
  }

  int check(const std::string& extra, std::string& out) const {
    return testing::run_command(
        "python3 " + kSource + "/tests/metrics/check_deploy.py --root " + kSource + " --metrics " + types_path_ + extra,
        out);
  }

  std::string types_path_;
};

TEST_F(DeployFiles, ComposeDockerfileDashboardAlertsAndK8sAreConsistent) {
  std::string out;
  EXPECT_EQ(check("", out), 0) << out;
}

// The command lines of docker-compose.yml and the Kubernetes Deployment use only flags the built
// server's --help names (a misspelt or removed flag would stop the container at start).
TEST_F(DeployFiles, CommandLinesUseOnlyTheServersFlags) {
  const std::string help = ::testing::TempDir() + "srformer_server_help_" + std::to_string(getpid()) + ".txt";
  std::string out;
  ASSERT_EQ(testing::run_command(std::string(SRFORMER_BIN_DIR) + "/srformer-server --help > " + help, out), 0) << out;
  EXPECT_EQ(check(" --server-help " + help, out), 0) << out;
  // A help without one of the Deployment's flags: the checker names it.
  std::ifstream in(help);
  std::stringstream text;
  text << in.rdbuf();
  std::string without = text.str();
  for (size_t at; (at = without.find("--max-connection-age-ms")) != std::string::npos;) without.erase(at, 23);
  std::ofstream(help) << without;
  EXPECT_EQ(check(" --server-help " + help, out), 1) << out;
  EXPECT_NE(out.find("k8s: srformer-server has no flag --max-connection-age-ms"), std::string::npos) << out;
  std::remove(help.c_str());
}

TEST_F(DeployFiles, DashboardNamingAnUnknownMetricIsCaught) {
  // The checker must see a renamed metric: the dashboard with one name changed fails.
  std::ifstream in(kSource + "/deploy/grafana/dashboards/srformer.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string json = ss.str();
  const std::string from = "srformer_time_to_first_token_seconds_bucket";
  const auto pos = json.find(from);
  ASSERT_NE(pos, std::string::npos);
  json.replace(pos, from.size(), "srformer_ttft_seconds_bucket");
  const std::string bad = ::testing::TempDir() + "srformer_bad_dashboard_" + std::to_string(getpid()) + ".json";
  std::ofstream(bad) << json;
  std::string out;
  EXPECT_EQ(check(" --dashboard " + bad, out), 1) << out;
  EXPECT_NE(out.find("srformer_ttft_seconds_bucket is not registered"), std::string::npos) << out;
  std::remove(bad.c_str());
}

// The dashboard works in any Grafana and with any scrape's job name: a panel tied to the compose
// datasource's uid or to job="srformer" (a Kubernetes scrape names its job otherwise) is caught.
TEST_F(DeployFiles, DashboardTiedToOneDatasourceOrJobNameIsCaught) {
  std::ifstream in(kSource + "/deploy/grafana/dashboards/srformer.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string original = ss.str();
  const std::vector<std::pair<std::string, std::string>> edits = {
      {R"("uid": "${datasource}")", R"("uid": "srformer-prometheus")"},
      {R"(process_resident_memory_bytes{job=~\"$job\")", R"(process_resident_memory_bytes{job=\"srformer\")"},
  };
  for (const auto& [from, to] : edits) {
    std::string json = original;
    const auto pos = json.rfind(from);  // the last: a panel's, not a variable's
    ASSERT_NE(pos, std::string::npos) << from;
    json.replace(pos, from.size(), to);
    const std::string bad = ::testing::TempDir() + "srformer_tied_dashboard_" + std::to_string(getpid()) + ".json";
    std::ofstream(bad) << json;
    std::string out;
    EXPECT_EQ(check(" --dashboard " + bad, out), 1) << to << ": " << out;
    EXPECT_NE(out.find(to.find("uid") != std::string::npos ? "is not the $datasource variable" : "a fixed job name"),
              std::string::npos)
        << out;
    std::remove(bad.c_str());
  }
}

TEST_F(DeployFiles, AlertOnUnknownMetricIsCaught) {
  const std::string bad = ::testing::TempDir() + "srformer_bad_alerts_" + std::to_string(getpid()) + ".yml";
  std::ofstream(bad) << "groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: srformer_queue_length > 1\n";
  std::string out;
  EXPECT_EQ(check(" --alerts " + bad, out), 1) << out;
  EXPECT_NE(out.find("srformer_queue_length"), std::string::npos) << out;
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace srformer::server
