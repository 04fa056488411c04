#include "server/metrics/http_exporter.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace srformer::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

// One client is served at a time, so each gets a deadline for the whole exchange: a client that
// trickles its request (or never reads the reply) cannot hold /metrics, or shutdown, for longer.
constexpr auto kRequestBudget = std::chrono::seconds(2);
constexpr auto kReplyBudget = std::chrono::seconds(5);

// Waits until fd is ready for `events`; false once `deadline` passes or `stop` is set.
bool ready(int fd, short events, SteadyClock::time_point deadline, const std::atomic<bool>& stop) {
  while (!stop) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
  return false;
}

void send_all(int fd, const std::string& data, SteadyClock::time_point deadline, const std::atomic<bool>& stop) {
  size_t sent = 0;
  while (sent < data.size() && ready(fd, POLLOUT, deadline, stop)) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace

HttpExporter::HttpExporter(const std::string& address, std::function<std::string()> body) : body_(std::move(body)) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("expected HOST:PORT, got '" + address + "'");
  std::string host = address.substr(0, colon);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    throw std::runtime_error("cannot resolve '" + address + "': " + gai_strerror(rc));
  }
  std::string error = "no address";
  for (const addrinfo* a = res; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) throw std::runtime_error("cannot listen on '" + address + "': " + error);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  thread_ = std::thread([this] { serve(); });
}

HttpExporter::~HttpExporter() {
  stop_ = true;
  thread_.join();  // serve() polls with a short timeout, so this returns promptly
  ::close(listen_fd_);
}

void HttpExporter::serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    handle(client);
    ::close(client);
  }
}

void HttpExporter::handle(int client) const {
  // Read the request head (bounded: 8 KiB, 2 s in all) — scrapers send a few hundred bytes at once.
  const auto read_by = SteadyClock::now() + kRequestBudget;
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos &&
         request.size() < 8192) {
    if (!ready(client, POLLIN, read_by, stop_)) return;
    const ssize_t n = ::recv(client, buf, sizeof buf, 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  const bool get = request.rfind("GET ", 0) == 0;
  const auto path_end = request.find(' ', 4);
  const std::string path = get && path_end != std::string::npos ? request.substr(4, path_end - 4) : "";
  std::string status = "200 OK";
  std::string type = "text/plain; version=0.0.4; charset=utf-8";
  std::string body;
  if (!get) {
    status = "405 Method Not Allowed";
    type = "text/plain";
    body = "only GET is supported\n";
  } else if (path != "/metrics" && path.rfind("/metrics?", 0) != 0) {
    status = "404 Not Found";
    type = "text/plain";
    body = "metrics are at /metrics\n";
  } else {
    body = body_();
  }
  send_all(client,
           "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\nConnection: close\r\n\r\n" + body,
           SteadyClock::now() + kReplyBudget, stop_);
}

}  // namespace srformer::server
