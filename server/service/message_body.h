#pragma once
// Request bodies parsed, and responses serialized, by the service rather than by gRPC's generated
// handlers: the callback API answers a body that does not parse with UNIMPLEMENTED and no message (as
// if the method did not exist); a client built from another proto must hear INVALID_ARGUMENT and why.
#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <functional>

namespace srformer::server {

// Parses `body` into `out`; INVALID_ARGUMENT naming the message type when it is not one, and `proto`, the
// file to build the client from.
grpc::Status parse_body(const grpc::ByteBuffer& body, google::protobuf::Message& out,
                        const char* proto = "this server's proto/srformer/v1/summarizer.proto");

// RESOURCE_EXHAUSTED for a body over `max_bytes` (0: no limit), else OK. The message starts as gRPC's own
// refusal does ("Received message larger than max (N vs. LIMIT)", which clients and tools recognise) and
// says what to change.
grpc::Status check_body_size(const grpc::ByteBuffer& body, int64_t max_bytes);

// INTERNAL where it cannot (a message over protobuf's 2 GB limit; never for the responses we build).
grpc::Status serialize_body(const google::protobuf::Message& message, grpc::ByteBuffer& out);

// What `build` (filling a response and serialize_body) returns. An exception there becomes the status rather
// than escape the callback before Finish(), which left the call open and the server's shutdown waiting
// for it: RESOURCE_EXHAUSTED for memory (a retry later may fit; as where a request is prepared or queued),
// INTERNAL otherwise ("building the response failed: ...").
grpc::Status build_response(const std::function<grpc::Status()>& build);

// The memory a serialized message waiting in a grpc::ByteBuffer holds: its bytes, the grpc_byte_buffer
// gRPC allocates around them (a slice buffer with room for 8 slices inline, ~300 bytes) and, past
// GRPC_SLICE_INLINED_SIZE (23 bytes), its slice's own allocation. A stream's token message (~20 bytes)
// holds some 330, 16 times its Length().
int64_t held_bytes(const grpc::ByteBuffer& body);

}  // namespace srformer::server
