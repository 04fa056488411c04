// docs/OPERATIONS.md's "Metrics" section describes what a scrape holds: every family the server registers
// has a row in its table with the labels it carries, and every label is in the list of bounded labels.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "server/metrics/metrics.h"
#include "tests/metrics/scrape.h"

namespace srformer::server {
namespace {

using Labels = std::set<std::string>;

// Family name -> the label names its samples carry (a histogram's `le` left out).
std::map<std::string, Labels> families_of(const std::string& exposition) {
  std::map<std::string, Labels> families;
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      families[line.substr(7, line.find(' ', 7) - 7)];
      continue;
    }
    std::string name;
    testing::LabelSet labels;
    double value = 0;
    if (!testing::parse_sample(line, name, labels, value)) continue;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (families.count(name) == 0 && name.size() > s.size() &&
          name.compare(name.size() - s.size(), s.size(), s) == 0) {
        name.resize(name.size() - s.size());
      }
    }
    for (const auto& [label, v] : labels) {
      if (label != "le") families[name].insert(label);
    }
  }
  return families;
}

// `a_{x,y}_b` -> a_x_b, a_y_b.
std::vector<std::string> expand_braces(const std::string& name) {
  const auto open = name.find('{');
  if (open == std::string::npos) return {name};
  const auto close = name.find('}', open);
  std::vector<std::string> out;
  std::istringstream alternatives(name.substr(open + 1, close - open - 1));
  for (std::string alt; std::getline(alternatives, alt, ',');) {
    out.push_back(name.substr(0, open) + alt + name.substr(close + 1));
  }
  return out;
}

std::string metrics_section() {
  std::ifstream in(std::string(SRFORMER_SOURCE_DIR) + "/docs/OPERATIONS.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto begin = text.find("\n## Metrics\n");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find("\n## ", begin + 1) - begin);
}

TEST(OperationsDoc, TheMetricsTableAndLabelListDescribeEveryFamily) {
  Metrics metrics("");
  testing::populate_every_family(metrics);
  ModelMetrics& m = metrics.model("bart-large-cnn");
  m.set_weight_bytes(1e6, 0);
  m.set_state_budget_bytes(1e9);
  m.on_encoder_cache(1, 1, 1e3);
  metrics.on_unrouted("Summarize", UnroutedReason::kUnknownModel);
  const auto families = families_of(metrics.scrape_text());
  ASSERT_GT(families.size(), 30u);

  const std::string section = metrics_section();
  ASSERT_FALSE(section.empty()) << "docs/OPERATIONS.md has no '## Metrics' section";
  // Rows "| `name`[, `name`] | type | labels | meaning |": the names documented, with their labels.
  std::map<std::string, Labels> documented;
  const std::regex code("`([^`]+)`");
  std::istringstream rows(section);
  for (std::string row; std::getline(rows, row);) {
    if (row.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream cell_stream(row.substr(1));
    for (std::string cell; std::getline(cell_stream, cell, '|');) cells.push_back(cell);
    ASSERT_GE(cells.size(), 3u) << row;
    Labels labels;
    std::istringstream label_stream(cells[2]);
    for (std::string label; std::getline(label_stream, label, ',');) {
      label.erase(0, label.find_first_not_of(' '));
      label.erase(label.find_last_not_of(' ') + 1);
      if (!label.empty()) labels.insert(label);
    }
    for (auto it = std::sregex_iterator(cells[0].begin(), cells[0].end(), code); it != std::sregex_iterator(); ++it) {
      for (const auto& name : expand_braces((*it)[1].str())) documented[name] = labels;
    }
  }
  // "Labels are bounded: `model` (...), `method` (...), ... Request ids never appear in labels."
  const auto list_begin = section.find("Labels are bounded:");
  ASSERT_NE(list_begin, std::string::npos);
  const std::string list = section.substr(list_begin, section.find("Request ids", list_begin) - list_begin);

  for (const auto& [family, labels] : families) {
    SCOPED_TRACE(family);
    const auto row = documented.find(family);
    if (row == documented.end()) {
      ADD_FAILURE() << "no row in docs/OPERATIONS.md's metrics table";
    } else {
      EXPECT_EQ(row->second, labels) << "the table's labels column";
    }
    for (const auto& label : labels) {
      EXPECT_NE(list.find("`" + label + "`"), std::string::npos) << "label " << label << " not in: " << list;
    }
  }
}

}  // namespace
}  // namespace srformer::server
