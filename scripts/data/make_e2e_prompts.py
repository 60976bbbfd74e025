#!/usr/bin/env python3
"""Writes the prompts `kvserve e2e` sends by default: token ids of held-out
workload samples (data/eval/<workload>.jsonl, built by build_all.sh),
committed under configs/e2e/ so the benchmark runs on real text without the
data build. Each line: {"id": ..., "prompt_ids": [...]} with the sample's
last --max-tokens prompt tokens (the question stays at the end).

Usage: scripts/data/make_e2e_prompts.py --workload qa --model kvs-qwen2-9m
"""
import argparse
import json
import pathlib
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="qa")
    ap.add_argument("--model", default="kvs-qwen2-9m", help="model name (the tokenizer of the eval data)")
    ap.add_argument("--eval-dir", default="data/eval")
    ap.add_argument("--count", type=int, default=32, help="prompts to write")
    ap.add_argument("--first", type=int, default=100,
                    help="first sample index (100: after the 100-sample quality subset)")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--out", default=None, help="default configs/e2e/<model>-<workload>.jsonl")
    a = ap.parse_args()
    src = pathlib.Path(a.eval_dir) / f"{a.workload}.jsonl"
    if not src.exists():
        print(f"make_e2e_prompts: {src} not found; run scripts/data/build_all.sh first", file=sys.stderr)
        return 1
    samples = [json.loads(line) for line in src.open()]
    picked = samples[a.first:a.first + a.count]
    if len(picked) < a.count:
        print(f"make_e2e_prompts: {src} has only {len(samples)} samples", file=sys.stderr)
        return 1
    out = pathlib.Path(a.out or f"configs/e2e/{a.model}-{a.workload}.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for s in picked:
            ids = s["prompt_ids"][-a.max_tokens:]
            f.write(json.dumps({"id": s["id"], "prompt_ids": ids}, separators=(",", ":")) + "\n")
    print(f"make_e2e_prompts: wrote {len(picked)} prompts to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
