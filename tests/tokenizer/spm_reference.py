"""Independent T5 tokenization for the parity test: Debian's python3-sentencepiece plus T5's
conventions (special tokens split out literally, <extra_id_N> = vocab + extra - 1 - N, EOS appended).

usage: spm_reference.py MODEL EXTRA_IDS INPUT_JSONL OUTPUT_JSONL
"""
import json
import re
import sys

import sentencepiece as spm


def main():
    model, extra, inp, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    sp = spm.SentencePieceProcessor(model_file=model)
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
                ids += sp.encode(text[pos:m.start()])
                ids.append(specials[m.group()])
                pos = m.end()
            ids += sp.encode(text[pos:])
            ids.append(sp.eos_id())
            w.write(json.dumps(ids) + "\n")


if __name__ == "__main__":
    main()
