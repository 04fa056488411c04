#!/usr/bin/env python3
"""An independent client (Debian python3-grpcio + python3-protobuf, no generated code): lists the
server's services through gRPC server reflection, fetches the Summarizer's descriptors the same way,
builds message classes from them and calls Summarize, SummarizeStream and ListModels; then does the same
for grpc.health.v1.Health (as `grpcurl describe` / `grpcurl ... grpc.health.v1.Health/Check` would) and
calls Check.

usage: python_reflection_client.py HOST:PORT DOCUMENT_FILE [v1|v1alpha]   (the reflection version, default v1)
Prints one JSON object: services, models, unary {summary, token_ids}, stream {text, token_ids, final},
health (Check's status name, or the reflection error).
"""
import json
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

REFLECTION = "/grpc.reflection.%s.ServerReflection/ServerReflectionInfo"


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_bytes(number, payload):
    return varint((number << 3) | 2) + varint(len(payload)) + payload


def fields(buf):
    """Yields (field number, wire type, value) of one protobuf message (varint and bytes fields)."""
    i = 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = read_varint(buf, i)
        elif wire == 2:
            n, i = read_varint(buf, i)
            value, i = buf[i:i + n], i + n
        else:
            raise ValueError("unexpected wire type %d" % wire)
        yield number, wire, value


def read_varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def reflect(channel, version, requests):
    call = channel.stream_stream(REFLECTION % version, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    return list(call(iter(requests), timeout=60))


def pool_of(files):
    """A descriptor pool holding the serialized FileDescriptorProtos `files`."""
    pool = descriptor_pool.DescriptorPool()
    pending = [descriptor_pb2.FileDescriptorProto.FromString(f) for f in files]
    while pending:  # add in dependency order
        progress = False
        for fd in list(pending):
            try:
                pool.Add(fd)
                pending.remove(fd)
                progress = True
            except Exception:
                pass
        if not progress:
            raise SystemExit("cannot resolve descriptors: %s" % [f.name for f in pending])
    return pool


def health_through_reflection(channel, version):
    """Check's status name, from messages built out of what reflection says of grpc.health.v1.Health."""
    files = []
    for resp in reflect(channel, version, [field_bytes(4, b"grpc.health.v1.Health")]):
        for number, _, value in fields(resp):
            if number == 4:
                files += [v for n, _, v in fields(value) if n == 1]
            elif number == 7:  # error_response: error_code (1), error_message (2)
                return "reflection error: " + "".join(v.decode() for n, _, v in fields(value) if n == 2)
    pool = pool_of(files)
    service = pool.FindServiceByName("grpc.health.v1.Health")
    check = service.FindMethodByName("Check")
    factory = message_factory.MessageFactory(pool)
    req_cls, resp_cls = factory.GetPrototype(check.input_type), factory.GetPrototype(check.output_type)
    call = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=req_cls.SerializeToString,
                               response_deserializer=resp_cls.FromString)
    resp = call(req_cls(service="srformer.v1.Summarizer"), timeout=10)
    return check.output_type.fields_by_name["status"].enum_type.values_by_number[resp.status].name


def main():
    target, doc_file = sys.argv[1], sys.argv[2]
    version = sys.argv[3] if len(sys.argv) > 3 else "v1"
    channel = grpc.insecure_channel(target)
    grpc.channel_ready_future(channel).result(timeout=60)  # generous: CI machines are shared

    # list_services (field 7) and file_containing_symbol (field 4).
    responses = reflect(channel, version, [field_bytes(7, b""), field_bytes(4, b"srformer.v1.Summarizer")])
    services, files = [], []
    for resp in responses:
        for number, _, value in fields(resp):
            if number == 6:  # list_services_response
                for _, _, service in fields(value):
                    services += [v.decode() for n, _, v in fields(service) if n == 1]
            elif number == 4:  # file_descriptor_response
                files += [v for n, _, v in fields(value) if n == 1]
            elif number == 7:
                raise SystemExit("reflection error: %r" % value)

    pool = pool_of(files)
    factory = message_factory.MessageFactory(pool)
    cls = lambda name: factory.GetPrototype(pool.FindMessageTypeByName("srformer.v1." + name))
    Request, Response = cls("SummarizeRequest"), cls("SummarizeResponse")
    StreamResponse, ListReq, ListResp = cls("SummarizeStreamResponse"), cls("ListModelsRequest"), cls("ListModelsResponse")

    def method(name, req, resp, stream=False):
        kind = channel.unary_stream if stream else channel.unary_unary
        return kind("/srformer.v1.Summarizer/" + name, request_serializer=req.SerializeToString,
                    response_deserializer=resp.FromString)

    models = method("ListModels", ListReq, ListResp)(ListReq(), timeout=10)
    document = open(doc_file, "rb").read()
    req = Request(document=document)
    req.options.max_new_tokens = 16
    unary = method("Summarize", Request, Response)(req, timeout=30)
    text, ids, final = "", [], None
    for msg in method("SummarizeStream", Request, StreamResponse, stream=True)(req, timeout=30):
        if msg.HasField("token"):
            text += msg.token.text
            ids.append(msg.token.token_id)
        else:
            final = msg.final

    bad = Request(document=b"   ")
    try:
        method("Summarize", Request, Response)(bad, timeout=10)
        error = None
    except grpc.RpcError as e:
        error = {"code": e.code().name, "details": e.details()}

    print(json.dumps({
        "services": sorted(services),
        "models": [m.name for m in models.models],
        "unary": {"summary": unary.summary, "token_ids": list(unary.token_ids),
                  "finish_reason": unary.finish_reason, "input_tokens": unary.usage.input_tokens},
        "stream": {"text": text, "token_ids": ids, "final_summary": final.summary if final else None},
        "whitespace_error": error,
        "health": health_through_reflection(channel, version),
    }))


if __name__ == "__main__":
    main()
