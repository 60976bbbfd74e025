#!/usr/bin/env python3
"""Trains kvserve's reference Qwen2-style model on real text + synthetic tasks, within a wall-clock budget.

Data (built by scripts/data/*): data/tok/*.bin token streams, data/tokenizer/kvs8k.model, data/eval/*.jsonl.
Each 4096(+1)-token training row is either plain text (a slice of the training stream) or synthetic
examples (generated on the fly by DataLoader workers with scripts/data/tasks.py, from training-split
prose only; see MIX below). The LR schedule (linear
warmup, cosine decay) runs on wall-clock time, so the run ends on time whatever the throughput.

  python3 tools/train/train.py --out /tmp/model --deadline 470          # the shipped model (H200)
  /usr/bin/python3 tools/train/train.py --preset tiny --deadline 60 ...  # CPU dry run
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts", "data"))
import tasks  # noqa: E402
from export import save_hf  # noqa: E402
from model import Config, Qwen2  # noqa: E402

PRESETS = {
    # run 3, the shipped model: ~9.2M parameters, 18 MB in bf16 (fits the GPU tool's transfer limit)
    "small": dict(hidden_size=256, intermediate_size=896, num_hidden_layers=8, num_attention_heads=4,
                  num_key_value_heads=2),
    "base": dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=10, num_attention_heads=8,
                 num_key_value_heads=4),
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1),
}
# Row kinds. "lm": a slice of the training stream. "synth": one retrieval example (qa or multihop, at
# position 0, loss on the questions and answers only: the planted-into prose is context, not target,
# so it is not memorised), then up to ~8 math problems (loss on all), then
# loss-masked filler. Real text is thus seen ~3 times, not ~30 (run 1 memorised it).
# "copy" (run 3): a slice of the training stream scored only on lines that repeat an earlier line of
# the row (code repeats lines; this is the line-completion skill of the code workload).
MIX = {"lm": 0.15, "copy": 0.15, "synth": 0.70}
RETRIEVAL = {"qa": 0.6, "multihop": 0.4}
NL_ID = 13  # "<0x0A>" in data/tokenizer/kvs8k.model (checked at start-up)


class Rows(torch.utils.data.IterableDataset):
    def __init__(self, data_dir, tok_path, seq, seed):
        self.data_dir, self.tok_path, self.seq, self.seed = data_dir, tok_path, seq, seed

    def _setup(self):
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor(model_file=self.tok_path)
        self.train = np.memmap(os.path.join(self.data_dir, "train.bin"), dtype=np.uint16, mode="r")
        self.prose = np.memmap(os.path.join(self.data_dir, "train_prose.bin"), dtype=np.uint16, mode="r")

    def _filler(self, rng, n):
        s = rng.randrange(0, len(self.train) - n)
        return np.asarray(self.train[s:s + n], dtype=np.int64)

    def _prose(self, rng, n):
        s = rng.randrange(0, len(self.prose) - n)
        text = self.sp.decode(self.prose[s:s + n].tolist())
        return trim_to_sentences(text)

    def _retrieval(self, rng, kind):
        """(ids, targets) for one qa/multihop example; targets[j] says whether ids[j] is scored."""
        S = self.seq + 1
        for _ in range(10):
            ctx = rng.randint(min(100, S // 4), max(S - 300, S // 2))
            prose = self._prose(rng, ctx)
            if kind == "qa":
                c, qas = tasks.qa_example(rng, prose, n_questions=6)
            else:
                c, qas = tasks.multihop_example(rng, prose, n_questions=3)
            c_ids = self.sp.encode(c + "\n")  # "\n" is a byte piece: never merges across
            t_ids = self.sp.encode("".join(f"{q}\nAnswer:{a}\n" for q, a in qas))
            ids = [1] + c_ids + t_ids + [2]
            if len(ids) <= S:
                return ids, [0] * (1 + len(c_ids)) + [1] * (len(t_ids) + 1)
        return ids[:S], ([0] * (1 + len(c_ids)) + [1] * (len(t_ids) + 1))[:S]

    def _copy_row(self, rng, S):
        """A training-stream slice whose targets are the tokens of lines (>= 3 tokens) that already
        occurred verbatim earlier in the row."""
        row = self._filler(rng, S)
        tgt = np.zeros(S, dtype=bool)
        seen, start = set(), 0
        nl = np.flatnonzero(row == NL_ID)
        for end in list(nl) + [S]:
            line = tuple(row[start:end].tolist())
            if len(line) >= 3:
                if line in seen:
                    tgt[start:min(end + 1, S)] = True
                seen.add(line)
            start = end + 1
        return row, tgt

    def _math(self, rng, room):
        n = max(1, min(16, room // 90))
        for _ in range(10):
            ids = [1] + self.sp.encode(tasks.math_text(rng, n)) + [2]
            if len(ids) <= room:
                return ids, [0] + [1] * (len(ids) - 1)
            n = max(1, n - 2)
        return None, None

    def __iter__(self):
        wi = torch.utils.data.get_worker_info()
        wid = wi.id if wi else 0
        rng = random.Random(self.seed * 1000 + wid)
        self._setup()
        S = self.seq + 1
        while True:
            u = rng.random()
            if u < MIX["lm"]:
                row, tgt = self._filler(rng, S), np.ones(S, dtype=bool)
            elif u < MIX["lm"] + MIX["copy"]:
                row, tgt = self._copy_row(rng, S)
            else:
                kind = rng.choices(list(RETRIEVAL), list(RETRIEVAL.values()))[0]
                ids, t = self._retrieval(rng, kind)
                if S - len(ids) >= 100:  # up to ~8 math problems (tokenizing is the workers' bottleneck)
                    m_ids, m_t = self._math(rng, min(S - len(ids), 800))
                    if m_ids is not None:
                        ids, t = ids + m_ids, t + m_t
                rest = S - len(ids)
                row = np.concatenate([np.asarray(ids, dtype=np.int64), self._filler(rng, rest)]) if rest else np.asarray(ids, dtype=np.int64)
                tgt = np.asarray(t + [0] * rest, dtype=bool)
            yield torch.from_numpy(row), torch.from_numpy(tgt)


def trim_to_sentences(text):
    import re
    text = " ".join(text.split())
    m = re.search(r"[.!?][\"')]?\s+(?=[A-Z\"'(])", text)
    if m and m.end() < len(text) // 3:
        text = text[m.end():]
    last = text.rfind(".")
    return text[:last + 1] if last > 0 else text


def load_eval(eval_dir, n):
    sets = {}
    for name in ("qa", "multihop", "math", "code", "prose", "unseen"):
        p = os.path.join(eval_dir, f"{name}.jsonl")
        if os.path.exists(p):
            rows = [json.loads(l) for l in open(p)][:n]
            sets[name] = [(r["prompt_ids"], r["answer_ids"], r["metric"]) for r in rows]
    return sets


@torch.no_grad()
def evaluate(model, samples, device, max_batch_tokens=65536):
    """Teacher-forced scoring. exact_match: every answer token (incl. the final newline) is the argmax,
    which is exactly greedy-decode exact match. perplexity: exp(mean NLL of the answer tokens)."""
    model.eval()
    order = sorted(range(len(samples)), key=lambda i: len(samples[i][0]) + len(samples[i][1]))
    em, tok_ok, tok_n, nll, nll_n = 0, 0, 0, 0.0, 0
    i = 0
    while i < len(order):
        L = len(samples[order[i]][0]) + len(samples[order[i]][1]) + 1
        bs = 1
        while i + bs < len(order):
            L2 = len(samples[order[i + bs]][0]) + len(samples[order[i + bs]][1]) + 1
            if L2 * (bs + 1) > max_batch_tokens:
                break
            L, bs = L2, bs + 1
        batch = [samples[j] for j in order[i:i + bs]]
        Lmax = max(len(p) + len(a) + 1 for p, a, _ in batch)
        x = torch.zeros(len(batch), Lmax, dtype=torch.long)
        for b, (p, a, _) in enumerate(batch):
            seq = [1] + p + a
            x[b, :len(seq)] = torch.tensor(seq)
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=device.startswith("cuda")):
            logits = model(x.to(device)).float()
        for b, (p, a, metric) in enumerate(batch):
            pos = torch.arange(len(p), len(p) + len(a), device=device)  # position len(p) predicts a[0] (BOS shift)
            lg = logits[b, pos]
            tgt = torch.tensor(a, device=device)
            ok = (lg.argmax(-1) == tgt)
            tok_ok += int(ok.sum())
            tok_n += len(a)
            em += int(ok.all())
            nll += float(F.cross_entropy(lg, tgt, reduction="sum"))
            nll_n += len(a)
        i += bs
    model.train()
    return {"exact_match": em / len(samples), "token_acc": tok_ok / tok_n, "ppl": math.exp(nll / nll_n), "n": len(samples)}


@torch.no_grad()
def stream_ppl(model, path, seq, device, windows):
    arr = np.fromfile(path, dtype=np.uint16).astype(np.int64)
    n = min(windows, (len(arr) - 1) // seq)
    model.eval()
    tot, cnt = 0.0, 0
    for w in range(n):
        x = torch.from_numpy(arr[w * seq:(w + 1) * seq + 1]).to(device)[None]
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=device.startswith("cuda")):
            lg = model(x[:, :-1]).float()
        tot += float(F.cross_entropy(lg[0], x[0, 1:], reduction="sum"))
        cnt += seq
    model.train()
    return math.exp(tot / cnt), cnt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="small", choices=list(PRESETS))
    ap.add_argument("--data", default=os.path.join(ROOT, "data/tok"))
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "data/tokenizer/kvs8k.model"))
    ap.add_argument("--eval", default=os.path.join(ROOT, "data/eval"))
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--short-seq", type=int, default=512,
                    help="curriculum: rows of this length (batch scaled to the same tokens per step) first")
    ap.add_argument("--short-frac", type=float, default=0.3,
                    help="fraction of the training time spent on --short-seq rows (0 disables the curriculum)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup-frac", type=float, default=0.03)
    ap.add_argument("--deadline", type=float, default=470, help="seconds after start when training stops")
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--eval-every", type=float, default=90)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-n", type=int, default=200)
    ap.add_argument("--eval-n-periodic", type=int, default=48)
    ap.add_argument("--ppl-windows", type=int, default=64)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    T0 = time.time()
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    cfg = Config(**PRESETS[args.preset])
    model = Qwen2(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[train] params {n_params/1e6:.2f}M device {device} torch {torch.__version__}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "train_log.jsonl"), "w")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt_kw = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if device == "cuda":
        opt_kw["fused"] = True
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], **opt_kw)

    fwd = model
    if not args.no_compile and hasattr(torch, "compile") and device == "cuda":
        fwd = torch.compile(model, dynamic=False)
    import sentencepiece as spm
    assert spm.SentencePieceProcessor(model_file=args.tokenizer).piece_to_id("<0x0A>") == NL_ID

    def loader(seq, batch, seed):
        ds = Rows(args.data, args.tokenizer, seq, seed)
        return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=args.workers, pin_memory=(device == "cuda"),
                                           prefetch_factor=4 if args.workers else None, persistent_workers=args.workers > 0)
    short = args.short_frac > 0 and args.short_seq < args.seq
    if short:
        dl = loader(args.short_seq, args.batch * args.seq // args.short_seq, args.seed + 100)
        print(f"[train] curriculum: {args.short_seq}-token rows for {args.short_frac:.0%} of the time, then {args.seq}", flush=True)
    else:
        dl = loader(args.seq, args.batch, args.seed)
    evals = load_eval(args.eval, args.eval_n)
    periodic = {k: v[:args.eval_n_periodic] for k, v in evals.items() if k in ("qa", "multihop", "math", "code")}

    def step_fn(x, tgt):
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=(device == "cuda")):
            logits = fwd(x[:, :-1])
        labels = x[:, 1:].masked_fill(~tgt[:, 1:], -100)
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab_size), labels.reshape(-1), ignore_index=-100)
        loss.backward()
        return loss

    it = iter(dl)
    step, tokens, t_start, last_eval, scored = 0, 0, None, None, 0
    loss_acc, loss_n, t_last = 0.0, 0, time.time()
    curve = []
    while True:
        now = time.time() - T0
        if now >= args.deadline or (args.max_steps and step >= args.max_steps):
            break
        if t_start is None:
            lr = args.lr * 0.01
        else:
            frac = (now - t_start) / max(1e-6, args.deadline - t_start)
            if frac < args.warmup_frac:
                lr = args.lr * frac / args.warmup_frac
            else:
                p = (frac - args.warmup_frac) / (1 - args.warmup_frac)
                lr = args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))
        for g in opt.param_groups:
            g["lr"] = lr
        if short and t_start is not None and now >= t_start + args.short_frac * (args.deadline - t_start):
            short = False
            del it, dl  # stops the short-row workers
            dl = loader(args.seq, args.batch, args.seed)
            it = iter(dl)
            print(f"[train] curriculum: switching to {args.seq}-token rows at step {step}, {now:.0f}s", flush=True)
        x, tgt = next(it)
        x, tgt = x.to(device, non_blocking=True), tgt.to(device, non_blocking=True)
        try:
            loss = step_fn(x, tgt)
        except Exception as e:  # compile problems: fall back to eager once
            if fwd is model:
                raise
            print(f"[train] torch.compile failed ({type(e).__name__}: {str(e)[:300]}); eager from here", flush=True)
            opt.zero_grad(set_to_none=True)
            fwd = model
            loss = step_fn(x, tgt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens += x.shape[0] * (x.shape[1] - 1)
        if step % 10 == 0:
            scored += int(tgt[:, 1:].sum())
        loss_acc += float(loss.detach()) if step % 10 == 0 or step < 5 else 0.0
        loss_n += 1 if step % 10 == 0 or step < 5 else 0
        if t_start is None:
            t_start = time.time() - T0
            last_eval = t_start
            print(f"[train] first step done at {t_start:.1f}s (compile + data startup)", flush=True)
            tokens_at_start = tokens
        if step % args.log_every == 0:
            el = time.time() - T0
            rec = {"step": step, "tokens": tokens, "loss": loss_acc / max(1, loss_n), "lr": lr, "elapsed_s": round(el, 1),
                   "tok_per_s": round((tokens - tokens_at_start) / max(1e-6, el - t_start))}
            loss_acc, loss_n = 0.0, 0
            if el - last_eval >= args.eval_every:
                last_eval = el
                rec["eval"] = {k: evaluate(model, v, device) for k, v in periodic.items()}
                rec["eval"] = {k: {"em": round(r["exact_match"], 3), "tok_acc": round(r["token_acc"], 3)} for k, r in rec["eval"].items()}
            curve.append(rec)
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print("[train]", json.dumps(rec), flush=True)
    train_s = time.time() - T0
    print(f"[train] stopped: {step} steps, {tokens/1e6:.1f}M tokens, {train_s:.0f}s", flush=True)
    final = {"steps": step, "tokens_seen": tokens, "scored_tokens_est": scored * 10, "train_wall_s": round(train_s, 1),
             "compile_and_startup_s": round(t_start or 0, 1), "params": n_params,
             "final_train_loss": curve[-1]["loss"] if curve else None, "config": PRESETS[args.preset],
             "args": vars(args)}
    model.eval()
    final["heldout_ppl"], final["heldout_tokens"] = stream_ppl(model, os.path.join(args.data, "heldout.bin"), args.seq, device, args.ppl_windows)
    final["heldout_source_ppl"], final["heldout_source_tokens"] = stream_ppl(model, os.path.join(args.data, "heldout_source.bin"), args.seq, device, args.ppl_windows)
    final["workloads"] = {k: evaluate(model, v, device) for k, v in evals.items()}
    print("[train] final", json.dumps({k: v for k, v in final.items() if k != "args"}), flush=True)
    json.dump(final, open(os.path.join(args.out, "train_summary.json"), "w"), indent=1)
    shards = save_hf(model.cpu(), os.path.join(args.out, "model"))
    import shutil
    shutil.copy(args.tokenizer, os.path.join(args.out, "model", "tokenizer.model"))
    print(f"[train] saved {shards} in {time.time() - T0:.0f}s", flush=True)
    os._exit(0)  # don't wait for DataLoader workers


if __name__ == "__main__":
    main()
