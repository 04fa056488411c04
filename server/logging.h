#pragma once
// Process-wide spdlog setup shared by the server and tools.
#include <string>

namespace srformer::server {

// level: trace|debug|info|warn|error; json: one JSON object per line (for log shippers).
void init_logging(const std::string& level, bool json);

}  // namespace srformer::server
