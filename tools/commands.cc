#include "tools/commands.h"

namespace srformer::tools {

// Each command is defined in its own file (tools/cmd_*.cc).

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
  };
  return list;
}

}  // namespace srformer::tools
