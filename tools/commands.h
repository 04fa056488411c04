#pragma once
// Registry of `srformer` subcommands.
#include <functional>
#include <string>
#include <vector>

namespace srformer::tools {

struct Command {
  std::string name;
  std::string summary;
  std::function<int(const std::vector<std::string>&)> run;
};

const std::vector<Command>& commands();

}  // namespace srformer::tools
