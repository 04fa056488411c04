// `srformer`: the offline tool. Each subcommand lives in its own file (tools/cmd_*.cc).
#include <iostream>
#include <string>
#include <vector>

#include "common/standard_streams.h"
#include "common/stdout_check.h"
#include "model/error_message.h"
#include "model/openmp_env.h"
#include "tools/commands.h"

namespace {

void usage(std::ostream& os) {
  os << "usage: srformer <command> [options]\n\ncommands:\n";
  for (const auto& c : srformer::tools::commands())
    os << "  " << c.name << std::string(16 - std::min<size_t>(15, c.name.size()), ' ') << c.summary << "\n";
  os << "\nRun `srformer <command> --help` for a command's options.\n";
}

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage(std::cout);
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  for (const auto& c : srformer::tools::commands()) {
    if (c.name == name) {
      std::vector<std::string> args(argv + 2, argv + argc);
      try {
        return c.run(args);
      } catch (const std::exception& e) {
        std::cerr << "srformer " << name << ": " << srformer::error_message(e) << "\n";
        return 1;
      }
    }
  }
  std::cerr << "srformer: unknown command '" << name << "'\n";
  usage(std::cerr);
  return 2;
}

}  // namespace

// Before anything opens a file: started with stderr closed (`2>&-`), `srformer eval` opened its predictions
// file as fd 2 and wrote its progress line into it, and any file a command holds open could so take fd 0, 1 or
// 2. From .preinit_array, as srformer-client's and srformer-server's (this tool does not load libgrpc).
__attribute__((section(".preinit_array"),
               used)) void (*const hold_standard_streams)() = srformer::hold_closed_standard_streams;

int main(int argc, char** argv) {
  srformer::reexec_with_openmp_policy(argv);
  // A summary, a report or a usage text that never reached stdout (a full disk, /dev/full) fails the
  // command, saying why: it exited 0 with the text lost.
  srformer::StdoutCheck stdout_check("srformer");
  return stdout_check.exit_status(run(argc, argv));
}
