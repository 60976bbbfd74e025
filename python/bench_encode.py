#!/usr/bin/env python3
"""Encode cost from Python vs the C++ `kvserve bench` CLI, same cache, same profile.

Both sides encode the identical synthetic cache (the CLI's generator, same
shape preset, token count, dtype and seed) with the same profile and thread
count and report the best of --repeat encodes. The CLI encodes into a
reused, pre-reserved vector; the Python side is measured two ways:

  out=buffer  Encoder.encode(tensor, out=bytearray): the frame is written
              into a reused caller buffer (the engine path: a registered
              transfer buffer) -- the like-for-like comparison;
  Frame       Encoder.encode(tensor): a new Frame per call (first-touch page
              faults of the output included).

The input is a torch.bfloat16 tensor viewed over the generator's array
(DLPack, no copy). CLI and Python runs alternate --rounds times so that load
from other processes hits both alike; the best of all rounds is reported.

    PYTHONPATH=build/python /usr/bin/python3 python/bench_encode.py \
        --cli build/tools/kvserve/kvserve --profile kivi-2 --gib 1
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time

# python/ (this script's folder) holds the package's sources without the
# built extension: import the built package from PYTHONPATH instead.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
import kvserve  # noqa: E402


def find_cli() -> str:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for pattern in ["build/tools/kvserve/kvserve", "build*/tools/kvserve/kvserve"]:
        found = sorted(glob.glob(os.path.join(here, pattern)))
        if found:
            return found[0]
    sys.exit("kvserve CLI not found; build it (ninja -C build kvserve) or pass --cli")


def cli_encode_seconds(args, tokens: int) -> tuple[float, dict]:
    cmd = [args.cli, "bench", "--shape", args.shape, "--tokens", str(tokens), "--dtype", args.dtype,
           "--seed", str(args.seed), "--presets", args.profile, "--repeat", str(args.repeat),
           "--threads", str(args.threads), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    row = report["results"][0]
    return report["bytes"] / (row["encode_gbps"] * 1e9), {"cmd": " ".join(cmd), "report": report}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", default=None, help="path of the kvserve CLI")
    parser.add_argument("--profile", default="kivi-2")
    parser.add_argument("--shape", default="llama3-8b", help="synthetic shape preset (kvserve synth_shapes())")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--gib", type=float, default=1.0, help="cache size in GiB (sets the token count)")
    parser.add_argument("--threads", type=int, default=0, help="encoder threads; 0 = all cores")
    parser.add_argument("--repeat", type=int, default=3, help="encodes per round (best kept)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating CLI / Python rounds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--input", choices=["torch", "numpy"], default="torch",
                        help="hand the cache to encode as a torch tensor (DLPack) or a numpy array (buffer protocol)")
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    args = parser.parse_args()
    args.cli = args.cli or find_cli()
    threads = args.threads or os.cpu_count()

    layers, kv_heads, _, head_dim = kvserve.synth_shapes()[args.shape]
    elem = {"f32": 4, "f16": 2, "bf16": 2}[args.dtype]
    tokens = int(round(args.gib * (1 << 30) / (layers * 2 * kv_heads * head_dim * elem)))

    array = kvserve.synthesize_kv(args.shape, tokens=tokens, dtype=args.dtype, seed=args.seed)
    if args.input == "torch":
        kv = kvserve.as_torch(array)  # DLPack path, zero copy
        source = f"torch.{str(kv.dtype).split('.')[-1]} tensor via DLPack"
    else:
        kv = array
        source = f"numpy {array.dtype} array via the buffer protocol"
    profile = kvserve.Profile(args.profile)
    scores = None
    if profile.quantizer in ("mixhq", "duo"):
        scores = kvserve.synthesize_head_scores(layers, kv_heads, args.seed)  # as the CLI does
    encoder = kvserve.Encoder(profile, threads=threads, head_scores=scores)
    if kv is array and array.dtype.name == "uint16":  # numpy bf16 bits
        encode_args = {"dtype": "bf16"}
    else:
        encode_args = {}
    frame = encoder.encode(kv, **encode_args)
    buffer = bytearray(len(frame) + (1 << 20))

    best = {"cli": float("inf"), "out": float("inf"), "frame": float("inf")}
    cli_info = None
    for _ in range(args.rounds):
        seconds, cli_info = cli_encode_seconds(args, tokens)
        best["cli"] = min(best["cli"], seconds)
        for _ in range(args.repeat):
            start = time.perf_counter()
            encoder.encode(kv, out=buffer, **encode_args)
            best["out"] = min(best["out"], time.perf_counter() - start)
        for _ in range(args.repeat):
            start = time.perf_counter()
            frame = encoder.encode(kv, **encode_args)
            best["frame"] = min(best["frame"], time.perf_counter() - start)
            del frame

    nbytes = array.nbytes
    report = {
        "machine": f"{os.cpu_count()} CPUs",
        "cache": f"synthetic {args.shape} {args.dtype} tokens={tokens} seed={args.seed} ({nbytes / 2**30:.3f} GiB)",
        "python_input": source,
        "profile": str(profile),
        "threads": threads,
        "repeat": args.repeat,
        "rounds": args.rounds,
        "cli_command": cli_info["cmd"],
        "cli_encode_seconds": best["cli"],
        "python_out_buffer_seconds": best["out"],
        "python_frame_seconds": best["frame"],
        "python_out_buffer_over_cli": best["out"] / best["cli"],
        "python_frame_over_cli": best["frame"] / best["cli"],
        "compression_ratio": cli_info["report"]["results"][0]["compression_ratio"],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"cache: {report['cache']}, profile {report['profile']}, {threads} threads, "
          f"best of {args.repeat} x {args.rounds} rounds")
    print(f"  C++ CLI (kvserve bench)       {best['cli']:.3f} s  {nbytes / best['cli'] / 1e9:.3f} GB/s")
    print(f"  Python encode(out=buffer)     {best['out']:.3f} s  {nbytes / best['out'] / 1e9:.3f} GB/s  "
          f"{100 * (best['out'] / best['cli'] - 1):+.1f}% vs CLI")
    print(f"  Python encode() -> Frame      {best['frame']:.3f} s  {nbytes / best['frame'] / 1e9:.3f} GB/s  "
          f"{100 * (best['frame'] / best['cli'] - 1):+.1f}% vs CLI")


if __name__ == "__main__":
    main()
