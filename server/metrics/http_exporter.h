#pragma once
// Minimal HTTP/1.x server for GET /metrics. We do not use prometheus::Exposer: its civetweb starts worker
// threads with a fixed small stack, which glibc rejects (EINVAL) once LibTorch's large static TLS is loaded,
// so the exposer fails in any process that links LibTorch ("Cannot create first worker thread").
#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace srformer::server {

class HttpExporter {
 public:
  // Binds "HOST:PORT" (port 0 = ephemeral) and serves `body()` at /metrics (GET and HEAD) from one
  // thread, to up to 32 connections at once.
  // Throws std::runtime_error if the address cannot be bound.
  HttpExporter(const std::string& address, std::function<std::string()> body);
  ~HttpExporter();
  HttpExporter(const HttpExporter&) = delete;
  HttpExporter& operator=(const HttpExporter&) = delete;

  int port() const { return port_; }

 private:
  struct Connection;
  void serve();
  std::string reply_to(const std::string& request) const;

  const std::function<std::string()> body_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace srformer::server
