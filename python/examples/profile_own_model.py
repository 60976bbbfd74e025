#!/usr/bin/env python3
"""Profile your own model: kvserve's Bayesian profiler driven from Python,
with quality measured by a transformers task evaluator on the model's device.

    PYTHONPATH=build/python python3 python/examples/profile_own_model.py --out-dir out/profile-qa

Profiles the shipped model (models/*/ or --model) on the qa workload
(data/eval/qa.jsonl, from scripts/data/build_all.sh) with
kvserve.task_eval.TaskEvaluator (the C++ evaluator's samples, scoring and
bootstrap), measures CR and codec speed on the model's own KV (the CUDA codec
when the model is on the GPU and the build has it), and writes to --out-dir:

  table.json     the Pareto profile table (controller format): load it with
                 `kvserve policy table.json --workload qa --quality-min 0.97` or give it to
                 the serving workers (--table)
  results.json   one entry per evaluation: profile, quality, 95% CI half width,
                 samples, seconds per sample, whether it came from the database,
                 CR and codec throughputs; plus the run's settings
  results.sqlite the results database: rerun the same command to resume (no
                 profile is evaluated twice)

With --compare-cli build/tools/kvserve/kvserve it also scores the best profile
and kivi-2 with the C++ evaluator on the same samples and records, per
profile, both relative qualities with their 95% intervals, whether the
intervals overlap, and the seconds per sample of each (prefills cached on
both sides).

Defaults (40 samples, budget 12, the kivi/uniform part of the default space)
finish in about a minute on one H200; --space configs/strategy_space.json
searches the whole default space (its codec metrics take longer).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_model() -> str | None:
    found = sorted(glob.glob(os.path.join(REPO, "models", "*", "config.json")))
    return os.path.dirname(found[0]) if found else None


# A small space for a quick run: kivi and uniform at 2-4 bits with the pack
# and rANS codecs, plus the paper's presets (docs/profiling.md §Space).
QUICK_SPACE = {
    "format": "kvserve-strategy-space", "version": 1,
    "pipeline": {"chunk": [256]},
    "transforms": {"identity": {}, "hadamard": {"seed": [7]}},
    "codecs": {"pack": {}, "rans": {"table": [12]}},
    "quantizers": {
        "kivi": {"k": [2, 3, 4], "v": [2, 3, 4], "group": [32, 128], "residual": [0, 128]},
        "uniform": {"k": [2, 4, 8], "v": [2, 4, 8], "group": [64]},
    },
    "include": ["kivi-2", "kivi-4", "cachegen"],
}


def compare_with_cli(cli: str, a: argparse.Namespace, evaluator, specs, head_scores) -> list:
    """The C++ evaluator (`kvserve quality`) on the same samples (-n, --seed)
    for `specs`, next to the Python evaluator's numbers. Both with the
    prefill (and the `none` baseline) already cached: the C++ run is repeated
    once into a fresh --cache-dir and the second run is timed; the Python
    evaluator keeps its prefills in memory."""
    out = []
    with tempfile.TemporaryDirectory() as cache:
        cmd = [cli, "quality", "--model", a.model, "--workload", evaluator.path, "--profile", ",".join(specs),
               "--samples", str(a.samples), "--seed", str(a.seed), "--cache-dir", cache, "--json"]
        if head_scores:
            cmd += ["--head-scores", head_scores]
        warm = subprocess.run(cmd, capture_output=True, text=True)
        if warm.returncode != 0:
            print(f"kvserve quality failed: {warm.stderr.strip()}", file=sys.stderr)
            return [{"command": " ".join(cmd), "error": warm.stderr.strip()}]
        start = time.perf_counter()
        timed = subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
    reports = json.loads(timed.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    for spec, cpp in zip(specs, reports):
        evaluator(spec)  # from its in-memory prefill: the per-sample cost of one evaluation
        py = evaluator.last
        lo, hi = cpp["relative_ci95"]
        if cpp["relative"] is None or lo is None or hi is None:  # undefined: the baseline scored 0
            out.append({"profile": spec, "command": " ".join(cmd), "cpp": cpp, "python": py})
            continue
        out.append({
            "profile": spec, "command": " ".join(cmd), "samples": cpp["samples_scored"],
            "cpp_relative": cpp["relative"], "cpp_ci95": [lo, hi],
            "cpp_seconds_per_sample": cpp["seconds"] / cpp["samples_scored"],
            "cpp_wall_seconds_all_profiles": wall,
            "python_relative": py["quality"], "python_ci95": py["ci95"],
            "python_seconds_per_sample": py["seconds_per_sample"],
            "intervals_overlap": py["ci95"][0] <= hi and lo <= py["ci95"][1],
            "speedup_per_sample": (cpp["seconds"] / cpp["samples_scored"]) / py["seconds_per_sample"],
        })
        print(f"{spec}: C++ {cpp['relative']:.3f} [{lo:.3f}, {hi:.3f}] {out[-1]['cpp_seconds_per_sample'] * 1e3:.1f} "
              f"ms/sample; Python {py['quality']:.3f} [{py['ci95'][0]:.3f}, {py['ci95'][1]:.3f}] "
              f"{py['seconds_per_sample'] * 1e3:.1f} ms/sample; overlap {out[-1]['intervals_overlap']}, "
              f"{out[-1]['speedup_per_sample']:.1f}x per sample", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=default_model(), help="HF model directory (default: models/*/)")
    ap.add_argument("--workload", default="qa", help="eval set name (in --eval-dir) or .jsonl file")
    ap.add_argument("--eval-dir", default=os.path.join(REPO, "data", "eval"))
    ap.add_argument("--space", default=None,
                    help="strategy space JSON (default: a quick kivi/uniform space, see the source)")
    ap.add_argument("--samples", type=int, default=40, help="eval samples per evaluation (0 = all)")
    ap.add_argument("--seed", type=int, default=0, help="sample subset and bootstrap seed")
    ap.add_argument("--budget", type=int, default=12, help="most evaluations")
    ap.add_argument("--holdout-samples", type=int, default=0,
                    help="score the Pareto rows again on N samples the search did not use, and put "
                         "the lower end of that interval into the table (0 = off)")
    ap.add_argument("--quality-min", type=float, default=0.97, help="quality floor, relative to none")
    ap.add_argument("--codec-kv-tokens", type=int, default=1024,
                    help="CR/codec speed on the first N tokens of the median-length sample's KV")
    ap.add_argument("--device", default=None, help="torch device (default: cuda when available)")
    ap.add_argument("--out-dir", required=True, help="where table.json, results.json, results.sqlite go")
    ap.add_argument("--no-progress", action="store_true", help="no live progress line")
    ap.add_argument("--compare-cli", default=None, metavar="KVSERVE",
                    help="path of the kvserve CLI: also score the best profile and kivi-2 with the C++ "
                         "evaluator (`kvserve quality`, same samples and seed) and record both in "
                         "results.json (agreement of the intervals, seconds per sample)")
    a = ap.parse_args()
    if a.model is None:
        ap.error("no model: pass --model (no models/*/config.json in the repository)")

    import torch

    import kvserve
    from kvserve.task_eval import TaskEvaluator

    os.makedirs(a.out_dir, exist_ok=True)
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False  # as the C++ runtime: full float32
    head_scores = os.path.join(a.model, "head_scores.json")
    head_scores = head_scores if os.path.exists(head_scores) else None
    start = time.perf_counter()
    evaluator = TaskEvaluator(a.model, a.workload, samples=a.samples, seed=a.seed, eval_dir=a.eval_dir,
                              device=a.device, head_scores=head_scores)
    kv = evaluator.codec_kv(a.codec_kv_tokens)
    print(f"model {a.model} on {evaluator.device}; workload {evaluator.path}, {evaluator.samples_scored} "
          f"samples; codec KV {tuple(kv.shape)} {kv.dtype} on {kv.device}; CUDA codec: "
          f"{kvserve.cuda_available()}", file=sys.stderr)
    space = kvserve.StrategySpace.load(a.space) if a.space else kvserve.StrategySpace.from_json(
        json.dumps(QUICK_SPACE))
    # duo prunes tokens per head, which a transformers attention mask cannot
    # express (TaskEvaluator raises for it): leave those profiles out.
    kept = [p for p in space.profiles if p.quantizer != "duo"]
    if len(kept) < len(space):
        print(f"{len(space) - len(kept)} duo profiles left out (per-head pruning)", file=sys.stderr)
        space = kvserve.StrategySpace.from_profiles(kept)
    holdout = None
    if a.holdout_samples > 0:  # the same loaded model, other samples
        holdout = TaskEvaluator(evaluator.model, a.workload, samples=a.holdout_samples, seed=a.seed,
                                eval_dir=a.eval_dir, head_scores=head_scores, holdout_of=a.samples)
    status = 0
    try:
        result = kvserve.profile(
            space, evaluator, kv=kv, quality_min=a.quality_min, budget=a.budget,
            db=os.path.join(a.out_dir, "results.sqlite"), model=evaluator.model_name,
            workload=evaluator.workload, sample_set=evaluator.sample_set, head_scores=head_scores,
            out=os.path.join(a.out_dir, "table.json"), progress=not a.no_progress, holdout=holdout)
    except kvserve.NoFeasibleProfileError as e:  # the trace is still worth writing
        print(f"error: {e}", file=sys.stderr)
        result, status = e.result, 1
    wall = time.perf_counter() - start
    rows = [{
        "profile": r.spec, "quality": r.quality, "ci_half_width": r.ci_half_width, "samples": r.samples,
        "feasible": r.feasible, "from_db": r.from_db,
        "seconds": r.seconds, "seconds_per_sample": (r.seconds / r.samples) if r.seconds and r.samples else None,
        "compression_ratio": r.compression_ratio, "encode_bytes_per_second": r.encode_bytes_per_second,
        "decode_bytes_per_second": r.decode_bytes_per_second,
    } for r in result.rows]
    doc = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "model": a.model, "workload": evaluator.workload, "samples": evaluator.samples_scored, "seed": a.seed,
        "quality_min": a.quality_min, "budget": a.budget, "space": a.space or "QUICK_SPACE (in the script)",
        "space_size": result.space_size, "device": str(evaluator.device), "codec_device": result.codec_device,
        "torch": torch.__version__, "cuda_codec": kvserve.cuda_available(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "evaluator": evaluator.name, "sample_set": evaluator.sample_set, "quality_kind": evaluator.quality_kind,
        "stop_reason": result.stop_reason, "evaluated": result.evaluated, "reused": result.reused,
        "codec_measured": result.codec_measured, "codec_from_db": result.codec_from_db,
        "best": result.best.spec if result.best else None,
        "best_compression_ratio": result.best.compression_ratio if result.best else None,
        "wall_seconds": wall, "evaluations": rows,
        "holdout_evaluator": holdout.name if holdout else None, "holdout": result.holdout_rows,
    }
    if a.compare_cli:
        specs = [str(kvserve.Profile.parse("identity+kivi(k=2,v=2,residual=128)+pack"))]
        if result.best and result.best.spec not in specs and result.best.spec != str(kvserve.Profile()):
            specs.insert(0, result.best.spec)
        doc["cpp_comparison"] = compare_with_cli(a.compare_cli, a, evaluator, specs, head_scores)
    with open(os.path.join(a.out_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    if result.out:
        print(f"wrote {result.out} ({len(result.table) - 1} Pareto profiles)", file=sys.stderr)
    print(f"wrote {os.path.join(a.out_dir, 'results.json')} ({len(rows)} evaluations) in {wall:.1f} s",
          file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
