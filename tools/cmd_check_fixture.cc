// `srformer check-fixture DIR [--device D] [--dtype T]`: replays a reference fixture; the last line is one
// JSON object.
#include <iostream>
#include <string>
#include <vector>

#include "model/dtype_name.h"
#include "model/fixture_check.h"
#include "tools/arg_reader.h"
#include "tools/device_flag.h"

namespace srformer::tools {

namespace {

constexpr const char* kUsage =
    "usage: srformer check-fixture DIR [--device cpu|cuda[:N]] [--dtype fp32|fp16|bf16]\n"
    "  DIR holds model/ (config.json, model.safetensors), case.safetensors and case.json.\n"
    "  Compares teacher-forced encoder states and logits with the recorded ones, replays\n"
    "  recorded greedy/beam generation, prints one JSON line, exits 0 only when all match.\n"
    "  --device/--dtype load the model there (default cpu, fp32); in fp16/bf16 the tolerances widen to\n"
    "  the format's precision and generation is not replayed.\n";

}  // namespace

int run_check_fixture(const std::vector<std::string>& args) {
  std::string dir;
  LoadOptions load;
  ArgReader r(args);
  while (r.next()) {
    const auto& a = r.arg();
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--device") {
      load.device = device_from_flag(r.value());
    } else if (a == "--dtype") {
      load.dtype = float_dtype_from_flag(r.value());
    } else if (!a.empty() && a[0] == '-') {
      throw unknown_option(a);
    } else if (!dir.empty()) {
      throw std::invalid_argument("one fixture directory at a time: got '" + dir + "' and '" + a + "'");
    } else {
      dir = a;
    }
  }
  if (dir.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  const auto report = check_fixture(dir, load);
  if (!report.ok) std::cerr << "check-fixture " << dir << ": " << report.detail << "\n";
  std::cout << report.to_json().dump() << std::endl;
  return report.ok ? 0 : 1;
}

}  // namespace srformer::tools
