#include "server/grpc_log.h"

#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>
#include <spdlog/spdlog.h>

#include <string>

namespace srformer::server {

namespace {

thread_local std::string* capture_text = nullptr;  // the innermost live GrpcLogCapture's text on this thread

void to_spdlog(gpr_log_func_args* args) {
  if (capture_text != nullptr) {
    *capture_text += args->message;
    *capture_text += '\n';
    return;
  }
  const auto level = args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
                     : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                               : spdlog::level::debug;
  spdlog::log(level, "grpc: {} ({}:{})", args->message, args->file, args->line);
}

void protobuf_to_spdlog(google::protobuf::LogLevel severity, const char* file, int line, const std::string& message) {
  // protobuf calls a request body it cannot parse (a string field not in UTF-8) an ERROR. That is the
  // client's fault, already answered with INVALID_ARGUMENT: at error level any client could trip an
  // operator's error-rate alert. Its errors serializing our own answers stay errors.
  const bool clients_body = message.find("when parsing a protocol buffer") != std::string::npos;
  const auto level = severity == google::protobuf::LOGLEVEL_FATAL                    ? spdlog::level::critical
                     : severity == google::protobuf::LOGLEVEL_ERROR && !clients_body ? spdlog::level::err
                     : severity >= google::protobuf::LOGLEVEL_WARNING                ? spdlog::level::warn
                                                                                     : spdlog::level::info;
  const auto end = message.find_last_not_of(" \n");  // protobuf ends some messages with a space
  spdlog::log(level, "protobuf: {} ({}:{})", message.substr(0, end == std::string::npos ? 0 : end + 1), file, line);
}

}  // namespace

void route_grpc_logs_to_spdlog() { gpr_set_log_function(to_spdlog); }

void route_protobuf_logs_to_spdlog() { google::protobuf::SetLogHandler(protobuf_to_spdlog); }

GrpcLogCapture::GrpcLogCapture() : outer_(capture_text) {
  route_grpc_logs_to_spdlog();  // the default function writes to stderr without asking us
  capture_text = &text_;
}

GrpcLogCapture::~GrpcLogCapture() { capture_text = outer_; }

std::string grpc_os_error(const std::string& text) {
  const std::string key = "os_error:\"";
  const auto at = text.find(key);
  if (at == std::string::npos) return "";
  const auto end = text.find('"', at + key.size());
  return end == std::string::npos ? "" : text.substr(at + key.size(), end - at - key.size());
}

}  // namespace srformer::server
