#include "server/service/message_body.h"

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <new>
#include <stdexcept>
#include <string>

namespace srformer::server {

grpc::Status parse_body(const grpc::ByteBuffer& body, google::protobuf::Message& out, const char* proto) {
  const std::string type = out.GetTypeName();
  const std::string hint = std::string("; build the client from ") + proto;
  if (!body.Valid()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "the call carried no " + type + " message" + hint};
  }
  grpc::ByteBuffer copy(body);  // the reader consumes its buffer; copying shares the slices
  grpc::ProtoBufferReader reader(&copy);
  if (!reader.status().ok() || !out.ParseFromZeroCopyStream(&reader)) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "the request body is not a valid " + type +
                " message (cut short, a string field that is not UTF-8, or fields of other types)" + hint};
  }
  return grpc::Status::OK;
}

grpc::Status check_body_size(const grpc::ByteBuffer& body, int64_t max_bytes) {
  const size_t bytes = body.Length();
  if (max_bytes <= 0 || bytes <= static_cast<size_t>(max_bytes)) return grpc::Status::OK;
  const std::string limit = std::to_string(max_bytes);
  return {grpc::StatusCode::RESOURCE_EXHAUSTED,
          "Received message larger than max (" + std::to_string(bytes) + " vs. " + limit +
              "): this server accepts request messages of up to " + limit +
              " bytes (its --max-message-bytes); shorten the document (or send fewer in a batch) or raise the "
              "server's limit"};
}

grpc::Status serialize_body(const google::protobuf::Message& message, grpc::ByteBuffer& out) {
  bool own_buffer = false;
  const grpc::Status status =
      grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, &out, &own_buffer);
  if (status.ok()) return status;
  return {grpc::StatusCode::INTERNAL, "cannot serialize the " + message.GetTypeName() + ": " + status.error_message()};
}

grpc::Status build_response(const std::function<grpc::Status()>& build) {
  try {
    return build();
  } catch (const std::bad_alloc&) {
    return {grpc::StatusCode::RESOURCE_EXHAUSTED, "the server ran out of memory building the response; retry later"};
  } catch (const std::exception& e) {
    return {grpc::StatusCode::INTERNAL, std::string("building the response failed: ") + e.what()};
  }
}

int64_t held_bytes(const grpc::ByteBuffer& body) {
  const size_t bytes = body.Length();
  // A slice not held inline: its refcount header and the allocator's rounding.
  constexpr size_t kSliceAllocation = 32;
  return static_cast<int64_t>(bytes + sizeof(grpc::ByteBuffer) + sizeof(grpc_byte_buffer) +
                              (bytes > GRPC_SLICE_INLINED_SIZE ? kSliceAllocation : 0));
}

}  // namespace srformer::server
