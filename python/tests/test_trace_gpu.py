"""bench/trace_gpu.py on the toy model (CPU), a small window of the shared
trace: raw's saturation rate is measured first, every method's point
answers every request of the window (the script exits 1 when one is lost
or failed), kvserve's choices stay within the quality floor, the pool
serves prefix hits and the no-pool replay of the same requests is there to
compare them with, the decode worker batched (counted per point), a replay through two
prefill worker processes answers every request when one is SIGKILLed
mid-run, and the report (with where each point's time to first token
went) and plot are written."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import torch  # noqa: F401
except ImportError:
    torch = None

import kvserve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "trace_gpu.py")
TRACE = os.path.join(ROOT, "..", "shared", "data", "traces", "mooncake-conversation.jsonl")
BUILD = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(kvserve.__file__))))
CLI = os.environ.get("KVSERVE_CLI", os.path.join(BUILD, "tools", "kvserve", "kvserve"))


@unittest.skipIf(torch is None, "torch not installed")
@unittest.skipIf(not os.path.exists(TRACE), "the shared trace is not beside the repository")
@unittest.skipIf(not os.path.exists(CLI), "no kvserve CLI (KVSERVE_CLI)")
class TraceGpuScriptTest(unittest.TestCase):
    def test_every_request_of_every_point_is_answered_within_the_floor(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "trace.json")
            cmd = [sys.executable, SCRIPT, "--model", "tiny", "--kvserve", CLI, "--trace", TRACE,
                   "--window-seconds", "20", "--max-requests", "12", "--max-prompt-tokens", "256",
                   "--max-output-tokens", "8", "--pool-chunk-tokens", "64", "--gbps", "0.05", "--loads", "1",
                   "--methods", "none,kivi-2,kvserve", "--pool-check", "--calibration-tokens", "256",
                   "--kill-run", "--kill-requests", "24", "--kill-after", "1",
                   "--table", os.path.join(ROOT, "configs/profiles/kvs-qwen2-9m-qa.json"),
                   "--baseline-quality", os.path.join(ROOT, "docs/results/quality"),
                   "--out-json", out, "--out-md", os.path.join(tmp, "trace.md"),
                   "--plot", os.path.join(tmp, "trace.png")]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
            self.assertEqual(done.returncode, 0, done.stderr[-3000:])
            with open(out) as f:
                report = json.load(f)
            # The unrecorded warm-up answered its requests before the first measurement.
            self.assertEqual(report["warmups"][0]["summary"]["answered"], 4)
            rate = report["rates"]["0.05"]
            self.assertGreater(rate["saturation"]["rps"], 0)
            points = rate["points"]
            self.assertEqual(set(points), {"1/none", "1/kivi-2", "1/kvserve", "1/kvserve-no-pool"})
            for name, p in points.items():
                s = p["summary"]
                self.assertEqual((s["requests"], s["answered"], s["failed"]), (12, 12, 0), name)
                self.assertEqual(len(p["records"]), 12)
                # The decode process's counters over this point alone (its pool history's requests too).
                self.assertGreaterEqual(p["decode_batch"]["requests"], 12, name)
                self.assertGreaterEqual(p["decode_batch"]["row_steps"], p["decode_batch"]["steps"], name)
            self.assertTrue(all(r.get("quality", 1.0) >= 0.97 for r in points["1/kvserve"]["records"]))
            self.assertGreater(points["1/kvserve"]["summary"]["prefix_hit_rate"], 0)
            self.assertEqual(points["1/kvserve-no-pool"]["summary"]["prefix_hit_rate"], 0)
            self.assertEqual(report["failures"], [])
            self.assertGreaterEqual(report["decode"]["batch"]["requests"], 12 * 5)
            self.assertTrue(report["checks"]["pool"])
            # The kill run: the second worker process died mid-replay, its requests went to the other.
            kill = report["kill"]
            self.assertTrue(kill["killed"])
            self.assertEqual((kill["summary"]["answered"], kill["summary"]["failed"]), (24, 0))
            self.assertEqual(kill["exit"], 0)
            self.assertGreaterEqual(kill["summary"]["rerouted"], 1)
            # Each record says where its time went (the report's stage table).
            for field in ("queue_s", "prefill_s", "kv_s", "connection_wait_s", "streamed",
                          "first_token_s"):
                self.assertTrue(all(field in r for r in points["1/kvserve"]["records"]), field)
            with open(os.path.join(tmp, "trace.md")) as f:
                md = f.read()
            self.assertIn("Against issue 43's criteria", md)
            self.assertIn("Where the time to first token goes", md)
            self.assertIn("decode rows a step", md)
            self.assertNotIn("without a pool history", md)  # every point here started from the history
            self.assertTrue(os.path.getsize(os.path.join(tmp, "trace.png")) > 0)


@unittest.skipIf(torch is None, "torch not installed")
@unittest.skipIf(not os.path.exists(TRACE), "the shared trace is not beside the repository")
class TraceGpuCandidatesTest(unittest.TestCase):
    def test_kvserve_with_nothing_but_raw_to_choose_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            table = os.path.join(tmp, "raw-only.json")
            with open(table, "w") as f:
                f.write(kvserve.ProfileTable.from_rows([], ["qa"]).to_json())
            out = os.path.join(tmp, "trace.json")
            done = subprocess.run([sys.executable, SCRIPT, "--model", "tiny", "--kvserve", CLI, "--trace", TRACE,
                                   "--methods", "kvserve", "--candidates", "", "--table", table,
                                   "--calibration-tokens", "64", "--out-json", out],
                                  capture_output=True, text=True, timeout=300, cwd=ROOT)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("only raw to choose from", done.stderr)
            self.assertFalse(os.path.exists(out))  # refused before any replay


def _point(method, load, goodput, pool=True, backend="memory", records=()):
    return {"method": method, "load": load, "gbps": 5.0, "pool": pool, "pool_backend": backend if pool else None,
            "summary": {"goodput_rps": goodput, "ttft_p99_s": 1.0}, "records": list(records)}


class TraceGpuReportTest(unittest.TestCase):
    """A second pool backend's points (``<load>/<method>@<backend>``) sit
    beside the comparison: never the best static method or "the others",
    but their hits are compared with the same requests recomputed."""

    def test_a_second_backends_points_stay_out_of_the_comparison(self):
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import trace_gpu  # noqa: PLC0415

        import random  # noqa: PLC0415

        rng = random.Random(43)
        ids = list(range(rng.randrange(4, 9)))
        hit = lambda i, t: {"id": i, "ok": True, "prefix_hit": True, "prefix_chunks": 3, "ttft_s": t}  # noqa: E731
        miss = lambda i, t: {"id": i, "ok": True, "prefix_hit": False, "ttft_s": t}  # noqa: E731
        redis_ttft = [rng.uniform(0.1, 0.5) for _ in ids]
        off_ttft = [rng.uniform(0.6, 2.0) for _ in ids]
        points = {
            "1/kivi-2": _point("kivi-2", 1, 0.4),
            "1/cachegen": _point("cachegen", 1, 0.3),
            "1/kvserve": _point("kvserve", 1, 0.5, records=[miss(i, 1.0) for i in ids]),
            "1/kivi-2@redis": _point("kivi-2", 1, 0.9, backend="redis"),
            "1/kvserve@redis": _point("kvserve", 1, 0.6, backend="redis",
                                      records=[hit(i, t) for i, t in zip(ids, redis_ttft)]),
            "1/kvserve-no-pool": _point("kvserve", 1, 0.2, pool=False,
                                        records=[miss(i, t) for i, t in zip(ids, off_ttft)]),
        }
        self.assertEqual(trace_gpu.best_static(points, 1), "kivi-2")
        row = trace_gpu.checks({"rates": {"5": {"points": points}}})["points"][0]
        self.assertAlmostEqual(row["vs_best_other"], 0.5 / 0.4)
        effect = trace_gpu.pool_effect(points)
        self.assertEqual(len(effect), 1)  # the embedded pool's point hit nothing
        self.assertEqual((effect[0]["backend"], effect[0]["hits"]), ("redis", len(ids)))
        self.assertAlmostEqual(effect[0]["ttft_hit_mean_s"], sum(redis_ttft) / len(ids))
        self.assertAlmostEqual(effect[0]["ttft_recomputed_mean_s"], sum(off_ttft) / len(ids))


if __name__ == "__main__":
    unittest.main()
