"""kvserve.hf: compress a transformers KV cache after prefill, restore it before decode.

The legacy-tuple test runs anywhere torch is installed. The model test needs
`transformers`, a model in HF format (the directory in $KVSERVE_HF_MODEL, else
the first models/*/config.json of the repository) and the qa eval set
(data/eval/qa.jsonl from scripts/data/build_all.sh, or $KVSERVE_HF_WORKLOAD).
It runs on the GPU machine (scripts/device_python_test.sh) and skips cleanly
elsewhere. Per eval sample of the subset ($KVSERVE_HF_PROMPTS of them, seed 0)
it prefills with transformers, compresses the DynamicCache with kvserve,
restores it and greedy-decodes the answer:
  - through `none` the generation must be token-identical to decoding from
    the original cache;
  - through a lossy profile ($KVSERVE_HF_PROFILE, default kivi-2) it measures
    exact match relative to `none` with a 95% paired bootstrap interval
    (kvserve.task_eval.TaskEvaluator: the C++ evaluator's sample subset,
    teacher-forced scoring and bootstrap, on the model's device), and
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


def _workload_path():
    path = os.environ.get("KVSERVE_HF_WORKLOAD", os.path.join(REPO, "data", "eval", "qa.jsonl"))
    return path if os.path.exists(path) else None


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
@unittest.skipIf(_workload_path() is None, "no qa eval set (scripts/data/build_all.sh or KVSERVE_HF_WORKLOAD)")
class TransformersDynamicCacheTest(unittest.TestCase):
    def test_prefill_compress_restore_decode(self):
        from kvserve.task_eval import TaskEvaluator

        model_dir = _model_dir()
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
        # The C++ evaluator's sample subset (ChooseSubset, seed 0) and scoring.
        evaluator = TaskEvaluator(model_dir, _workload_path(), samples=PROMPTS, seed=0, device=device)
        model = evaluator.model
        bos = model.config.bos_token_id
        identical, cache_type, frame_none = 0, None, None
        for s in evaluator.samples:
            ids = ([bos] if bos is not None else []) + list(s["prompt_ids"])
            answer = list(s["answer_ids"])
            with torch.no_grad():
                out = model(input_ids=torch.tensor([ids], device=device), use_cache=True)
            cache = out.past_key_values
            cache_type = type(cache).__name__
            first = int(out.logits[0, -1].argmax())
            frame_none = hf.compress_cache(cache, "none")
            restored = hf.restore_cache(frame_none, like=cache)
            self.assertEqual(type(restored), type(cache))
            got_none = _greedy(model, restored, first, len(answer))
            baseline = _greedy(model, cache, first, len(answer))
            self.assertEqual(got_none, baseline, "generation through 'none' is not token-identical")
            identical += 1
        relative, half, n = evaluator(kvserve.Profile.parse(
            {p.name: p.spec for p in kvserve.presets()}.get(LOSSY_PROFILE, LOSSY_PROFILE)))
        report = evaluator.last
        interval = report["ci95"]
        result = {
            "model": model_dir, "device": device, "transformers": transformers.__version__,
            "codec": "cuda" if isinstance(frame_none, getattr(kvserve, "DeviceFrame", None) or ()) else "cpu",
            "torch": torch.__version__, "cache_type": cache_type, "workload": evaluator.workload,
            "samples": n, "none_token_identical": f"{identical}/{n}",
            "exact_match_none": report["baseline_metric_value"],
            "lossy_profile": LOSSY_PROFILE, "lossy_compression_ratio_vs_f16": report["compression_ratio"],
            "exact_match_lossy": report["metric_value"],
            "relative_quality": relative, "relative_quality_ci95": interval,
            "evaluator_seconds_per_sample": report["seconds_per_sample"],
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
        self.assertGreater(report["baseline_metric_value"], 0.5,
                           "the shipped model should answer most qa samples uncompressed")
        self.assertEqual(evaluator(kvserve.Profile())[:2], (1.0, 0.0), "'none' must score exactly 1 vs itself")
        if device == "cuda" and kvserve.cuda_available():
            self.assertEqual(result["codec"], "cuda", "a CUDA cache must be encoded by the CUDA codec")
            # The one-call helper gives the same tokens through 'none'.
            s = evaluator.samples[0]
            ids = torch.tensor([([bos] if bos is not None else []) + list(s["prompt_ids"])], device=device)
            tokens, _ = hf.generate_through_frame(model, ids, "none", len(s["answer_ids"]))
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=True)
            self.assertEqual(tokens, _greedy(model, out.past_key_values, int(out.logits[0, -1].argmax()),
                                             len(s["answer_ids"])))
        if "intervals_overlap" in result:
            self.assertTrue(result["intervals_overlap"], result)


if __name__ == "__main__":
    unittest.main()
