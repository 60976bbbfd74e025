#!/usr/bin/env python3
"""Tokenizes data/docs.jsonl with data/tokenizer/kvs8k.model into flat uint16 token streams.

  data/tok/train.bin            every training-split document as BOS ids EOS, concatenated
  data/tok/train_prose.bin      training-split prose (sotu, brown, austen) ids, docs joined by "\n"
                                (the prose that synthetic retrieval facts are planted into)
  data/tok/heldout.bin          held-out documents of the trained sources, BOS ids EOS
  data/tok/heldout_source.bin   the held-out source (moby), BOS ids EOS
  data/tok/meta.json            token counts
Run from the repo root: /usr/bin/python3 scripts/data/tokenize_corpus.py
"""
import json
import os
from multiprocessing import Pool

import numpy as np
import sentencepiece as spm

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "data/tokenizer/kvs8k.model")
PROSE = {"sotu", "brown", "austen"}
_sp = None


def _enc(text):
    global _sp
    if _sp is None:
        _sp = spm.SentencePieceProcessor(model_file=MODEL)
    return np.asarray(_sp.encode(text), dtype=np.uint16)


def main():
    docs = [json.loads(l) for l in open(os.path.join(ROOT, "data/docs.jsonl"), encoding="utf-8")]
    with Pool(os.cpu_count()) as pool:
        ids = pool.map(_enc, [d["text"] for d in docs], chunksize=8)
    sp = spm.SentencePieceProcessor(model_file=MODEL)
    bos, eos, nl = sp.bos_id(), sp.eos_id(), sp.piece_to_id("<0x0A>")
    assert sp.get_piece_size() <= 65535
    out = {k: [] for k in ("train", "train_prose", "heldout", "heldout_source")}
    for d, t in zip(docs, ids):
        framed = np.concatenate([[bos], t, [eos]]).astype(np.uint16)
        out[d["split"]].append(framed)
        if d["split"] == "train" and d["source"] in PROSE:
            out["train_prose"].append(np.concatenate([t, [nl]]).astype(np.uint16))
    os.makedirs(os.path.join(ROOT, "data/tok"), exist_ok=True)
    meta = {}
    for k, parts in out.items():
        arr = np.concatenate(parts)
        arr.tofile(os.path.join(ROOT, f"data/tok/{k}.bin"))
        meta[k] = int(arr.size)
    meta["vocab_size"] = sp.get_piece_size()
    by_source = {}
    for d, t in zip(docs, ids):
        s = by_source.setdefault(d["source"], {})
        s[d["split"]] = s.get(d["split"], 0) + int(t.size)
    meta["tokens_by_source"] = by_source
    json.dump(meta, open(os.path.join(ROOT, "data/tok/meta.json"), "w"), indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
