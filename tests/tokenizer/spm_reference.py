"""Independent T5 tokenization for the parity test: Debian's python3-sentencepiece plus T5's
conventions (special tokens split out literally, <extra_id_N> = vocab + extra - 1 - N, EOS appended).

usage: spm_reference.py MODEL EXTRA_IDS INPUT_JSONL OUTPUT_JSONL [always|first]

"first" is Hugging Face's Metaspace prepend_scheme of that name (T5 with legacy=False): only the text
at the start of the input gets SentencePiece's leading U+2581; text after a special token gets one
only where it starts with whitespace once normalized. The model without the dummy prefix is built
with the protobuf bindings, and "starts with whitespace" is asked of the model's own normalizer.
"""
import json
import re
import sys

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb


def unprefixed_model(path):
    model = pb.ModelProto()
    with open(path, "rb") as f:
        model.ParseFromString(f.read())
    model.normalizer_spec.add_dummy_prefix = False
    return spm.SentencePieceProcessor(model_proto=model.SerializeToString())


def starts_with_space_once_normalized(sp_unprefixed, text):
    # Behind "a" the leading whitespace is kept (as U+2581) instead of stripped; pieces never hold a
    # U+2581 after their first character, so a new piece starting with one follows the "a".
    pieces = sp_unprefixed.encode("a" + text, out_type=str)
    return len(pieces) > 1 and pieces[0] == "a" and pieces[1].startswith("\u2581")


def main():
    model, extra, inp, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    first_only = len(sys.argv) > 5 and sys.argv[5] == "first"
    sp = spm.SentencePieceProcessor(model_file=model)
    sp_unprefixed = unprefixed_model(model)
    assert not first_only or starts_with_space_once_normalized(sp_unprefixed, " b"), "no piece 'a' to ask with"

    def encode(segment, start):
        if first_only and start > 0 and not starts_with_space_once_normalized(sp_unprefixed, segment):
            return sp_unprefixed.encode(segment)
        return sp.encode(segment)

    n = sp.get_piece_size()
    specials = {sp.id_to_piece(i): i for i in range(n) if sp.is_control(i) or sp.is_unknown(i)}
    for k in range(extra):
        specials[f"<extra_id_{k}>"] = n + extra - 1 - k
    pattern = re.compile("|".join(re.escape(t) for t in sorted(specials, key=len, reverse=True)))
    with open(inp, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as w:
        for line in f:
            if not line.strip():
                continue
            text = json.loads(line)
            ids, pos = [], 0
            for m in pattern.finditer(text):
                ids += encode(text[pos:m.start()], pos)
                ids.append(specials[m.group()])
                pos = m.end()
            ids += encode(text[pos:], pos)
            ids.append(sp.eos_id())
            w.write(json.dumps(ids) + "\n")


if __name__ == "__main__":
    main()
