#!/usr/bin/env python3
"""Write the tiny held-out data fixtures read by tests/test_data.c.

They are written by numpy and the json module -- independent writers -- so
the C loader is checked against the real formats, not against itself. The
expected values are repeated by hand in tests/test_data.c.

Regenerate (needs numpy; the outputs are committed, so tests do not):
    python3 -m venv /tmp/npvenv && /tmp/npvenv/bin/pip install numpy
    /tmp/npvenv/bin/python tests/data/make_fixtures.py
"""
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def path(name):
    return os.path.join(HERE, name)


def save_npy(name, arr, version):
    with open(path(name), "wb") as f:
        np.lib.format.write_array(f, arr, version=version, allow_pickle=False)


def main():
    # .npy, one per supported header version and dtype
    save_npy("ids_2d_i4.npy",
             np.array([[0, 1, 2, 3], [96, 95, 94, 93], [7, 70, 700, 7000]], dtype="<i4"),
             (1, 0))
    save_npy("ids_1d_i8_v2.npy", np.arange(10, dtype="<i8") * 3, (2, 0))
    save_npy("ids_1d_u2_v3.npy", np.array([0, 1, 65535, 300, 5], dtype="<u2"), (3, 0))
    # .npy that must be refused
    save_npy("ids_fortran.npy",
             np.asfortranarray(np.arange(6, dtype="<i4").reshape(2, 3)), (1, 0))
    save_npy("ids_f4.npy", np.arange(4, dtype="<f4"), (1, 0))
    save_npy("ids_3d.npy", np.zeros((2, 2, 2), dtype="<i4"), (1, 0))

    # llm.c token file: 256 int32 header (magic, version, count), uint16 tokens
    toks = np.array([10, 20, 30, 40, 50, 60, 70], dtype=np.uint16)
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, 1, len(toks)
    with open(path("tokens_llmc.bin"), "wb") as f:
        f.write(header.tobytes())
        f.write(toks.astype("<u2").tobytes())
    # nanoGPT: raw uint16 tokens, no header
    np.array([5, 4, 3, 2, 1, 0, 65535], dtype="<u2").tofile(path("tokens_raw.bin"))

    # .jsonl with every optional field and a blank line
    rows = [
        {"ids": [101, 7, 8, 102], "labels": [-100, 7, -100, -100],
         "attention_mask": [1, 1, 1, 1], "token_type_ids": [0, 0, 0, 0]},
        {"ids": [101, 9, 102, 0], "labels": [-100, -100, 5, -100],
         "attention_mask": [1, 1, 1, 0], "token_type_ids": [0, 1, 1, 0]},
    ]
    with open(path("rows.jsonl"), "w") as f:
        f.write(json.dumps(rows[0]) + "\n\n")
        f.write(json.dumps(rows[1]) + "\n")


if __name__ == "__main__":
    main()
