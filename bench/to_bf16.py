#!/usr/bin/env python3
"""Copy a Hugging Face model directory with its f32 tensors rounded to bf16.

    /work/venv/bin/python bench/to_bf16.py /tmp/hp-bench-gpt2-small /tmp/hp-bench-gpt2-small-bf16

For bench/README.md's cost of streaming 16-bit weights: the same model both
ways, f32 (read in place) and bf16 (converted a panel at a time by each
product). Rounds to nearest, ties to even, as torch's .to(torch.bfloat16).
Reads model.safetensors through a memory map and writes tensor by tensor,
so it needs little memory. config.json is copied; nothing else.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1:]
    path = os.path.join(src, "model.safetensors")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    meta = header.pop("__metadata__", None)
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    new, at = {}, 0
    for k in names:
        t = header[k]
        b, e = t["data_offsets"]
        size = (e - b) // 2 if t["dtype"] == "F32" else e - b
        new[k] = {"dtype": "BF16" if t["dtype"] == "F32" else t["dtype"], "shape": t["shape"],
                  "data_offsets": [at, at + size]}
        at += size
    if meta is not None:
        new["__metadata__"] = meta
    js = json.dumps(new, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    os.makedirs(out, exist_ok=False)
    shutil.copy(os.path.join(src, "config.json"), os.path.join(out, "config.json"))
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js)
        for k in names:
            b, e = header[k]["data_offsets"]
            raw = data[b:e]
            if header[k]["dtype"] != "F32":
                f.write(raw.tobytes())
                continue
            u = raw.view("<u4").astype(np.uint64)
            f.write(((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes())
    print(f"{out}: {len(names)} tensors, {at / 1e6:.1f} MB of data")


if __name__ == "__main__":
    main()
