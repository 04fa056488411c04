#include "server/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

namespace srformer::server {

void init_logging(const std::string& level, bool json) {
  auto logger = spdlog::stderr_color_mt("srformer");
  const auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    throw std::invalid_argument("unknown log level '" + level + "' (use trace|debug|info|warn|error|off)");
  }
  logger->set_level(lvl);
  if (json) {
    logger->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","thread":%t,"msg":"%v"})");
  } else {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ [%t] %v");
  }
  spdlog::set_default_logger(logger);
}

}  // namespace srformer::server
