#pragma once
// Process-wide spdlog setup shared by the server and tools.
#include <cstdint>
#include <string>
#include <string_view>

namespace srformer::server {

// level: trace|debug|info|warn|error|critical|off; json: one JSON object per line (for log shippers). Every message
// is written through escape_log_message.
void init_logging(const std::string& level, bool json);
// A line as init_logging's JSON log writes it (level as init_logging's), to stderr, flushed, without setting up
// the log, which another thread may be doing: for what the server says before its log is set up.
void write_json_log_line(const std::string& level, std::string_view message);
// Lines init_logging's log did not get onto stderr (a pipe whose reader has gone, a full disk): the lines
// themselves say nothing of it, so srformer_log_lines_dropped_total counts them. Process-wide, from the start.
std::uint64_t log_lines_dropped();
// Whether init_logging takes `level` (spdlog's names; validate() checks the flag with it before logging starts).
bool is_log_level(const std::string& level);

// A log message as written: control characters escaped (\n, \r, \t, \xNN; \uNNNN in JSON) so that no
// message spans lines, and in JSON also `"` and `\`, so that each line stays one valid object.
std::string escape_log_message(std::string_view message, bool json);

}  // namespace srformer::server
