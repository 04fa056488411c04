#!/usr/bin/env python3
"""Copy a T5 model directory with the EOS row of its tied embedding (shared.weight) scaled.

A random-weight model almost never draws EOS, so its samples all run to max_new_tokens. Scaling the EOS
row (every listed one where eos_token_id is a list) makes EOS likely enough that samples end at different steps, which the several-samples benchmark
needs (docs/BENCHMARKS.md, session 35: a scale of 3 ends T5-small-shaped samples at ~38 of 64 tokens).

    bench/scale_eos_row.py SRC_DIR DST_DIR SCALE
"""
import array
import json
import shutil
import struct
import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src, dst, scale = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    config = json.loads((src / "config.json").read_text())
    # eos_token_id may be a list of ids, each of which ends a sequence (as in Hugging Face).
    eos = config.get("eos_token_id", 1)
    eos_ids = [int(i) for i in (eos if isinstance(eos, list) else [eos])]
    width = int(config["d_model"])
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "model.safetensors":
            shutil.copy2(f, dst / f.name)
    data = bytearray((src / "model.safetensors").read_bytes())
    header_len = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + header_len])
    entry = header.get("shared.weight")
    if entry is None or entry["dtype"] != "F32":
        print("model.safetensors has no F32 shared.weight (a T5 with tied embeddings)", file=sys.stderr)
        return 1
    for eos_id in eos_ids:
        start = 8 + header_len + entry["data_offsets"][0] + eos_id * width * 4
        row = array.array("f")
        row.frombytes(bytes(data[start : start + width * 4]))
        for i in range(width):
            row[i] *= scale
        data[start : start + width * 4] = row.tobytes()
    (dst / "model.safetensors").write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
