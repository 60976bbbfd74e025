#!/usr/bin/env python3
"""Builds kvserve's deterministic evaluation workloads (seeded) from held-out data only.

  data/eval/qa.jsonl        single-hop retrieval, contexts 1K-4K tokens of held-out prose    (profiling)
  data/eval/math.jsonl      3..4-shot multi-step arithmetic word problems                    (profiling)
  data/eval/code.jsonl      line completion in held-out Python standard-library files        (profiling)
  data/eval/prose.jsonl     held-out documents: 256-token continuation perplexity            (profiling)
  data/eval/multihop.jsonl  2-3 hop retrieval in prose of the held-out source (Moby-Dick)    (unseen)
  data/eval/unseen.jsonl    prose perplexity on the held-out source (Moby-Dick)              (unseen)

Harder variants (issue 19: workloads the shipped model does not saturate, where compression shows):
  data/eval/qa-hard.jsonl        qa with 10-14 planted facts whose entities may share a colour or an
                                 object (the key needs both words), 3K-4K-token contexts
  data/eval/multihop-hard.jsonl  multihop whose entities may share a colour or an object, 2K-4K tokens
  data/eval/code-hard.jsonl      code line completion with 2.5K-3.9K-token file prefixes
No harder arithmetic: the shipped model solves every 3-step problem and no 4-step one (40 samples
each, 3-4 solved shots of the same length), so no variant lands between saturation and zero.

One JSON object per line: {"id", "workload", "metric", "prompt", "answer", "prompt_ids", "answer_ids",
"n_prompt_tokens"}. Token ids are for data/tokenizer/kvs8k.model, WITHOUT the BOS the model expects
first (prepend id 1). For exact-match workloads answer_ids ends with the newline token (<0x0A>): a
greedy decode is correct iff it reproduces answer_ids exactly (i.e. the text up to the first newline
equals `answer`). For ppl workloads `answer` is the continuation scored by perplexity.
Run from the repo root: /usr/bin/python3 scripts/data/make_workloads.py [--n 200] [--only qa-hard,...]
"""
import argparse
import json
import os
import random
import re
import sys

import numpy as np
import sentencepiece as spm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAX_TOKENS = 4096
PROSE = {"sotu", "brown", "austen"}

sp = spm.SentencePieceProcessor(model_file=os.path.join(ROOT, "data/tokenizer/kvs8k.model"))
NL = sp.piece_to_id("<0x0A>")


def enc(s):
    return sp.encode(s)


def trim_to_sentences(text):
    """Drops the partial sentence at each end of a window of prose."""
    text = " ".join(text.split())
    m = re.search(r"[.!?][\"')]?\s+(?=[A-Z\"'(])", text)
    if m and m.end() < len(text) // 3:
        text = text[m.end():]
    last = max(text.rfind(". "), text.rfind("? "), text.rfind("! "), text.rfind("."))
    return text[:last + 1] if last > 0 else text


def prose_window(rng, stream, n_tokens):
    start = rng.randrange(0, len(stream) - n_tokens)
    return trim_to_sentences(sp.decode(stream[start:start + n_tokens].tolist()))


def record(wid, workload, metric, prompt, answer, newline=True):
    p, a = enc(prompt), enc(answer)
    if newline:
        a = a + [NL]
    joint = enc(prompt + answer + ("\n" if newline else ""))
    assert joint == p + a, (wid, prompt[-40:], answer)
    return {"id": wid, "workload": workload, "metric": metric, "prompt": prompt, "answer": answer,
            "prompt_ids": p, "answer_ids": a, "n_prompt_tokens": len(p) + 1}


def retrieval(rng, n, stream, workload, seed_name, min_tokens=1000, hard=False):
    """qa / multihop prompts of min_tokens..~4K tokens; hard: entities that share words (the key
    needs both) and, for qa, 10-14 planted facts."""
    out = []
    kind = workload.split("-")[0]
    while len(out) < n:
        target = rng.randint(min_tokens, 3950)  # prompt tokens incl. BOS
        ctx_tokens = target - (60 if kind == "qa" else 100) - (200 if hard else 0)
        prose = prose_window(rng, stream, ctx_tokens)
        if kind == "qa":
            facts = rng.randint(10, 14) if hard else None
            context, qas = tasks.qa_example(rng, prose, n_facts=facts, n_questions=1, overlapping=hard)
        else:
            hops, chains = (None, None)  # hard: the entities share words (below)
            context, qas = tasks.multihop_example(rng, prose, hops=hops, n_chains=chains, n_questions=1,
                                                  overlapping=hard)
        prompt, answer = tasks.qa_prompt(context, qas[0])
        r = record(f"{seed_name}-{len(out):04d}", workload, "exact_match", prompt, answer)
        if not (min_tokens <= r["n_prompt_tokens"] and r["n_prompt_tokens"] + len(r["answer_ids"]) <= MAX_TOKENS):
            continue
        out.append(r)
    return out


def math_set(rng, n):
    out = []
    for i in range(n):
        prompt, answer = tasks.math_prompt(rng, shots=rng.randint(3, 4))
        out.append(record(f"math-{i:04d}", "math", "exact_match", prompt, answer))
    return out


