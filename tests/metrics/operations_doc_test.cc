// docs/OPERATIONS.md's "Metrics" section describes what a scrape holds: every family the server registers
// has a row in its table with its type and the labels it carries, and every label is in the list of bounded
// labels. (EndToEnd.MetricsOfARunningServerFollowRealRequests holds a running server's scrape to the same.)
#include "tests/metrics/operations_doc.h"

#include <gtest/gtest.h>

#include <string>

#include "server/metrics/metrics.h"
#include "tests/metrics/scrape.h"

namespace srformer::server {
namespace {

TEST(OperationsDoc, TheMetricsTableAndLabelListDescribeEveryFamily) {
  Metrics metrics("");
  testing::populate_every_family(metrics);
  ModelMetrics& m = metrics.model("bart-large-cnn");
  m.set_weight_bytes(1e6, 0);
  m.set_state_budget_bytes(1e9);
  m.on_encoder_cache(1, 1, 1e3);
  metrics.on_unrouted("Summarize", UnroutedReason::kUnknownModel);
  const auto families = testing::scraped_families(metrics.scrape_text());
  ASSERT_GT(families.size(), 30u);

  const std::string section = testing::operations_metrics_section();
  ASSERT_FALSE(section.empty()) << "docs/OPERATIONS.md has no '## Metrics' section";
  const auto documented = testing::documented_families(section);
  const std::string list = testing::bounded_label_list(section);
  ASSERT_FALSE(list.empty()) << "no 'Labels are bounded:' list";

  for (const auto& [family, facts] : families) {
    SCOPED_TRACE(family);
    const auto row = documented.find(family);
    if (row == documented.end()) {
      ADD_FAILURE() << "no row in docs/OPERATIONS.md's metrics table";
    } else {
      EXPECT_EQ(row->second.type, facts.type) << "the table's type column";
      EXPECT_EQ(row->second.labels, facts.labels) << "the table's labels column";
    }
    for (const auto& label : facts.labels) {
      EXPECT_NE(list.find("`" + label + "`"), std::string::npos) << "label " << label << " not in: " << list;
    }
  }
  // And no row names a family nothing registers (a renamed or removed metric).
  for (const auto& [family, facts] : documented) {
    EXPECT_EQ(families.count(family), 1u) << family << " is in the table but not registered";
  }
}

}  // namespace
}  // namespace srformer::server
