"""A task evaluator in Python: the quality of a compression profile on an
eval workload, measured with a transformers model on the model's device
(the GPU when it is there), for :func:`kvserve.profile`.

    from kvserve.task_eval import TaskEvaluator
    ev = TaskEvaluator("models/kvs-qwen2-9m", "qa", samples=50)
    quality, ci_half_width, n = ev(kvserve.Profile.parse("kivi-2"))
    kvserve.profile(space, evaluate=ev, kv=ev.codec_kv(), model=ev.model_name,
                    workload=ev.workload, sample_set=ev.sample_set, ...)

It is the C++ quality evaluator (include/kvserve/quality.h, ``kvserve
quality``, the profiler's TaskEvaluator) done with transformers:

* the same workload files (``data/eval/<workload>.jsonl``, parsed by the
  C++ ``LoadWorkload``), the same random subset (``ChooseSubset(total,
  samples, seed)``) and BOS handling (the model's ``bos_token_id``
  prepended to ``prompt_ids``);
* the same path per sample: prefill once, cast the KV to the wire dtype
  (f16), encode with the profile, decode, restore; tokens the profile
  pruned are hidden with the attention mask;
* the same scoring: one teacher-forced forward of ``answer_ids``;
  prediction i is the argmax (lowest id on ties) of the logits before
  answer token i (the prefill's last logits for i = 0); exact match = every
  prediction right (= a greedy decode reproduces the answer), nll = mean
  -log p(answer token);
* the same statistic: relative quality = mean EM(profile) / mean EM(none)
  (perplexity workloads: mean of ppl_none / ppl_profile), with the C++
  paired percentile bootstrap (``kvserve.relative_quality``; 1000
  resamples, seeded by ``seed``). Returns ``(relative, (high - low) / 2,
  samples)``.

The prefilled KV and the baseline (``none``) scores are computed once per
sample and kept on the model's device; the baseline goes through the same
cast/encode/decode path as every profile.

Differences from the C++ evaluator: the model's arithmetic is torch's
(float32 by default, cuBLAS on the GPU) rather than the CPU runtime's, so
single predictions can differ where two logits nearly tie; and a profile
that prunes tokens per head (duo with head scores that differ across
heads) cannot be expressed as a transformers attention mask: such
profiles raise NotImplementedError.
"""
from __future__ import annotations

import hashlib
import math
import os
import time
from typing import Any, List, Optional, Tuple

import kvserve
from . import _kvserve, hf


