#!/usr/bin/env python3
"""Summarize a file with srformer-server from Python (grpcio + protobuf).

Message classes come from the .proto with `protoc --python_out` (Debian: protobuf-compiler); the
calls use grpcio's generic stubs, so the gRPC Python code generator is not needed. Debian bookworm's
`python3 -m grpc_tools.protoc` (python3-grpc-tools 1.14) refuses the proto's `optional` fields ("Explicit
'optional' labels are disallowed in the Proto3 syntax"); `protoc` from protobuf-compiler (3.21) is what works.

  python3 examples/python/summarize.py --target localhost:50051 [--stream] [--model NAME] [--max-new-tokens N]
      [--num-beams N] [--deadline-ms N] FILE

A call has no deadline unless --deadline-ms gives one: a long document on a CPU may rightly take minutes
(docs/API.md, as srformer-client's --deadline-ms).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.join(HERE, "..", "..", "proto")


def load_messages():
    # Generated into a directory that goes once the module is imported: Python keeps it in memory.
    with tempfile.TemporaryDirectory(prefix="srformer_pb_") as out:
        subprocess.run(["protoc", "--proto_path=" + PROTO_ROOT, "--python_out=" + out,
                        "srformer/v1/summarizer.proto"], check=True)
        sys.path.insert(0, out)
        try:
            from srformer.v1 import summarizer_pb2  # noqa: E402  (generated above)
        finally:
            sys.path.remove(out)
    return summarizer_pb2


def int32(text):
    # protobuf raises ValueError (a traceback) for an int32 field's value out of range: refuse it here.
    value = int(text)
    if not -2**31 <= value < 2**31:
        raise argparse.ArgumentTypeError("%s is out of int32's range" % text)
    return value


def deadline_ms(text):
    # As srformer-client's --deadline-ms: 0 is none; past a day is no deadline a summary needs, and far
    # past it grpcio's deadline overflowed (DEADLINE_EXCEEDED at once).
    value = int(text)
    if not 0 <= value <= 24 * 3600 * 1000:
        raise argparse.ArgumentTypeError("must be from 0 (no deadline) to 86400000 (a day), got %s" % text)
    return value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="localhost:50051")
    ap.add_argument("--model", default="")
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--max-new-tokens", type=int32)
    ap.add_argument("--num-beams", type=int32)
    ap.add_argument("--deadline-ms", type=deadline_ms, default=0)
    ap.add_argument("file")
    args = ap.parse_args()

    pb = load_messages()
    # Calls refused before any work (a full queue, a server shutting down) are sent again, after the
    # server's grpc-retry-pushback-ms where it gives one (docs/API.md, "Retries"). gRPC sends again only
    # what fits its per-call retry buffer, 256 KiB unless set: a longer document was sent once.
    retry = {"methodConfig": [{"name": [{"service": "srformer.v1.Summarizer"}], "retryPolicy": {
        "maxAttempts": 3, "initialBackoff": "0.2s", "maxBackoff": "5s", "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}
    channel = grpc.insecure_channel(args.target, options=[("grpc.service_config", json.dumps(retry)),
                                                          ("grpc.per_rpc_retry_buffer_size", 2**31 - 1)])
    try:
        with open(args.file, "rb") as f:
            req = pb.SummarizeRequest(model=args.model, document=f.read())  # bytes: UTF-8 text
    except OSError as e:
        print("error: cannot read %s: %s" % (args.file, e.strerror), file=sys.stderr)
        return 2
    # Set only when given (0 included: the server then says why it refuses it); unset: the model's default.
    if args.max_new_tokens is not None:
        req.options.max_new_tokens = args.max_new_tokens
    if args.num_beams is not None:
        req.options.num_beams = args.num_beams

    # None: no deadline (a fixed 120 s one failed long CPU summaries the server was still making).
    timeout = args.deadline_ms / 1000 if args.deadline_ms else None
    try:
        if args.stream:
            call = channel.unary_stream("/srformer.v1.Summarizer/SummarizeStream",
                                        request_serializer=pb.SummarizeRequest.SerializeToString,
                                        response_deserializer=pb.SummarizeStreamResponse.FromString)
            for msg in call(req, timeout=timeout):
                if msg.HasField("token"):
                    print(msg.token.text, end="", flush=True)
                else:
                    print()
                    print("usage:", msg.final.usage, file=sys.stderr)
        else:
            call = channel.unary_unary("/srformer.v1.Summarizer/Summarize",
                                       request_serializer=pb.SummarizeRequest.SerializeToString,
                                       response_deserializer=pb.SummarizeResponse.FromString)
            resp = call(req, timeout=timeout)
            print(resp.summary)
            print("usage:", resp.usage, file=sys.stderr)
    except grpc.RpcError as e:
        print("error: %s: %s" % (e.code().name, e.details()), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
