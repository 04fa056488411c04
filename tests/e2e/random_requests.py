#!/usr/bin/env python3
"""Random requests against a running srformer-server: many at once, then each valid one again alone.

Draws N requests from a seed (documents of 0 to W words, every generation option, valid and
invalid values, unary and streaming calls, a few with deadlines of a few milliseconds), sends them
through C concurrent callers, and checks what a client may rely on:

  * each call ends OK or with a client error (INVALID_ARGUMENT, NOT_FOUND; DEADLINE_EXCEEDED only
    where it set a deadline) and a message; nothing else (INTERNAL, UNAVAILABLE, ...);
  * a streamed call's token deltas are its final summary's tokens and text;
  * every request whose answer is determined (greedy, beams, sampling with a seed) gets the same answer
    again when sent alone: tokens, text, scores, per-token log-probabilities, alternatives, finish
    reason and usage counts, bit for bit (batching must not change results), and a refused one is
    refused again with the same code;
  * sent again in SummarizeBatch calls with partial_results (B at a time), each item ends as it did
    alone: the same answer, or a BatchItemError with the same code;
  * the server answers a plain request afterwards.

Needs Debian's python3-grpcio and python3-protobuf, and protoc for the message classes.

usage: random_requests.py HOST:PORT MODEL[,MODEL...] [--requests N] [--concurrency C] [--seed S]
                          [--max-words W] [--replays R] [--batch-size B]
Prints one JSON object (counts, and `failures`: what broke, at most 20) and exits 1 when anything failed.
"""
import argparse
import atexit
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import grpc

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
WORDS = ("the cat sat on a mat while rain fell in the old park and a red dog ran to the big tree . "
         "it was not hot ; the sun is low , yet café naïve résumé 東京 — fine").split()


def load_messages():
    out = tempfile.mkdtemp(prefix="srformer_pb_")
    atexit.register(shutil.rmtree, out, True)  # the generated classes, once the process ends
    subprocess.run(["protoc", "--proto_path=" + os.path.join(ROOT, "proto"), "--python_out=" + out,
                    "srformer/v1/summarizer.proto"], check=True)
    sys.path.insert(0, out)
    from srformer.v1 import summarizer_pb2  # noqa: E402  (generated above)
    return summarizer_pb2


