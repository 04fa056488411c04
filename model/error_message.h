#pragma once
// What a user is shown of an exception. LibTorch's errors (c10::Error) carry a C++ backtrace in what();
// a log line, a gRPC status message or a tool's one-line error wants the message alone.
#include <exception>
#include <string>

namespace srformer {

// e.what(), without LibTorch's backtrace and source-location suffix where e is a c10::Error; a
// std::filesystem error as the path and the reason, with what to do about a permission denied.
std::string error_message(const std::exception& e);

}  // namespace srformer
