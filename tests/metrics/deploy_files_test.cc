// The shipped deploy files agree with each other and with the metrics we register (check_deploy.py does the
// YAML/JSON work; the registered names come from a scrape of a fully populated Metrics, not from a list).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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
    // The scrape of a Metrics with a model, a fake GPU and a torch source: every family, its labels, and every
    // value of the fixed ones (the reasons, the cache results, the weights' forms).
    Metrics metrics("");
    testing::populate_every_family(metrics);
    ModelMetrics& m = metrics.model("bart-large-cnn");
    m.set_weight_bytes(1e6, 0);
    m.set_state_budget_bytes(1e9);
    scrape_path_ = ::testing::TempDir() + "srformer_scrape_" + std::to_string(getpid()) + ".txt";
    std::ofstream(scrape_path_) << metrics.scrape_text();
  }
  void TearDown() override {
    if (!scrape_path_.empty()) std::remove(scrape_path_.c_str());
  }

  int check(const std::string& extra, std::string& out) const {
    return testing::run_command("python3 " + kSource + "/tests/metrics/check_deploy.py --root " + kSource +
                                    " --metrics " + scrape_path_ + extra,
                                out);
  }

  std::string scrape_path_;
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

// The job chosen held only the process panels: the others filtered on the instance, whose "All" is ".*", so a
// Prometheus scraping two srformer jobs (staging, production) showed both in them whichever job was chosen.
TEST_F(DeployFiles, DashboardPanelIgnoringTheChosenJobIsCaught) {
  std::ifstream in(kSource + "/deploy/grafana/dashboards/srformer.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string original = ss.str();
  const std::vector<std::pair<std::string, std::string>> edits = {
      {R"(srformer_generated_tokens_total{job=~\"$job\", )", "srformer_generated_tokens_total is not limited"},
      {R"(srformer_gpu_power_watts{job=~\"$job\", )", "srformer_gpu_power_watts is not limited"},
      {R"(label_values(srformer_requests_in_flight{job=~\"$job\", )",
       "dashboard variable 'model': srformer_requests_in_flight is not limited"},
  };
  for (const auto& [from, problem] : edits) {
    std::string json = original;
    const auto pos = json.find(from);
    ASSERT_NE(pos, std::string::npos) << from;
    json.replace(pos, from.size(), from.substr(0, from.find('{') + 1));
    const std::string bad = ::testing::TempDir() + "srformer_jobless_dashboard_" + std::to_string(getpid()) + ".json";
    std::ofstream(bad) << json;
    std::string out;
    EXPECT_EQ(check(" --dashboard " + bad, out), 1) << from << ": " << out;
    EXPECT_NE(out.find(problem), std::string::npos) << out;
    std::remove(bad.c_str());
  }
}

// docs/OPERATIONS.md's knobs table says which series show what each flag trades; the dashboard lacked
// srformer_state_budget_bytes, what --max-state-memory's srformer_state_bytes is to be read against.
TEST_F(DeployFiles, ASeriesTheKnobsTableSaysToWatchMissingFromTheDashboardIsCaught) {
  std::ifstream in(kSource + "/deploy/grafana/dashboards/srformer.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string json = ss.str();
  const std::string from = "srformer_state_budget_bytes{";
  const auto pos = json.find(from);
  ASSERT_NE(pos, std::string::npos);
  json.replace(pos, from.size(), "srformer_state_bytes{");
  const std::string bad = ::testing::TempDir() + "srformer_unwatched_dashboard_" + std::to_string(getpid()) + ".json";
  std::ofstream(bad) << json;
  std::string out;
  EXPECT_EQ(check(" --dashboard " + bad, out), 1) << out;
  EXPECT_NE(out.find("dashboard: no panel shows srformer_state_budget_bytes, which docs/OPERATIONS.md's knobs table "
                     "says to watch"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("check_deploy: 1 problem(s)"), std::string::npos) << out;
  std::remove(bad.c_str());
}

// A label the metric does not carry, or a fixed label's value it never takes, matches no series: the
// alert stays silent and the panel empty, and nothing else says so.
TEST_F(DeployFiles, AlertOnALabelOrValueTheMetricLacksIsCaught) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(sum by (model) (rate(srformer_requests_rejected_total{reason="queue_ful"}[5m])) > 0.1)",
       R"(srformer_requests_rejected_total{reason="queue_ful"} matches nothing)"},
      {R"(sum by (model) (rate(srformer_requests_unrouted_total[5m])) > 0.1)",
       "sums srformer_requests_unrouted_total by model, a label it does not have"},
      {R"(rate(srformer_requests_total{status="INTERNAL"}[5m]) > 0)", "srformer_requests_total has no label status"},
      {R"(rate(srformer_requests_total{code=~"INTERNAL|SERVER_ERROR"}[5m]) > 0)",
       "SERVER_ERROR is not a gRPC status code name"},
  };
  for (const auto& [expr, problem] : cases) {
    const std::string bad = ::testing::TempDir() + "srformer_bad_labels_" + std::to_string(getpid()) + ".yml";
    std::ofstream(bad) << "groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: '" << expr << "'\n";
    std::string out;
    EXPECT_EQ(check(" --alerts " + bad, out), 1) << expr << ": " << out;
    EXPECT_NE(out.find(problem), std::string::npos) << expr << ": " << out;
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

// An alert paged with nothing to go on when docs/OPERATIONS.md's runbook had no entry for it, and fired (or
// not) unlike its expression's intent when no promtool test evaluated it: either is caught.
TEST_F(DeployFiles, AlertWithoutARunbookEntryOrAPromtoolTestIsCaught) {
  std::ifstream in(kSource + "/deploy/prometheus/alerts.yml");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bad = ::testing::TempDir() + "srformer_untested_alerts_" + std::to_string(getpid()) + ".yml";
  std::ofstream(bad) << ss.str() << "      - alert: SrformerDecodeStepsSlow\n"
                     << "        expr: histogram_quantile(0.95, sum by (model, le) "
                        "(rate(srformer_decode_step_seconds_bucket[5m]))) > 1\n";
  std::string out;
  EXPECT_EQ(check(" --alerts " + bad, out), 1) << out;
  EXPECT_NE(out.find("alert SrformerDecodeStepsSlow: no entry '- `SrformerDecodeStepsSlow`' in docs/OPERATIONS.md's "
                     "Alerts section"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("alert SrformerDecodeStepsSlow: tests/metrics/alerts_test.yml does not test it"),
            std::string::npos)
      << out;
  // The shipped alerts themselves have both: no other problem.
  EXPECT_NE(out.find("check_deploy: 2 problem(s)"), std::string::npos) << out;
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace srformer::server