def draw_request(pb, rng, models, index, max_words):
    """One request; mostly valid values, each option sometimes unset, sometimes out of range."""
    r = pb.SummarizeRequest(request_id="random-%d" % index)
    r.model = rng.choice(models) if rng.random() > 0.02 else "no-such-model"
    n = rng.choice([1, 2, 5, 20, 60, 150, 400, max_words]) if rng.random() > 0.02 else 0
    start = rng.randrange(len(WORDS))
    text = " ".join((WORDS * (n // len(WORDS) + 2))[start:start + n])
    if rng.random() < 0.02:
        text = "  \n\t "
    r.document = text.encode("utf-8") if rng.random() > 0.02 else b"bad \xff\xfe utf-8"
    if rng.random() < 0.1:
        r.truncation = rng.choice([pb.TRUNCATION_POLICY_ERROR, pb.TRUNCATION_POLICY_TRUNCATE])
    o = r.options

    def maybe(p, field, values, bad=()):
        if rng.random() < p:
            setattr(o, field, rng.choice(bad) if bad and rng.random() < 0.1 else rng.choice(values))

    maybe(0.8, "max_new_tokens", [1, 2, 5, 12, 24, 40], [0, 100000])
    limit = o.max_new_tokens if o.HasField("max_new_tokens") and o.max_new_tokens > 0 else 8
    maybe(0.3, "min_new_tokens", [t for t in [0, 1, 3, 8] if t <= limit], [-1, limit + 1])
    maybe(0.4, "do_sample", [True, False])
    sampling = o.HasField("do_sample") and o.do_sample
    maybe(0.4, "num_beams", [1, 2, 3, 4], [0, 99])  # with do_sample: beam sampling
    beams = o.num_beams if o.HasField("num_beams") else 1
    most = 3 if sampling and beams == 1 else max(beams, 1)
    maybe(0.3, "num_return_sequences", list(range(1, most + 1)), [0, most + 1])
    maybe(0.3, "temperature", [0.3, 0.7, 1.0, 1.5], [0.0, -1.0])
    maybe(0.3, "top_k", [0, 1, 5, 20])
    maybe(0.3, "top_p", [0.0, 0.3, 0.9, 1.0], [-0.5, 1.5])
    if rng.random() < 0.7:
        o.seed = rng.randrange(1, 1 << 40)
    maybe(0.3, "no_repeat_ngram_size", [0, 1, 2, 3], [-2])
    maybe(0.3, "repetition_penalty", [1.0, 1.2, 2.0], [-1.0])
    # Hugging Face's further warpers (sampling) and the settings that read the request's own input: rows
    # with other values of them in one batch.
    maybe(0.15, "min_p", [0.0, 0.05, 0.3], [1.5])
    maybe(0.15, "typical_p", [0.5, 0.9, 1.0], [0.0])
    maybe(0.1, "epsilon_cutoff", [0.0, 3e-4, 0.05], [1.0])
    maybe(0.1, "eta_cutoff", [0.0, 1e-3, 0.3], [-1.0])
    maybe(0.15, "encoder_repetition_penalty", [0.5, 1.0, 2.0], [0.0])
    maybe(0.15, "encoder_no_repeat_ngram_size", [0, 1, 2, 3], [-1])
    # Diverse beam search: groups that divide the beams or not (refused), with and without a penalty.
    maybe(0.15, "num_beam_groups", [1, 2], [0])
    maybe(0.15, "diversity_penalty", [0.0, 0.5, 2.0], [-1.0])
    maybe(0.3, "length_penalty", [-1.0, 0.0, 1.0, 2.0])
    maybe(0.3, "early_stopping", [True, False])
    maybe(0.2, "early_stopping_mode", [1, 2, 3], [7])  # HEURISTIC, WHEN_FULL, NEVER; may disagree with the bool
    maybe(0.3, "expected_length", [1, 3, 16, 64], [0, -5])
    # Words banned per request (rows with other bad_words_ids in one batch); an empty one is refused.
    if rng.random() < 0.15:
        o.bad_words.extend(rng.sample(["the", "a", "of", "cat", "ing", "Debian", "free software"], rng.randint(1, 3)))
        if rng.random() < 0.1:
            o.bad_words.append("")
    return r


class Caller:
    def __init__(self, pb, target):
        channel = grpc.insecure_channel(target)
        self.unary = channel.unary_unary("/srformer.v1.Summarizer/Summarize",
                                         request_serializer=pb.SummarizeRequest.SerializeToString,
                                         response_deserializer=pb.SummarizeResponse.FromString)
        self.stream = channel.unary_stream("/srformer.v1.Summarizer/SummarizeStream",
                                           request_serializer=pb.SummarizeRequest.SerializeToString,
                                           response_deserializer=pb.SummarizeStreamResponse.FromString)
        self.batch_call = channel.unary_unary("/srformer.v1.Summarizer/SummarizeBatch",
                                              request_serializer=pb.SummarizeBatchRequest.SerializeToString,
                                              response_deserializer=pb.SummarizeBatchResponse.FromString)
        self.pb = pb

    def batch(self, requests):
        """A partial_results batch: (code name, response or error message)."""
        try:
            return "OK", self.batch_call(self.pb.SummarizeBatchRequest(requests=requests, partial_results=True),
                                         timeout=600.0)
        except grpc.RpcError as e:
            return e.code().name, e.details()

    def call(self, request, streaming=False, deadline_s=120.0):
        """(code name, response or error message, streamed (token ids, text) or None)."""
        try:
            if not streaming:
                return "OK", self.unary(request, timeout=deadline_s), None
            final, ids, text = None, [], ""
            for message in self.stream(request, timeout=deadline_s):
                if message.HasField("token"):
                    ids.append(message.token.token_id)
                    text += message.token.text
                if message.HasField("final"):
                    final = message.final
            return "OK", final, (ids, text)
        except grpc.RpcError as e:
            return e.code().name, e.details(), None


def answer(response):
    """What must not depend on the batch: everything but timings and state bytes."""
    u = response.usage
    return {
        "summary": response.summary, "token_ids": list(response.token_ids), "score": response.score,
        "token_logprobs": list(response.token_logprobs), "finish_reason": response.finish_reason,
        "alternatives": [(a.summary, list(a.token_ids), a.score, list(a.token_logprobs))
                         for a in response.alternatives],
        "usage": (u.input_tokens, u.output_tokens, u.segments, u.truncated, u.original_input_tokens),
    }


def determined(request):
    o = request.options
    return not (o.HasField("do_sample") and o.do_sample and not o.HasField("seed"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("models")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-words", type=int, default=600, help="the longest documents' words")
    ap.add_argument("--replays", type=int, default=10**9, help="most requests sent again alone")
    ap.add_argument("--batch-size", type=int, default=8, help="items per partial_results batch (0: no batches)")
    args = ap.parse_args()

    pb = load_messages()
    caller = Caller(pb, args.target)
    rng = random.Random(args.seed)
    requests = [draw_request(pb, rng, args.models.split(","), i, args.max_words) for i in range(args.requests)]
    streaming = [rng.random() < 0.4 for _ in requests]
    deadlines = [rng.choice([0.005, 0.02]) if rng.random() < 0.05 else 120.0 for _ in requests]

    with ThreadPoolExecutor(args.concurrency) as pool:
        results = list(pool.map(lambda i: caller.call(requests[i], streaming[i], deadlines[i]), range(len(requests))))

    failures, codes = [], {}
    allowed = {"OK", "INVALID_ARGUMENT", "NOT_FOUND"}
    for i, (code, value, streamed) in enumerate(results):
        codes[code] = codes.get(code, 0) + 1
        short = deadlines[i] < 1
        if code not in allowed and not (code == "DEADLINE_EXCEEDED" and short):
            failures.append({"request": i, "code": code, "message": value})
        elif code != "OK" and not value:
            failures.append({"request": i, "code": code, "message": "(empty: says nothing to fix)"})
        elif code == "OK" and streamed is not None:
            ids, text = streamed
            if ids != list(value.token_ids) or text != value.summary:
                failures.append({"request": i, "what": "streamed tokens are not the final summary",
                                 "streamed": [ids, text], "final": [list(value.token_ids), value.summary]})

    replayed = 0
    for i, (code, value, _) in enumerate(results):
        if replayed >= args.replays or (code == "DEADLINE_EXCEEDED") or not determined(requests[i]):
            continue
        replayed += 1
        again_code, again, _ = caller.call(requests[i])
        if again_code != code:
            failures.append({"request": i, "what": "another code alone", "among_others": [code, str(value)],
                             "alone": [again_code, str(again)]})
        elif code == "OK" and answer(again) != answer(value):
            a, b = answer(value), answer(again)
            failures.append({"request": i, "what": "another answer alone than among others",
                             "options": str(requests[i].options).replace("\n", " "),
                             "fields": [k for k in a if a[k] != b[k]]})

    batched = 0
    code_names = {c.value[0]: c.name for c in grpc.StatusCode}
    eligible = [i for i, (code, _, _) in enumerate(results) if code != "DEADLINE_EXCEEDED" and determined(requests[i])]
    for start in range(0, len(eligible) if args.batch_size > 0 else 0, max(args.batch_size, 1)):
        group = eligible[start:start + args.batch_size]
        code, response = caller.batch([requests[i] for i in group])
        if code != "OK":
            failures.append({"batch": group, "code": code, "message": response})
            continue
        errors = {e.index: e for e in response.errors}
        for k, i in enumerate(group):
            batched += 1
            want_code, want, _ = results[i]
            got_code = code_names.get(errors[k].code, str(errors[k].code)) if k in errors else "OK"
            if got_code != want_code:
                failures.append({"request": i, "what": "another code in a partial batch", "alone": [want_code, str(want)],
                                 "in_batch": [got_code, errors[k].message if k in errors else ""]})
            elif got_code != "OK" and not errors[k].message:
                failures.append({"request": i, "what": "a batch item's error says nothing to fix"})
            elif got_code == "OK" and answer(response.responses[k]) != answer(want):
                a, b = answer(want), answer(response.responses[k])
                failures.append({"request": i, "what": "another answer in a partial batch",
                                 "fields": [f for f in a if a[f] != b[f]]})

    final_code, _, _ = caller.call(pb.SummarizeRequest(model=args.models.split(",")[0], document=b"the cat sat"))
    if final_code != "OK":
        failures.append({"what": "a plain request afterwards", "code": final_code})
    print(json.dumps({"requests": len(requests), "codes": codes, "replayed": replayed, "batched": batched,
                      "failures": failures[:20], "failed": len(failures)}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
