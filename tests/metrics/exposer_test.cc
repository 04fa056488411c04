// The exposer serves /metrics over real HTTP; a taken port fails with an actionable message.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>

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
