#!/usr/bin/env python3
"""Loads an exported checkpoint with HF transformers (Qwen2ForCausalLM), compares its logits with
tools/train/model.py on the same weights, checks greedy generation against the eval answers, and
writes the reference logits that our C++ runtime is compared with (models/<name>/reference/).

  python3 tools/train/check_hf.py --model DIR --ref-out DIR [--eval data/eval]

Reference files (packed into reference.safetensors by pack_reference.py, which the C++ runtime test
src/runtime/hf_reference_test.cc reads): prompt_short.json (text, ids incl. BOS) + logits_short.npy (float32 [T, V], every
position); prompt_long.json (a qa eval prompt) + logits_long_last.npy (float32 [8, V], the last 8
positions) + argmax_long.npy (int32 [T], every position). HF runs in float32 (bf16 weights upcast),
eager attention, TF32 off.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

SHORT = ("The red jar holds the number 4821. It was a cold morning in the harbour, and the ships lay still.\n"
         "Question: What number does the red jar hold?\nAnswer:")


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ref-out", required=True)
    ap.add_argument("--eval", default=os.path.join(ROOT, "data/eval"))
    ap.add_argument("--gen-samples", type=int, default=8)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    import sentencepiece as spm
    import transformers
    from transformers import Qwen2ForCausalLM
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "tokenizer.model"))
    kw = {"attn_implementation": "eager"}
    try:
        hf = Qwen2ForCausalLM.from_pretrained(args.model, dtype=torch.float32, **kw)
    except TypeError:
        hf = Qwen2ForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32, **kw)
    hf = hf.to(dev).eval()
    report = {"transformers": transformers.__version__, "torch": torch.__version__, "device": dev,
              "hf_params": sum(p.numel() for p in hf.parameters())}

    # our model on the same (bf16 -> fp32) weights
    from model import Config, Qwen2
    cfgj = json.load(open(os.path.join(args.model, "config.json")))
    cfg = Config(**{k: cfgj[k] for k in Config.__dataclass_fields__})
    ours = Qwen2(cfg)
    sd = {k: v.float() for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    missing, unexpected = ours.load_state_dict(sd, strict=False)
    assert not unexpected and all(m.startswith("rope_") for m in missing), (missing, unexpected)
    ours = ours.to(dev).eval()

    os.makedirs(args.ref_out, exist_ok=True)
    ids = [1] + sp.encode(SHORT)
    with torch.no_grad():
        x = torch.tensor([ids], device=dev)
        lh = hf(x).logits[0].float().cpu().numpy()
        lo = ours(x)[0].float().cpu().numpy()
    report["short_tokens"] = len(ids)
    report["short_rel_err_ours_vs_hf"] = rel(lo, lh)
    report["short_greedy_next"] = sp.id_to_piece(int(lh[-1].argmax()))
    np.save(os.path.join(args.ref_out, "logits_short.npy"), lh.astype(np.float32))
    json.dump({"text": SHORT, "ids": ids, "note": "ids include BOS (1); logits_short.npy is [len(ids), vocab] float32"},
              open(os.path.join(args.ref_out, "prompt_short.json"), "w"), indent=1)

    qa = [json.loads(l) for l in open(os.path.join(args.eval, "qa.jsonl"))]
    long_ids = [1] + qa[0]["prompt_ids"]
    with torch.no_grad():
        x = torch.tensor([long_ids], device=dev)
        lh = hf(x).logits[0].float().cpu().numpy()
        lo = ours(x)[0].float().cpu().numpy()
    report["long_tokens"] = len(long_ids)
    report["long_rel_err_ours_vs_hf"] = rel(lo, lh)
    np.save(os.path.join(args.ref_out, "logits_long_last.npy"), lh[-8:].astype(np.float32))
    np.save(os.path.join(args.ref_out, "argmax_long.npy"), lh.argmax(-1).astype(np.int32))
    json.dump({"eval_id": qa[0]["id"], "ids": long_ids, "answer": qa[0]["answer"],
               "note": "ids include BOS; logits_long_last.npy = last 8 positions, argmax_long.npy = every position"},
              open(os.path.join(args.ref_out, "prompt_long.json"), "w"))

    # greedy generation with HF vs. the expected answers
    gen = []
    nl = sp.piece_to_id("<0x0A>")
    for name in ("qa", "multihop", "math", "code"):
        rows = [json.loads(l) for l in open(os.path.join(args.eval, f"{name}.jsonl"))][:args.gen_samples]
        ok = 0
        for r in rows:
            x = torch.tensor([[1] + r["prompt_ids"]], device=dev)
            with torch.no_grad():
                out = hf.generate(x, max_new_tokens=len(r["answer_ids"]) + 4, do_sample=False, eos_token_id=nl,
                                  pad_token_id=0)
            new = out[0, x.shape[1]:].tolist()
            if nl in new:
                new = new[:new.index(nl)]
            text = sp.decode(new)
            ok += int(text == r["answer"])
            if len(gen) < 12:
                gen.append({"workload": name, "expected": r["answer"], "hf_greedy": text})
        report[f"hf_generate_em_{name}"] = f"{ok}/{len(rows)}"
    report["generations"] = gen
    json.dump(report, open(os.path.join(args.ref_out, "hf_check.json"), "w"), indent=1)
    print(json.dumps(report, indent=1))
    # one file for the C++ runtime test (src/runtime/hf_reference_test.cc); the .npy files are not shipped
    from pack_reference import pack
    pack(args.ref_out)


if __name__ == "__main__":
    main()
