// gRPC core's and protobuf's own log lines go through spdlog (one line, our format) and a failed bind's
// error tree is collected for the message that says what to do.
#include "server/grpc_log.h"

#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <thread>

#include "server/service/message_body.h"
#include "srformer/v1/summarizer.pb.h"

namespace srformer::server {
namespace {

TEST(GrpcLog, LinesGoThroughSpdlogAndACaptureCollectsThisThreadsOnly) {
  std::ostringstream out;
  const auto previous = spdlog::default_logger();
  auto logger =
      std::make_shared<spdlog::logger>("grpc-log-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  logger->set_pattern("%l %v");
  spdlog::set_default_logger(logger);
  grpc_init();  // gRPC 1.51 drops every line before its first init (the server's builder does it)
  route_grpc_logs_to_spdlog();
  gpr_log(GPR_ERROR, "%s", "something failed");
  EXPECT_NE(out.str().find("error grpc: something failed ("), std::string::npos) << out.str();
  {
    const GrpcLogCapture capture;
    gpr_log(GPR_ERROR, "%s", "bind: os_error:\"Address already in use\", syscall:\"bind\"");
    std::thread([] { gpr_log(GPR_ERROR, "%s", "from another thread"); }).join();
    EXPECT_EQ(capture.text(), "bind: os_error:\"Address already in use\", syscall:\"bind\"\n");
    EXPECT_EQ(grpc_os_error(capture.text()), "Address already in use");
  }
  EXPECT_NE(out.str().find("grpc: from another thread"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("Address already in use"), std::string::npos) << "a captured line was logged too";
  gpr_log(GPR_ERROR, "%s", "after the capture");
  EXPECT_NE(out.str().find("grpc: after the capture"), std::string::npos) << out.str();
  spdlog::set_default_logger(previous);
  grpc_shutdown();
}

// A request whose string field is not UTF-8 is refused (INVALID_ARGUMENT, logged by the service), and
// protobuf says so itself as it parses: that line went straight to stderr ("[libprotobuf ERROR ...]"), a
// plain-text line any client could put into a --log-json log.
TEST(ProtobufLog, AMalformedRequestsLineGoesThroughSpdlogNotStderr) {
  std::ostringstream out;
  const auto previous = spdlog::default_logger();
  auto logger =
      std::make_shared<spdlog::logger>("protobuf-log-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  logger->set_pattern("%l %v");
  spdlog::set_default_logger(logger);
  route_protobuf_logs_to_spdlog();
  const std::string body = "\x0a\x02\xff\xfe\x12\x03\x61\x62\x63";  // model: 2 bytes not UTF-8; document "abc"
  const grpc::Slice slice(body);
  const grpc::ByteBuffer buffer(&slice, 1);
  v1::SummarizeRequest request;
  testing::internal::CaptureStderr();
  const grpc::Status status = parse_body(buffer, request);
  const std::string stderr_text = testing::internal::GetCapturedStderr();
  spdlog::set_default_logger(previous);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(stderr_text, "");
  const std::string logged = out.str();
  EXPECT_EQ(
      logged.rfind("warning protobuf: String field 'srformer.v1.SummarizeRequest.model' contains invalid UTF-8", 0), 0u)
      << logged;
  EXPECT_NE(logged.find("wire_format_lite.cc:"), std::string::npos) << logged;
  EXPECT_EQ(std::count(logged.begin(), logged.end(), '\n'), 1) << "one line: " << logged;
}

TEST(GrpcLog, OsErrorIsEmptyWhereGrpcGaveNone) {
  EXPECT_EQ(grpc_os_error("UNKNOWN:No address added out of total 1 resolved"), "");
  EXPECT_EQ(grpc_os_error("os_error:\"unterminated"), "");
}

}  // namespace
}  // namespace srformer::server
