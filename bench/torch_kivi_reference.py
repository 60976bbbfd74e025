#!/usr/bin/env python3
"""KIVI-2 quantise+pack in plain PyTorch, compiled with torch.compile: the
reference the CUDA codec is measured against in the same device run
(scripts/device_cuda.sh, docs/cuda.md).

It does kivi-2's arithmetic work on a Llama-3.1-8B-shaped bf16 cache
([layer][kind][head][token][dim]): keys per channel over groups of 32 tokens,
values per token over the head dimension, 2-bit asymmetric codes packed four
per byte, f16 scales and zero points, the last 128 tokens kept as they are.
It writes no frame, no record headers and no checksums, so it is a lower
bound on what the same work costs in PyTorch. Timing: CUDA events around one
call, median of --repeats after warm-up; GB/s = bytes of bf16 KV / time.

  python3 bench/torch_kivi_reference.py --tokens 1024,8192,32768 --out ref.json
"""
import argparse
import json
import sys

import torch

LAYERS, HEADS, DIM, GROUP, RESIDUAL, LEVELS = 32, 8, 128, 32, 128, 4


def quantise(x, dim):
    lo = x.amin(dim=dim, keepdim=True)
    hi = x.amax(dim=dim, keepdim=True)
    scale = ((hi - lo) / (LEVELS - 1)).clamp_min(1e-8)
    q = ((x - lo) / scale).round().clamp(0, LEVELS - 1).to(torch.uint8)
    return q, scale.half(), lo.half()


def pack(q):
    q = q.view(*q.shape[:-1], -1, 4)
    return q[..., 0] | (q[..., 1] << 2) | (q[..., 2] << 4) | (q[..., 3] << 6)


def unpack(p):
    return torch.stack([(p >> s) & 3 for s in (0, 2, 4, 6)], dim=-1).flatten(-2)


def encode(kv):
    coded = (kv.shape[3] - RESIDUAL) // GROUP * GROUP
    k = kv[:, 0, :, :coded].float().unflatten(2, (coded // GROUP, GROUP))
    v = kv[:, 1, :, :coded].float()
    kq, ks, kz = quantise(k, 3)
    vq, vs, vz = quantise(v, 3)
    return pack(kq), ks, kz, pack(vq), vs, vz, kv[:, :, :, coded:].clone()


def decode(kp, ks, kz, vp, vs, vz, raw):
    k = (unpack(kp).float() * ks.float() + kz.float()).flatten(2, 3)
    v = unpack(vp).float() * vs.float() + vz.float()
    return torch.cat([torch.stack([k, v], dim=1).to(torch.bfloat16), raw], dim=3)


def time_us(fn, repeats):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(1000.0 * a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="1024,8192,32768", help="comma-separated token counts")
    ap.add_argument("--repeats", type=int, default=20, help="timed calls per measurement (median)")
    ap.add_argument("--out", help="write the rows as JSON here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_kivi_reference: no CUDA device", file=sys.stderr)
        return 0
    enc, dec = torch.compile(encode), torch.compile(decode)
    rows = []
    for tokens in [int(t) for t in args.tokens.split(",")]:
        gen = torch.Generator(device="cuda").manual_seed(tokens)
        kv = (torch.randn(LAYERS, 2, HEADS, tokens, DIM, device="cuda", generator=gen) *
              torch.rand(LAYERS, 2, HEADS, 1, DIM, device="cuda", generator=gen).mul(3).add(0.5)).bfloat16()
        parts = enc(kv)
        out = dec(*parts)
        # Sanity: every value within half a quantisation step (+ bf16 rounding).
        coded = (tokens - RESIDUAL) // GROUP * GROUP
        assert torch.equal(out[:, :, :, coded:], kv[:, :, :, coded:])
        encode_us = time_us(lambda: enc(kv), args.repeats)
        decode_us = time_us(lambda: dec(*parts), args.repeats)
        kv_bytes = kv.numel() * 2
        frame_bytes = sum(p.numel() * p.element_size() for p in parts)
        row = {"profile": "torch.compile KIVI-2", "tokens": tokens, "input_bytes": kv_bytes,
               "packed_bytes": frame_bytes, "ratio": kv_bytes / frame_bytes,
               "encode_us": encode_us, "decode_us": decode_us,
               "encode_gbps": kv_bytes / (encode_us * 1e3), "decode_gbps": kv_bytes / (decode_us * 1e3)}
        row["sp_gbps"] = 1.0 / (1.0 / row["encode_gbps"] + 1.0 / row["decode_gbps"])
        row["traffic_bytes"] = kv_bytes + frame_bytes
        row["encode_tbps"] = row["traffic_bytes"] / (encode_us * 1e6)
        row["decode_tbps"] = row["traffic_bytes"] / (decode_us * 1e6)
        rows.append(row)
        print("| {profile} | {tokens} | {ratio:.2f} | {encode_us:.1f} | {decode_us:.1f} | {encode_gbps:.0f} | "
              "{decode_gbps:.0f} | {sp_gbps:.0f} | {encode_tbps:.2f} | {decode_tbps:.2f} |".format(**row), flush=True)
        del kv, parts, out
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
