#!/usr/bin/env python3
"""Packs check_hf.py's reference files into one safetensors file our C++ runtime test reads.

  /usr/bin/python3 tools/train/pack_reference.py models/<name>/reference

Writes <dir>/reference.safetensors with the tensors
  ids_short        int32 [T]       prompt_short.json "ids" (BOS included)
  logits_short     float32 [T, V]  HF logits at every position of the short prompt
  ids_long         int32 [L]       prompt_long.json "ids" (a qa eval prompt, BOS included)
  logits_long_last float32 [8, V]  HF logits at the last 8 positions of the long prompt
  argmax_long      int32 [L]       HF argmax at every position of the long prompt
The safetensors layout (8-byte little-endian header length, JSON header, raw little-endian data) is
written by hand so that only numpy is needed.
"""
import json
import os
import struct
import sys

import numpy as np


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dt = {np.dtype("float32"): "F32", np.dtype("int32"): "I32"}[arr.dtype]
        b = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def pack(ref_dir):
    short = json.load(open(os.path.join(ref_dir, "prompt_short.json")))
    long_ = json.load(open(os.path.join(ref_dir, "prompt_long.json")))
    tensors = {
        "ids_short": np.asarray(short["ids"], dtype=np.int32),
        "logits_short": np.load(os.path.join(ref_dir, "logits_short.npy")).astype(np.float32),
        "ids_long": np.asarray(long_["ids"], dtype=np.int32),
        "logits_long_last": np.load(os.path.join(ref_dir, "logits_long_last.npy")).astype(np.float32),
        "argmax_long": np.load(os.path.join(ref_dir, "argmax_long.npy")).astype(np.int32),
    }
    out = os.path.join(ref_dir, "reference.safetensors")
    write_safetensors(out, tensors)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(pack(sys.argv[1]))
