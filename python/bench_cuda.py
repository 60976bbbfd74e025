#!/usr/bin/env python3
"""CUDA encode/decode from Python vs the C++ device API, same tensor, same
profile, same frame buffer, in one process on one GPU.

For each profile the cache (a Llama-3.1-8B-shaped bf16 CUDA tensor: 32
layers, 8 KV heads, head_dim 128, --tokens tokens; seeded random values) is
encoded and decoded by

  python  CudaEncoder.encode(kv, out=frame) / CudaDecoder.decode(frame, out)
          called --repeats times in a Python loop on torch's current stream;
  native  the same C++ calls (cuda::Encoder::Encode / Decoder::Decode) made
          --repeats times from C++ (the binding's _native_seconds), no Python
          in between,

each timed with CUDA events around the loop. The two alternate --rounds
times; the median of the rounds is reported (and the best, for reference).

    PYTHONPATH=build/python python3 python/bench_cuda.py --out cuda_api.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
import kvserve  # noqa: E402


def time_python(fn, repeats: int) -> float:
    import torch

    fn()  # warm-up
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3 / repeats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--profiles", default="kivi-2,none,kivi-4,kvserve-h2r")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args()
    import torch

    if not (torch.cuda.is_available() and kvserve.cuda_available()):
        print("needs a CUDA build of kvserve and a GPU", file=sys.stderr)
        return 2
    gen = torch.Generator(device="cuda").manual_seed(1)
    kv = torch.randn((32, 2, 8, args.tokens, 128), device="cuda", generator=gen).to(torch.bfloat16)
    out = torch.empty_like(kv)
    cache_bytes = kv.numel() * kv.element_size()
    rows = []
    for spec in args.profiles.split(","):
        enc = kvserve.CudaEncoder(spec, kv)
        frame = enc.encode(kv, check=True)
        dec = kvserve.CudaDecoder(frame)
        dec.decode(frame, out, check=True)
        times = {"encode_python": [], "encode_native": [], "decode_python": [], "decode_native": []}
        for _ in range(args.rounds):
            times["encode_python"].append(time_python(lambda: enc.encode(kv, out=frame), args.repeats))
            times["encode_native"].append(enc._native._native_seconds(kv, frame, args.repeats))
            times["decode_python"].append(time_python(lambda: dec.decode(frame, out), args.repeats))
            times["decode_native"].append(dec._native._native_seconds(frame, out, args.repeats))
        enc.check()
        dec.check()
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {"profile": spec, "tokens": args.tokens, "cache_bytes": cache_bytes, "frame_bytes": len(frame),
               **{f"{k}_us": v * 1e6 for k, v in med.items()},
               **{f"{k}_best_us": min(v) * 1e6 for k, v in times.items()},
               "encode_ratio": med["encode_python"] / med["encode_native"],
               "decode_ratio": med["decode_python"] / med["decode_native"]}
        rows.append(row)
        print(f"{spec}: encode python {row['encode_python_us']:.1f} us vs native {row['encode_native_us']:.1f} us "
              f"(x{row['encode_ratio']:.3f}); decode python {row['decode_python_us']:.1f} us vs native "
              f"{row['decode_native_us']:.1f} us (x{row['decode_ratio']:.3f})", flush=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "repeats": args.repeats,
              "rounds": args.rounds, "statistic": "median of rounds", "rows": rows}
    print("| profile | tokens | encode python us | encode C++ us | ratio | decode python us | decode C++ us | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['profile']} | {r['tokens']} | {r['encode_python_us']:.1f} | {r['encode_native_us']:.1f} | "
              f"{r['encode_ratio']:.3f} | {r['decode_python_us']:.1f} | {r['decode_native_us']:.1f} | "
              f"{r['decode_ratio']:.3f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
