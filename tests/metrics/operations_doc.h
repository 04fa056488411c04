#pragma once
// docs/OPERATIONS.md's "Metrics" section read as data: its table's families with their type and labels, and
// its list of bounded labels; and the same facts read out of a scrape, to compare the two.
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/metrics/scrape.h"

namespace srformer::server::testing {

struct FamilyFacts {
  std::string type;              // counter, gauge, histogram ("" where the table leaves it out)
  std::set<std::string> labels;  // label names; a histogram's `le` left out
};

// Family name -> type (from "# TYPE") and the label names its samples carry.
inline std::map<std::string, FamilyFacts> scraped_families(const std::string& exposition) {
  std::map<std::string, FamilyFacts> families;
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const auto space = line.find(' ', 7);
      families[line.substr(7, space - 7)].type = line.substr(space + 1);
      continue;
    }
    std::string name;
    LabelSet labels;
    double value = 0;
    if (!parse_sample(line, name, labels, value)) continue;
    for (const char* suffix_text : {"_bucket", "_sum", "_count"}) {
      const std::string suffix = suffix_text;
      if (families.count(name) == 0 && name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        name.resize(name.size() - suffix.size());
      }
    }
    for (const auto& [label, v] : labels) {
      if (label != "le") families[name].labels.insert(label);
    }
  }
  return families;
}

// `a_{x,y}_b` -> a_x_b, a_y_b.
inline std::vector<std::string> expand_braces(const std::string& name) {
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

inline std::string trimmed(std::string s) {
  s.erase(0, s.find_first_not_of(' '));
  s.erase(s.find_last_not_of(' ') + 1);
  return s;
}

// The "## Metrics" section of docs/OPERATIONS.md ("" when it has none).
inline std::string operations_metrics_section() {
  std::ifstream in(std::string(SRFORMER_SOURCE_DIR) + "/docs/OPERATIONS.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto begin = text.find("\n## Metrics\n");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find("\n## ", begin + 1) - begin);
}

// Rows "| `name`[, `name`] | type | labels | meaning |": the families documented, with their type and labels.
inline std::map<std::string, FamilyFacts> documented_families(const std::string& section) {
  std::map<std::string, FamilyFacts> documented;
  const std::regex code("`([^`]+)`");
  std::istringstream rows(section);
  for (std::string row; std::getline(rows, row);) {
    if (row.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream cell_stream(row.substr(1));
    for (std::string cell; std::getline(cell_stream, cell, '|');) cells.push_back(cell);
    if (cells.size() < 3) continue;
    FamilyFacts facts;
    facts.type = trimmed(cells[1]);
    std::istringstream label_stream(cells[2]);
    for (std::string label; std::getline(label_stream, label, ',');) {
      if (!trimmed(label).empty()) facts.labels.insert(trimmed(label));
    }
    for (auto it = std::sregex_iterator(cells[0].begin(), cells[0].end(), code); it != std::sregex_iterator(); ++it) {
      for (const auto& name : expand_braces((*it)[1].str())) documented[name] = facts;
    }
  }
  return documented;
}

// "Labels are bounded: `model` (...), `method` (...), ... Request ids never appear in labels." ("" if absent).
inline std::string bounded_label_list(const std::string& section) {
  const auto begin = section.find("Labels are bounded:");
  if (begin == std::string::npos) return "";
  return section.substr(begin, section.find("Request ids", begin) - begin);
}

}  // namespace srformer::server::testing
