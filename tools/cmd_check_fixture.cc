// `srformer check-fixture DIR`: replays a reference fixture; the last line is one JSON object.
#include <iostream>
#include <string>
#include <vector>

#include "model/fixture_check.h"

namespace srformer::tools {

int run_check_fixture(const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: srformer check-fixture DIR\n"
                 "  DIR holds model/ (config.json, model.safetensors), case.safetensors and case.json.\n"
                 "  Compares teacher-forced encoder states and logits with the recorded ones, replays\n"
                 "  recorded greedy/beam generation, prints one JSON line, exits 0 only when all match.\n";
    return args.size() == 1 ? 0 : 2;
  }
  const auto report = check_fixture(args[0]);
  if (!report.ok) std::cerr << "check-fixture " << args[0] << ": " << report.detail << "\n";
  std::cout << report.to_json().dump() << std::endl;
  return report.ok ? 0 : 1;
}

}  // namespace srformer::tools
