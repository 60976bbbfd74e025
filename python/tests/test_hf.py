"""kvserve.hf: compress a transformers KV cache after prefill, restore it before decode.

The legacy-tuple test runs anywhere torch is installed. The model test needs
`transformers`, a model in HF format (the directory in $KVSERVE_HF_MODEL, else
the first models/*/config.json of the repository) and the qa eval set
(data/eval/qa.jsonl from scripts/data/build_all.sh, or $KVSERVE_HF_WORKLOAD).
It runs on the GPU machine (scripts/device_python_test.sh) and skips cleanly
elsewhere. Per eval sample it prefills with transformers, compresses the
DynamicCache with kvserve, restores it and greedy-decodes the answer:
  - through `none` the generation must be token-identical to decoding from
    the original cache;
  - through a lossy profile ($KVSERVE_HF_PROFILE, default kivi-2) it measures
    exact match relative to `none` with a 95% paired bootstrap interval, and
    requires that interval to overlap the C++ quality evaluator's for the same
    profile and workload (docs/results/quality/qa.json, written by
    scripts/quality_report.sh; or the JSON {"mean", "ci95": [lo, hi]} named by
    $KVSERVE_QUALITY_REFERENCE).
Results are written to $KVSERVE_TEST_OUT/hf_results.json when set.
"""
from __future__ import annotations

import glob
import json
import os
import unittest

import kvserve
from kvserve import hf

try:
    import torch
except ImportError:
    torch = None
try:
    import transformers
except ImportError:
    transformers = None

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOSSY_PROFILE = os.environ.get("KVSERVE_HF_PROFILE", "kivi-2")
PROMPTS = int(os.environ.get("KVSERVE_HF_PROMPTS", "100"))


def _model_dir():
    if os.environ.get("KVSERVE_HF_MODEL"):
        return os.environ["KVSERVE_HF_MODEL"]
    found = sorted(glob.glob(os.path.join(REPO, "models", "*", "config.json")))
    return os.path.dirname(found[0]) if found else None


@unittest.skipIf(torch is None, "torch not installed")
class LegacyTupleTest(unittest.TestCase):
    def test_legacy_tuple_round_trip(self):
        gen = torch.Generator().manual_seed(91)
        cache = tuple((torch.randn(1, 2, 300, 64, generator=gen).to(torch.bfloat16),
                       torch.randn(1, 2, 300, 64, generator=gen).to(torch.bfloat16)) for _ in range(3))
        frame = hf.compress_cache(cache, "none")
        restored = hf.restore_cache(frame, like=cache)
        self.assertIsInstance(restored, tuple)
        for (k, v), (rk, rv) in zip(cache, restored):
            self.assertTrue(torch.equal(k, rk) and torch.equal(v, rv))
        lossy = hf.restore_cache(hf.compress_cache(cache, "kivi-4"), like=cache)
        self.assertEqual(lossy[0][0].shape, cache[0][0].shape)
        with self.assertRaises(ValueError):
            hf.compress_cache(tuple((torch.cat([k, k]), torch.cat([v, v])) for k, v in cache), "none")
        self.assertEqual(bytes(hf.compress_cache(tuple((torch.cat([k, k]), torch.cat([v, v])) for k, v in cache),
                                                 "none", batch_index=1)), bytes(frame))


