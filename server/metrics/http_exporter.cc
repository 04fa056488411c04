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
#include <string>
#include <thread>
#include <vector>

namespace srformer::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Each connection gets a deadline for its request and one for its reply: a client that trickles its
// request (or never reads the reply) holds a slot for that long at most, never /metrics itself.
constexpr auto kRequestBudget = std::chrono::seconds(2);
constexpr auto kReplyBudget = std::chrono::seconds(5);
constexpr size_t kMaxRequestHead = 8192;
// Open connections served at once; past it the one that has been waiting longest for its request goes
// (scrapers send their request at once, so idle sockets are what fill the slots).
constexpr size_t kMaxConnections = 32;

bool head_complete(const std::string& request) {
  return request.find("\r\n\r\n") != std::string::npos || request.find("\n\n") != std::string::npos;
}

}  // namespace

struct HttpExporter::Connection {
  int fd = -1;
  std::string request;
  std::string reply;  // empty while the request is read
  size_t sent = 0;
  SteadyClock::time_point deadline;
};

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
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
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
  std::vector<Connection> connections;
  const auto close_at = [&](size_t i) {
    ::close(connections[i].fd);
    connections.erase(connections.begin() + static_cast<std::ptrdiff_t>(i));
  };
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.assign(1, pollfd{listen_fd_, POLLIN, 0});
    for (const auto& c : connections) fds.push_back({c.fd, static_cast<short>(c.reply.empty() ? POLLIN : POLLOUT), 0});
    if (::poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) continue;
    const auto now = SteadyClock::now();
    // Newest first, so that closing one leaves the indexes still to visit alone.
    for (size_t i = connections.size(); i-- > 0;) {
      Connection& c = connections[i];
      const short events = fds[i + 1].revents;
      bool done = now >= c.deadline || (events & (POLLERR | POLLNVAL)) != 0;
      if (!done && c.reply.empty() && (events & (POLLIN | POLLHUP)) != 0) {
        char buf[1024];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n <= 0) {
          done = n == 0 || (errno != EAGAIN && errno != EINTR);
        } else {
          c.request.append(buf, static_cast<size_t>(n));
          if (head_complete(c.request)) {
            c.reply = reply_to(c.request);
            c.deadline = now + kReplyBudget;
          } else if (c.request.size() >= kMaxRequestHead) {
            done = true;
          }
        }
      }
      if (!done && !c.reply.empty() && (events & POLLOUT) != 0) {
        const ssize_t n = ::send(c.fd, c.reply.data() + c.sent, c.reply.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) c.sent += static_cast<size_t>(n);
        done = c.sent == c.reply.size() || (n < 0 && errno != EAGAIN && errno != EINTR);
      }
      if (done) close_at(i);
    }
    if ((fds[0].revents & POLLIN) == 0) continue;
    for (int client; (client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
      if (connections.size() >= kMaxConnections) {
        // The connection still reading that has waited longest (all are within their request budget).
        size_t oldest = connections.size();
        for (size_t i = 0; i < connections.size(); ++i) {
          if (connections[i].reply.empty() &&
              (oldest == connections.size() || connections[i].deadline < connections[oldest].deadline)) {
            oldest = i;
          }
        }
        if (oldest == connections.size()) {  // every slot is sending a reply: the newcomer waits no better
          ::close(client);
          continue;
        }
        close_at(oldest);
      }
      connections.push_back({client, {}, {}, 0, now + kRequestBudget});
    }
    // Out of descriptors (or memory): the listening socket stays readable, so wait rather than spin.
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  for (const auto& c : connections) ::close(c.fd);
}

std::string HttpExporter::reply_to(const std::string& request) const {
  // HEAD: what GET would answer, without the body (curl -I, load balancers' checks).
  const bool head = request.rfind("HEAD ", 0) == 0;
  const bool get = request.rfind("GET ", 0) == 0;
  const size_t path_start = head ? 5 : 4;
  const auto path_end = request.find(' ', path_start);
  const std::string path =
      (get || head) && path_end != std::string::npos ? request.substr(path_start, path_end - path_start) : "";
  std::string status = "200 OK";
  std::string type = "text/plain; version=0.0.4; charset=utf-8";
  std::string body;
  if (!get && !head) {
    status = "405 Method Not Allowed";
    type = "text/plain";
    body = "only GET and HEAD are supported\n";
  } else if (path != "/metrics" && path.rfind("/metrics?", 0) != 0) {
    status = "404 Not Found";
    type = "text/plain";
    body = "metrics are at /metrics\n";
  } else {
    try {
      body = body_();
    } catch (const std::exception& e) {  // this thread has no one above it to catch: it would end the process
      status = "500 Internal Server Error";
      type = "text/plain";
      body = std::string("collecting the metrics failed: ") + e.what() + "\n";
    }
  }
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + (head ? std::string() : body);
}

}  // namespace srformer::server