def model_fingerprint(model_dir: str) -> str:
    """A digest of a model directory's config.json and weights files, so
    results of a retrained model are never reused."""
    h = hashlib.blake2b(digest_size=8)
    names = sorted(n for n in os.listdir(model_dir)
                   if n == "config.json" or n.endswith((".safetensors", ".bin")))
    for name in names:
        h.update(name.encode())
        with open(os.path.join(model_dir, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def resolve_workload(name_or_file: str, eval_dir: str = "data/eval") -> str:
    """``name_or_file`` if it is a file, else ``eval_dir/<name>.jsonl``
    (as the C++ ResolveWorkloadPath)."""
    if os.path.isfile(name_or_file):
        return name_or_file
    path = os.path.join(eval_dir, f"{name_or_file}.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"workload {name_or_file!r}: no file {path} (build the eval sets with "
                                "scripts/data/build_all.sh)")
    return path


class TaskEvaluator:
    """``evaluator(profile) -> (relative quality, ci_half_width, samples)``.

    Args:
        model: a model directory (loaded with AutoModelForCausalLM in
            ``torch_dtype``, moved to ``device``) or a loaded transformers
            causal LM (used as it is, on its device).
        workload: an eval set name (``eval_dir/<name>.jsonl``) or file.
        samples: random subset size (``ChooseSubset``; 0 = all samples).
        seed: subset and bootstrap seed.
        eval_dir: where ``<workload>.jsonl`` lives.
        wire_dtype: "f16" (default, as the C++ evaluator), "bf16" or "f32":
            the KV is cast to it before encoding.
        head_scores: for mixhq / duo (HeadScores, a JSON path or an array).
        device: "cuda" when available, else "cpu" (model directories only).
        bootstrap_resamples: for the interval.
        holdout_of: > 0: draw the subset from the samples a search with
            ``samples=holdout_of`` and the same seed did not score (its
            held-out set, as ``kvserve profile --holdout-samples``); the name
            and sample set say "holdout".

    Attributes: ``name`` and ``sample_set`` (keys for :func:`kvserve.profile`'s
    database), ``model_name``, ``workload``, ``metric``, ``quality_kind``,
    ``samples_scored``; after each call ``last`` holds the report (quality,
    interval, per-sample scores, seconds, seconds per sample, CR).
    """

    def __init__(self, model: Any, workload: str, *, samples: int = 100, seed: int = 0,
                 eval_dir: str = "data/eval", wire_dtype: str = "f16", head_scores: Any = None,
                 device: Optional[str] = None, torch_dtype: Any = None,
                 bootstrap_resamples: int = 1000, holdout_of: int = 0) -> None:
        import torch  # noqa: PLC0415

        self._torch = torch
        if isinstance(model, (str, os.PathLike)):
            from transformers import AutoModelForCausalLM  # noqa: PLC0415

            model_dir = os.fspath(model)
            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            model = AutoModelForCausalLM.from_pretrained(
                model_dir, torch_dtype=torch_dtype or torch.float32).to(device).eval()
            self.model_name = os.path.basename(os.path.normpath(model_dir))
            fingerprint = model_fingerprint(model_dir)
        else:
            self.model_name = str(getattr(getattr(model, "config", None), "name_or_path", "") or
                                  type(model).__name__)
            params = sum(int(p.numel()) for p in model.parameters())
            fingerprint = hashlib.blake2b(f"{self.model_name}:{params}".encode(), digest_size=8).hexdigest()
        self.model = model
        self.device = next(model.parameters()).device
        self.model_dtype = next(model.parameters()).dtype
        wire = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
        if wire_dtype not in wire:
            raise ValueError(f"wire_dtype: {wire_dtype!r} is not 'f16', 'bf16' or 'f32'")
        self.wire_dtype = wire_dtype
        self._wire = wire[wire_dtype]
        self.path = resolve_workload(workload, eval_dir)
        all_samples = _kvserve.load_workload(self.path)
        tag = ""
        if holdout_of > 0:  # the samples a `samples=holdout_of` search (same seed) did not score
            searched = set(_kvserve.choose_subset(len(all_samples), holdout_of, seed))
            all_samples = [s for i, s in enumerate(all_samples) if i not in searched]
            if not all_samples:
                raise ValueError(f"holdout_of={holdout_of}: the workload has no sample left to hold out")
            tag = "holdout"
        chosen = _kvserve.choose_subset(len(all_samples), samples, seed)
        self.samples = [all_samples[i] for i in chosen]
        self.workload = os.path.splitext(os.path.basename(workload))[0]
        self.metric = self.samples[0]["metric"]
        if any(s["metric"] != self.metric for s in self.samples):
            raise ValueError(f"workload {self.workload}: samples mix metrics")
        self.seed = seed
        self.resamples = bootstrap_resamples
        self.head_scores = head_scores
        if isinstance(head_scores, (str, os.PathLike)):
            self.head_scores = _kvserve.HeadScores.load(os.fspath(head_scores))
        self.samples_scored = len(self.samples)
        self.name = f"hf-task:{self.workload}{':' + tag if tag else ''}:n={self.samples_scored}:seed={seed}"
        self.sample_set = (f"task:{tag + ',' if tag else ''}n={self.samples_scored},seed={seed},"
                           f"wire={wire_dtype},model={fingerprint}")
        self.quality_kind = (
            f"task: relative quality vs none ({'perplexity ratio' if self.metric == 'perplexity' else 'exact-match ratio'}) "
            f"on {self.samples_scored} {'held-out ' if tag else ''}samples of {self.workload} (seed {seed}), transformers model "
            f"{self.model_name} on {self.device}, 95% paired bootstrap CI")
        bos = getattr(model.config, "bos_token_id", None)
        self._bos = [] if bos is None else [int(bos)]
        self._prefilled: List[Optional[Tuple[tuple, Any]]] = [None] * len(self.samples)
        self._baseline: Optional[List[Tuple[float, float]]] = None
        self.last: Optional[dict] = None

    # -- per sample ---------------------------------------------------------------------------

    def _prefill(self, i: int) -> Tuple[tuple, Any]:
        """The wire-dtype KV (legacy tuple of (1, H, T, D) pairs) and the
        last logits of sample i, computed once."""
        if self._prefilled[i] is None:
            torch = self._torch
            ids = torch.tensor([self._bos + list(self.samples[i]["prompt_ids"])], device=self.device)
            with torch.no_grad():
                out = self.model(input_ids=ids, use_cache=True)
            pairs = tuple((k.to(self._wire).contiguous(), v.to(self._wire).contiguous())
                          for k, v in hf.cache_layers(out.past_key_values))
            self._cache_type = type(out.past_key_values)
            self._prefilled[i] = (pairs, out.logits[0, -1].float())
        return self._prefilled[i]

    def _encoder(self, profile: Any) -> Any:
        """A CPU Encoder reused over the samples of one evaluation (one
        codec thread, as the C++ evaluator), or None where the CUDA codec
        encodes (a CUDA encoder is made per KV shape)."""
        if self.device.type == "cuda" and kvserve.cuda_available():
            return None
        return kvserve.Encoder(profile, 1, self.head_scores)

    def _score(self, i: int, profile: Any, encoder: Any = None) -> Tuple[float, float, int, int]:
        """(exact match, nll, input bytes, frame bytes) of sample i through
        ``profile``."""
        torch = self._torch
        pairs, last_logits = self._prefill(i)
        frame = hf.compress_cache(pairs, profile, head_scores=self.head_scores, encoder=encoder)
        like = None if self._cache_type is not tuple else pairs
        cache, mask = hf.restore_cache(frame, like, device=self.device, dtype=self.model_dtype,
                                       return_keep_mask=True, threads=1)
        answer = list(self.samples[i]["answer_ids"])
        n = len(answer)
        attention = None
        mask = torch.as_tensor(mask)
        if not bool(mask.all()):
            keep = mask.reshape(-1, mask.shape[-1])
            if not bool((keep == keep[0:1]).all()):
                raise NotImplementedError(
                    f"profile {profile}: tokens pruned per head cannot be hidden with a transformers "
                    "attention mask (use the C++ evaluator, `kvserve quality`)")
            tokens = keep.shape[-1]
            attention = torch.ones((1, tokens + n - 1), dtype=torch.long, device=self.device)
            attention[0, :tokens] = keep[0].to(device=self.device, dtype=torch.long)
        rows = [last_logits]
        if n > 1:
            with torch.no_grad():
                out = self.model(input_ids=torch.tensor([answer[:-1]], device=self.device),
                                 past_key_values=cache, attention_mask=attention, use_cache=True)
            rows.append(out.logits[0].float())
        logits = torch.cat([r.reshape(-1, r.shape[-1]) for r in rows])
        target = torch.tensor(answer, device=logits.device)
        predicted = logits.argmax(dim=-1)  # first maximum: the lowest id on ties
        em = float(bool((predicted == target).all()))
        nll = float(-torch.log_softmax(logits, dim=-1).gather(1, target[:, None]).mean())
        input_bytes = sum(k.numel() + v.numel() for k, v in pairs) * pairs[0][0].element_size()
        return em, nll, input_bytes, len(frame)

    def _metric_value(self, em: float, nll: float) -> float:
        return nll if self.metric == "perplexity" else em

    # -- the evaluator ------------------------------------------------------------------------

    def __call__(self, profile: Any) -> Tuple[float, float, int]:
        if isinstance(profile, str):
            profile = kvserve.Profile.parse({p.name: p.spec for p in kvserve.presets()}.get(profile, profile))
        if self._baseline is None:
            none = kvserve.Profile()
            encoder = self._encoder(none)
            self._baseline = [self._score(i, none, encoder)[:2] for i in range(len(self.samples))]
        start = time.perf_counter()
        encoder = self._encoder(profile)
        scores = [self._score(i, profile, encoder) for i in range(len(self.samples))]
        if self.device.type == "cuda":
            self._torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        got = [self._metric_value(em, nll) for em, nll, _, _ in scores]
        base = [self._metric_value(em, nll) for em, nll in self._baseline]
        relative, low, high = _kvserve.relative_quality(got, base, self.metric, self.resamples, self.seed)
        if not math.isfinite(relative):
            raise ValueError(f"workload {self.workload}: relative quality of {profile} is undefined "
                             f"(the baseline scores 0 on {len(base)} samples)")
        half = (high - low) / 2 if math.isfinite(low) and math.isfinite(high) else 0.0
        self.last = {
            "profile": str(profile), "quality": relative, "ci95": [low, high], "ci_half_width": half,
            "samples": len(scores), "metric": self.metric,
            "metric_value": sum(got) / len(got), "baseline_metric_value": sum(base) / len(base),
            "compression_ratio": sum(s[2] for s in scores) / sum(s[3] for s in scores),
            "seconds": seconds, "seconds_per_sample": seconds / len(scores),
            "per_sample": [{"id": self.samples[i]["id"], "score": got[i], "baseline": base[i]}
                           for i in range(len(scores))],
        }
        return relative, half, len(scores)

    def codec_kv(self, max_tokens: int = 1024) -> Any:
        """The KV CR and codec speed are measured on (as the C++ TaskEvaluator's
        CodecKv): the wire-dtype prefilled KV of the subset sample with the
        median prompt length, its first ``max_tokens`` tokens (all when <= 0),
        as one ``(layers, 2, kv_heads, tokens, head_dim)`` tensor on the
        model's device."""
        torch = self._torch
        order = sorted(range(len(self.samples)), key=lambda i: len(self.samples[i]["prompt_ids"]))
        pairs, _ = self._prefill(order[len(order) // 2])
        kv = torch.stack([torch.stack([k[0], v[0]]) for k, v in pairs])
        if max_tokens > 0:
            kv = kv[:, :, :, :max_tokens]
        return kv.contiguous()
