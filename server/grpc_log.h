#pragma once
// gRPC core writes its own lines to stderr (glog style: "E1128 01:52:59.8 10536 chttp2_server.cc:1045]
// UNKNOWN:No address added ... {children: ...}"). They broke --log-json's one object a line, and came
// before our own message saying the same thing. Here they go through spdlog instead.
#include <string>

namespace srformer::server {

// From now on every gRPC log line is an spdlog line ("grpc: MESSAGE (FILE:LINE)") at its severity.
void route_grpc_logs_to_spdlog();

// Likewise protobuf's ("protobuf: MESSAGE (FILE:LINE)"), which wrote "[libprotobuf ERROR ...]" to stderr:
// one for each request a client sends with a string field that is not UTF-8. Call before serving (protobuf's
// handler is not set thread-safely).
void route_protobuf_logs_to_spdlog();

// While one is alive, gRPC's lines from this thread are collected, not logged: a failed bind's error
// tree becomes part of the message that says what to do.
class GrpcLogCapture {
 public:
  GrpcLogCapture();
  ~GrpcLogCapture();
  GrpcLogCapture(const GrpcLogCapture&) = delete;
  GrpcLogCapture& operator=(const GrpcLogCapture&) = delete;

  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::string* outer_;  // the enclosing capture's text, restored when this one ends
};

// The operating system's reason in a gRPC error text (os_error:"Address already in use"); "" if none.
std::string grpc_os_error(const std::string& text);

}  // namespace srformer::server