def _greedy(model, cache, first_token, steps):
    tokens = [first_token]
    next_ids = torch.tensor([[first_token]], device=model.device)
    with torch.no_grad():
        for _ in range(steps - 1):
            out = model(input_ids=next_ids, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            tok = int(out.logits[0, -1].argmax())
            tokens.append(tok)
            next_ids = torch.tensor([[tok]], device=model.device)
    return tokens


def _workload():
    path = os.environ.get("KVSERVE_HF_WORKLOAD", os.path.join(REPO, "data", "eval", "qa.jsonl"))
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _bootstrap_ratio(num, den, resamples=1000, seed=93):
    """95% percentile interval of sum(num[i]) / sum(den[i]) over paired resamples."""
    gen = torch.Generator().manual_seed(seed)
    n = len(num)
    vals = []
    for _ in range(resamples):
        idx = torch.randint(0, n, (n,), generator=gen).tolist()
        d = sum(den[i] for i in idx)
        if d > 0:
            vals.append(sum(num[i] for i in idx) / d)
    vals.sort()
    return [vals[int(0.025 * (len(vals) - 1))], vals[int(0.975 * (len(vals) - 1))]]


def _cpp_reference(profile_name):
    path = os.environ.get("KVSERVE_QUALITY_REFERENCE")
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    path = os.path.join(REPO, "docs", "results", "quality", "qa.json")
    if not os.path.exists(path):
        return None
    spec = {p.name: p.spec for p in kvserve.presets()}.get(profile_name, profile_name)
    with open(path) as f:
        reports = json.load(f)
    for r in reports if isinstance(reports, list) else [reports]:
        if r["profile"] == spec:
            return {"mean": r["relative"], "ci95": r["relative_ci95"], "samples": r["samples_scored"],
                    "source": path}
    return None


@unittest.skipIf(torch is None or transformers is None, "transformers not installed")
@unittest.skipIf(_model_dir() is None, "no HF model (set KVSERVE_HF_MODEL or ship models/*/config.json)")
@unittest.skipIf(_workload() is None, "no qa eval set (scripts/data/build_all.sh or KVSERVE_HF_WORKLOAD)")
class TransformersDynamicCacheTest(unittest.TestCase):
    def test_prefill_compress_restore_decode(self):
        from transformers import AutoModelForCausalLM

        model_dir = _model_dir()
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).to(device).eval()
        bos = model.config.bos_token_id
        samples = _workload()[:PROMPTS]
        em_none, em_lossy, identical, ratios = [], [], 0, []
        cache_type = None
        for s in samples:
            ids = ([bos] if bos is not None else []) + s["prompt_ids"]
            answer = s["answer_ids"]
            with torch.no_grad():
                out = model(input_ids=torch.tensor([ids], device=device), use_cache=True)
            cache = out.past_key_values
            cache_type = type(cache).__name__
            first = int(out.logits[0, -1].argmax())
            frame_none = hf.compress_cache(cache, "none")
            frame_lossy = hf.compress_cache(cache, LOSSY_PROFILE)
            kv_bytes = sum(k.numel() * 2 * 2 for k, _ in hf.cache_layers(cache))  # as f16 on the wire
            ratios.append(kv_bytes / len(frame_lossy))
            restored = hf.restore_cache(frame_none, like=cache)
            self.assertEqual(type(restored), type(cache))
            got_none = _greedy(model, restored, first, len(answer))
            lossy = _greedy(model, hf.restore_cache(frame_lossy, like=cache), first, len(answer))
            baseline = _greedy(model, cache, first, len(answer))
            self.assertEqual(got_none, baseline, "generation through 'none' is not token-identical")
            identical += 1
            em_none.append(float(got_none == answer))
            em_lossy.append(float(lossy == answer))
        mean_none = sum(em_none) / len(em_none)
        relative = (sum(em_lossy) / sum(em_none)) if sum(em_none) else float("nan")
        interval = _bootstrap_ratio(em_lossy, em_none)
        result = {
            "model": model_dir, "device": device, "transformers": transformers.__version__,
            "codec": "cuda" if isinstance(frame_none, getattr(kvserve, "DeviceFrame", ())) else "cpu",
            "torch": torch.__version__, "cache_type": cache_type, "workload": "qa", "samples": len(samples),
            "none_token_identical": f"{identical}/{len(samples)}", "exact_match_none": mean_none,
            "lossy_profile": LOSSY_PROFILE, "lossy_compression_ratio_vs_f16": sum(ratios) / len(ratios),
            "exact_match_lossy": sum(em_lossy) / len(em_lossy),
            "relative_quality": relative, "relative_quality_ci95": interval,
        }
        reference = _cpp_reference(LOSSY_PROFILE)
        if reference is not None:
            lo, hi = reference["ci95"]
            result["cpp_quality_reference"] = reference
            result["intervals_overlap"] = interval[0] <= hi and lo <= interval[1]
        print(json.dumps(result, indent=2))
        if os.environ.get("KVSERVE_TEST_OUT"):
            with open(os.path.join(os.environ["KVSERVE_TEST_OUT"], "hf_results.json"), "w") as f:
                json.dump(result, f, indent=2)
        self.assertGreater(mean_none, 0.5, "the shipped model should answer most qa samples uncompressed")
        if device == "cuda" and kvserve.cuda_available():
            self.assertEqual(result["codec"], "cuda", "a CUDA cache must be encoded by the CUDA codec")
            # The one-call helper gives the same tokens through 'none'.
            s = samples[0]
            ids = torch.tensor([([bos] if bos is not None else []) + s["prompt_ids"]], device=device)
            tokens, _ = hf.generate_through_frame(model, ids, "none", len(s["answer_ids"]))
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=True)
            self.assertEqual(tokens, _greedy(model, out.past_key_values, int(out.logits[0, -1].argmax()),
                                             len(s["answer_ids"])))
        if "intervals_overlap" in result:
            self.assertTrue(result["intervals_overlap"], result)


if __name__ == "__main__":
    unittest.main()