_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def code_set(rng, n, docs, workload="code", min_tokens=500, max_tokens=3500):
    """Line completion: prompt = a held-out file's lines up to line i (500-3500 tokens) plus the
    indentation and the first 1-3 words of line i; answer = the rest of line i. Candidate lines:
    12-80 characters of code (no comment, docstring or blank line) that occur verbatim earlier in
    the prompt, cut at the shortest head (1-3 words) such that every earlier line beginning with
    that head is this very line, i.e. the completion is determined by the context (tests retrieval
    from code context). Run 3 made the task unambiguous this way (run 2 cut after the first word
    even when several earlier lines began with it)."""
    files = [d for d in docs if d["source"] == "pystd" and d["split"] == "heldout"]
    word = re.compile(r"\s*[A-Za-z_][A-Za-z_0-9]*|\s*\S")
    out = []
    tries = 0
    while len(out) < n and tries < 200 * n:
        tries += 1
        d = rng.choice(files)
        lines = d["text"].split("\n")
        cands = []
        in_doc = False
        for i, ln in enumerate(lines):
            s = ln.strip()
            if s.count('"""') == 1 or s.count("'''") == 1:
                in_doc = not in_doc
                continue
            if in_doc or not (12 <= len(ln.rstrip()) <= 80) or s.startswith(("#", '"', "'")) or i < 10:
                continue
            cands.append(i)
        if not cands:
            continue
        i = rng.choice(cands)
        line = lines[i].rstrip()
        keep = lines[:i]
        while keep and len(enc("\n".join(keep) + "\n")) > max_tokens:
            keep = keep[len(keep) // 8 + 1:]
        earlier = [l.rstrip() for l in keep]
        if line not in earlier:
            continue
        head = None
        pos = 0
        for _ in range(3):
            m = word.match(line, pos)
            if not m:
                break
            pos = m.end()
            if all(l == line for l in earlier if l.startswith(line[:pos])):
                head = line[:pos]
                break
        if head is None:
            continue
        rest = line[len(head):]
        prefix = "\n".join(keep) + "\n"
        if len(rest) < 5 or len(enc(prefix)) < min_tokens:
            continue
        try:
            out.append(record(f"{workload}-{len(out):04d}", workload, "exact_match", prefix + head, rest))
        except AssertionError:
            continue
    return out


def ppl_set(rng, n, docs, sources, split, workload, cont=256):
    stream = [t for d in docs if d["source"] in sources and d["split"] == split for t in [d["text"]]]
    out = []
    while len(out) < n:
        text = rng.choice(stream)
        ids = enc(text)
        plen = rng.randint(1000, 3000)
        if len(ids) < plen + cont:
            # join with another document of the same stream
            text = text + "\n" + rng.choice(stream)
            ids = enc(text)
            if len(ids) < plen + cont:
                continue
        # split where the next token begins a word so the two texts re-tokenize identically
        k = plen
        while k < len(ids) - cont and not sp.id_to_piece(ids[k]).startswith("\u2581"):
            k += 1
        prompt, answer = sp.decode(ids[:k]), sp.decode(ids[k:k + cont])
        try:
            r = record(f"{workload}-{len(out):04d}", workload, "perplexity", prompt, answer, newline=False)
        except AssertionError:
            continue
        out.append(r)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--only", default="", help="comma-separated workload names to build (default: all)")
    args = ap.parse_args()
    docs = [json.loads(l) for l in open(os.path.join(ROOT, "data/docs.jsonl"), encoding="utf-8")]
    held_prose = np.array([t for d in docs if d["split"] == "heldout" and d["source"] in PROSE
                           for t in enc(d["text"]) + [NL]], dtype=np.int32)
    moby = np.array([t for d in docs if d["source"] == "moby" for t in enc(d["text"]) + [NL]], dtype=np.int32)
    os.makedirs(os.path.join(ROOT, "data/eval"), exist_ok=True)
    sets = {
        "qa": lambda: retrieval(random.Random(4001), args.n, held_prose, "qa", "qa"),
        "multihop": lambda: retrieval(random.Random(4002), args.n, moby, "multihop", "multihop"),
        "math": lambda: math_set(random.Random(4003), args.n),
        "code": lambda: code_set(random.Random(4004), args.n, docs),
        "prose": lambda: ppl_set(random.Random(4005), args.n, docs, PROSE, "heldout", "prose"),
        "unseen": lambda: ppl_set(random.Random(4006), args.n, docs, {"moby"}, "heldout_source", "unseen"),
        "qa-hard": lambda: retrieval(random.Random(4011), args.n, held_prose, "qa-hard", "qa-hard",
                                     min_tokens=3000, hard=True),
        "multihop-hard": lambda: retrieval(random.Random(4012), args.n, moby, "multihop-hard",
                                           "multihop-hard", min_tokens=2000, hard=True),
        "code-hard": lambda: code_set(random.Random(4014), args.n, docs, "code-hard", min_tokens=2500,
                                      max_tokens=3900),
    }
    only = [w for w in args.only.split(",") if w]
    unknown = [w for w in only if w not in sets]
    if unknown:
        sys.exit(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(sets)}")
    for name, fn in sets.items():
        if only and name not in only:
            continue
        rows = fn()
        with open(os.path.join(ROOT, f"data/eval/{name}.jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        lens = [r["n_prompt_tokens"] for r in rows]
        print(f"{name}: {len(rows)} samples, prompt tokens {min(lens)}..{max(lens)} (mean {sum(lens)/len(lens):.0f})")


if __name__ == "__main__":
    main()
