#!/usr/bin/env python3
"""Writes the head-score calibration prompt: a qa-style retrieval example (tasks.py) planted in
~3,000 tokens of TRAINING-split prose (never the eval sets' held-out prose), so retrieval heads
light up as in DuoAttention's passkey calibration.

  /usr/bin/python3 scripts/data/make_calibration.py OUT.txt [--seed 7]
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROSE = {"sotu", "brown", "austen"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--chars", type=int, default=13000, help="prose characters (~3K tokens)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    docs = [json.loads(l) for l in open(os.path.join(ROOT, "data/docs.jsonl"), encoding="utf-8")]
    train = [d["text"] for d in docs if d["split"] == "train" and d["source"] in PROSE]
    prose = ""
    while len(prose) < args.chars:
        prose += " " + " ".join(rng.choice(train).split())
    prose = prose[:args.chars]
    prose = prose[:prose.rfind(".") + 1].strip()
    context, qas = tasks.qa_example(rng, prose, n_facts=6, n_questions=1)
    prompt, answer = tasks.qa_prompt(context, qas[0])
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(prompt + answer + "\n")
    print(f"{args.out}: {len(prompt)} characters")


if __name__ == "__main__":
    main()
