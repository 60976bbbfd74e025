#!/usr/bin/env python3
"""Scores an exported checkpoint on the eval workloads on the CPU (teacher-forced greedy exact match,
token accuracy, perplexity), the same scoring as the end of train.py.

  /usr/bin/python3 tools/train/eval_local.py --model models/kvs-qwen2-28m --n 50 [--workloads qa,math]
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export import load_model  # noqa: E402
from train import ROOT, evaluate, load_eval  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--eval", default=os.path.join(ROOT, "data/eval"))
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--workloads", default="qa,multihop,math,code,prose,unseen")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    m = load_model(args.model)
    sets = load_eval(args.eval, args.n)
    res = {}
    for w in args.workloads.split(","):
        res[w] = evaluate(m, sets[w], "cpu", max_batch_tokens=8192)
        print(w, json.dumps(res[w]), flush=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
