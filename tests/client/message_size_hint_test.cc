// srformer-client's words on a call refused for a message's size: whose limit refused, and what to change.
#include "client/message_size_hint.h"

#include <gtest/gtest.h>

namespace srformer::client {
namespace {

grpc::Status exhausted(const std::string& message) { return {grpc::StatusCode::RESOURCE_EXHAUSTED, message}; }

// gRPC's own refusal by the server (a server that leaves its limit to gRPC, or a proxy): the request the
// client sent is the message over the limit.
TEST(MessageSizeHint, TheServersLimitSaysWhatToDo) {
  EXPECT_EQ(message_size_hint(exhausted("Received message larger than max (6733342 vs. 4194304)"), 6733342),
            " (the server accepts messages up to 4194304 bytes (its --max-message-bytes); shorten the document or "
            "raise the limit)");
}

// srformer-server says it itself: nothing to add.
TEST(MessageSizeHint, NothingToAddWhereTheServerNamesItsLimit) {
  EXPECT_EQ(message_size_hint(exhausted("Received message larger than max (9606 vs. 4096): this server accepts "
                                        "request messages of up to 4096 bytes (its --max-message-bytes); ..."),
                              9606),
            "");
}

// The client's own limits: on what it sends, and on what it receives (a response that is not its request).
TEST(MessageSizeHint, TheClientsOwnLimitsAreNamedAsSuch) {
  EXPECT_EQ(message_size_hint(exhausted("Sent message larger than max (5000 vs. 4096)"), 5000),
            " (srformer-client's own send limit of 4096 bytes refused the request before it left; the server never "
            "saw it)");
  EXPECT_EQ(message_size_hint(exhausted("Received message larger than max (70000000 vs. 67108864)"), 1200),
            " (the server's response, 70000000 bytes, is over srformer-client's own limit of 67108864 bytes on "
            "what it receives)");
  // A request as large as that limit refused by a server with the same limit is still the server's.
  EXPECT_NE(message_size_hint(exhausted("Received message larger than max (70000000 vs. 67108864)"), 70000000)
                .find("its --max-message-bytes"),
            std::string::npos);
}

TEST(MessageSizeHint, OtherRefusalsGetNone) {
  EXPECT_EQ(message_size_hint(exhausted("the queue of model 'bart' is full (256 requests); retry later"), 10), "");
  EXPECT_EQ(message_size_hint({grpc::StatusCode::INVALID_ARGUMENT, "Received message larger than max (5 vs. 4)"}, 5),
            "");
}

// What the load generator does not wait on: a size refusal comes again however long it waits; a full queue
// (srformer-server's words) may not.
TEST(MessageSizeHint, SizeRefusalsAreToldFromAFullQueue) {
  EXPECT_TRUE(is_message_size_refusal(exhausted("Received message larger than max (6733342 vs. 4194304)")));
  EXPECT_TRUE(is_message_size_refusal(exhausted("Sent message larger than max (5000 vs. 4096)")));
  EXPECT_TRUE(is_message_size_refusal(
      exhausted("Received message larger than max (9606 vs. 4096): this server accepts request messages of up to "
                "4096 bytes (its --max-message-bytes); shorten the document")));
  EXPECT_FALSE(is_message_size_refusal(exhausted(
      "model 'demo' has 64 requests waiting (the queue limit); retry later with backoff, or raise --max-queue")));
  EXPECT_FALSE(is_message_size_refusal(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "Received message larger than max (6733342 vs. 4194304)")));
}

}  // namespace
}  // namespace srformer::client
