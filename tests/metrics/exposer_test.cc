// The exposer serves /metrics over real HTTP; a taken port fails with an actionable message.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "server/metrics/http_exporter.h"
#include "server/metrics/metrics.h"
#include "tests/metrics/scrape.h"

namespace srformer::server {
namespace {

using testing::http_get;

// "200" from "HTTP/1.x 200 OK..."; "" when the response is not HTTP.
std::string status_code(const std::string& response) {
  return response.rfind("HTTP/1.", 0) == 0 && response.size() >= 12 ? response.substr(9, 3) : "";
}

TEST(Exposer, ServesMetricsOverHttp) {
  Metrics metrics("127.0.0.1:0");  // port 0: the kernel picks a free port
  const auto ports = metrics.listening_ports();
  ASSERT_EQ(ports.size(), 1u);
  ASSERT_GT(ports[0], 0);
  metrics.model("bart").on_request_end("Summarize", "OK", 0.1);

  const std::string response = http_get(ports[0], "/metrics");
  ASSERT_EQ(status_code(response), "200") << response.substr(0, 200);
  EXPECT_NE(response.find("text/plain"), std::string::npos);
  const std::string body = response.substr(response.find("\r\n\r\n") + 4);
  EXPECT_EQ(testing::sample(body, "srformer_requests_total", {{"model", "bart"}, {"code", "OK"}}), 1.0);
  EXPECT_TRUE(testing::sample(body, "process_resident_memory_bytes").has_value());
}

// A scrape reads /proc then, not the periodic sampler's last reading (here an hour old).
TEST(Exposer, ScrapeSamplesProcessMetricsAtScrapeTime) {
  Metrics metrics("127.0.0.1:0", std::chrono::hours(1));
  const int port = metrics.listening_ports().at(0);
  const auto cpu_seconds = [&] {
    const std::string response = http_get(port, "/metrics");
    return testing::sample(response.substr(response.find("\r\n\r\n") + 4), "process_cpu_seconds_total").value_or(-1);
  };
  const double before = cpu_seconds();
  ASSERT_GT(before, 0.0);
  testing::burn_cpu(std::chrono::milliseconds(200));  // /proc counts in 10-ms ticks
  EXPECT_GE(cpu_seconds(), before + 0.1);
}

TEST(Exposer, UnknownPathIsNotFound) {
  Metrics metrics("127.0.0.1:0");
  const std::string response = http_get(metrics.listening_ports().at(0), "/nope");
  EXPECT_EQ(status_code(response), "404") << response.substr(0, 200);
}

// A client that sends its request a byte at a time (or never finishes it) is dropped when its 2-second
// budget runs out, and scrapes meanwhile are served beside it.
TEST(Exposer, ATricklingClientCannotHoldTheEndpoint) {
  Metrics metrics("127.0.0.1:0");
  const int port = metrics.listening_ports().at(0);
  const int slow = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(slow, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(slow, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    // A byte every 0.5 s: each within the old per-read timeout, never a whole request.
    const std::string head = "GET /metrics HTTP/1.0\r\nX-Slow: ";
    for (size_t i = 0; !done && i < 80; ++i) {  // up to 40 s
      if (send(slow, head.data() + (i % head.size()), 1, MSG_NOSIGNAL) != 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the trickler is being served
  const auto t0 = std::chrono::steady_clock::now();
  const std::string response = http_get(port, "/metrics");  // waits behind it, at most its budget
  const auto waited = std::chrono::steady_clock::now() - t0;
  done = true;
  trickle.join();
  close(slow);
  EXPECT_EQ(status_code(response), "200") << response.substr(0, 200);
  // Not a speed figure: without the budget the scrape waits out the whole 40 s trickle.
  EXPECT_LT(waited, std::chrono::seconds(15));
}

// Idle connections (a port scanner, a stuck load balancer) take no turn from a scrape: each used to hold
// the single-file endpoint for its 2-second budget, so 40 of them kept /metrics away for 80 s.
TEST(Exposer, IdleConnectionsDoNotDelayAScrape) {
  Metrics metrics("127.0.0.1:0");
  const int port = metrics.listening_ports().at(0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) {  // more than the 32 connections served at once
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    const std::string part = "GET /met";
    ASSERT_EQ(send(fd, part.data(), part.size(), MSG_NOSIGNAL), static_cast<ssize_t>(part.size()));
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all accepted
  const auto t0 = std::chrono::steady_clock::now();
  const std::string response = http_get(port, "/metrics");
  const auto waited = std::chrono::steady_clock::now() - t0;
  for (const int fd : idle) close(fd);
  EXPECT_EQ(status_code(response), "200") << response.substr(0, 200);
  // Not a speed figure: served in turn, the scrape would wait 80 s.
  EXPECT_LT(waited, std::chrono::seconds(10));
}

// HEAD answers as GET does, without the body; other methods are refused.
TEST(Exposer, HeadAnswersWithoutTheBody) {
  Metrics metrics("127.0.0.1:0");
  const int port = metrics.listening_ports().at(0);
  const std::string head = http_get(port, "/metrics", "HEAD");
  ASSERT_EQ(status_code(head), "200") << head;
  EXPECT_EQ(testing::http_body(head), "");
  const auto length = head.find("Content-Length: ");
  ASSERT_NE(length, std::string::npos) << head;
  EXPECT_GT(std::stoll(head.substr(length + 16)), 0);
  EXPECT_EQ(status_code(http_get(port, "/metrics", "POST")), "405");
}

// A body that throws answers 500 and the endpoint serves on: the exception escaped the exporter's
// thread, which has no one above it to catch it, and ended the process.
TEST(Exposer, ABodyThatThrowsAnswers500AndServesOn) {
  std::atomic<int> calls{0};
  HttpExporter exporter("127.0.0.1:0", [&]() -> std::string {
    if (calls++ == 0) throw std::runtime_error("out of memory, say");
    return "ok_metric 1\n";
  });
  const std::string failed = testing::http_get(exporter.port(), "/metrics");
  EXPECT_EQ(failed.rfind("HTTP/1.1 500 Internal Server Error", 0), 0u) << failed;
  EXPECT_NE(failed.find("collecting the metrics failed: out of memory, say"), std::string::npos) << failed;
  EXPECT_EQ(testing::http_body(testing::http_get(exporter.port(), "/metrics")), "ok_metric 1\n");
}

TEST(Exposer, TakenPortThrowsWithHint) {
  Metrics first("127.0.0.1:0");
  const std::string taken = "127.0.0.1:" + std::to_string(first.listening_ports().at(0));
  try {
    Metrics second(taken);
    FAIL() << "binding a taken port must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-listen"), std::string::npos) << e.what();
  }
}

TEST(Exposer, NoAddressNoListener) {
  Metrics metrics("");
  EXPECT_TRUE(metrics.listening_ports().empty());
}

}  // namespace
}  // namespace srformer::server
