"""bench/pd_sweep.py on the toy model (CPU): every point of the sweep is
reported for every method, kvserve's requests stay within the quality
floor, lossless requests give a single-process run's tokens, the pool
phase's hits are fetched by the decode worker itself and reported against
kvserve's transport alone over a link shaped like the pool's and against the
pool client alone, and a report merged
from two runs keeps both runs' points."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

try:
    import torch  # noqa: F401
except ImportError:
    torch = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SWEEP = os.path.join(ROOT, "bench", "pd_sweep.py")


@unittest.skipIf(torch is None, "torch not installed")
class PdSweepTest(unittest.TestCase):
    def sweep(self, out_json, gbps, extra=()):
        cmd = [sys.executable, SWEEP, "--model", "tiny", "--prompt-tokens", "256,1024", "--gbps", gbps,
               "--requests", "2", "--table", os.path.join(ROOT, "configs/profiles/kvs-qwen2-9m-qa.json"),
               "--workload", "qa", "--baseline-quality", os.path.join(ROOT, "docs/results/quality"),
               "--candidates", "kivi-4", "--check", "--out-json", out_json, "--out-md", out_json + ".md", *extra]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        with open(out_json) as f:
            return json.load(f)

    def test_sweep_reports_every_point_and_respects_the_floor(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "e2e.json")
            report = self.sweep(path, "0.2", ["--pool-tokens", "1100", "--pool-gbps", "0.5", "--pool-requests", "1"])
            points = {(p["gbps"], p["tokens"]): p for p in report["points"]}
            self.assertEqual(set(points), {(0.2, 256), (0.2, 1024)})
            for p in points.values():
                self.assertEqual(set(p["methods"]), {"none", "kivi-2", "cachegen", "kvserve", "best-static"})
            kv_rows = [r for r in report["rows"] if r["method"] == "kvserve"]
            self.assertEqual(len(kv_rows), 4)
            self.assertTrue(all(r["quality"] >= 0.97 for r in kv_rows))
            self.assertTrue(any(r.get("matches_single_process") for r in report["rows"]))
            self.assertEqual(report["checks"]["failures"], [])
            pool = report["checks"]["pool"]
            self.assertEqual(len(pool), 1)
            self.assertGreater(pool[0]["transport_gbps"], 0)
            self.assertGreater(pool[0]["pool_client_gbps"], 0)
            self.assertAlmostEqual(pool[0]["fetch_ratio"], pool[0]["fetch_gbps"] / pool[0]["transport_gbps"])
            # The hits came through the decode worker's own pool client (a process per pool rate).
            hits = [r for r in report["pool_rows"] if r["source"] == "pool"]
            self.assertTrue(hits and all(r["prefix_hit"] and r["path"] == "decode-fetch" for r in hits))
            self.assertIn("decode-pool-0.5", report["memory"])
            with open(path + ".md") as f:
                text = f.read()
            self.assertIn("Prefix pool", text)
            self.assertIn("fetches each chunk frame from the pool itself", text)
            # A second call's points join the first's.
            merged = self.sweep(path, "0", ["--append"])
            self.assertEqual({(p["gbps"], p["tokens"]) for p in merged["points"]},
                             {(0.2, 256), (0.2, 1024), (0.0, 256), (0.0, 1024)})
            self.assertEqual(len(merged["commands"]), 2)
            self.assertEqual(len(merged["machines"]), 2)
            with open(path + ".md") as f:
                self.assertIn("criteria on these points:", f.read())


class PdSweepChecksTest(unittest.TestCase):
    """checks() on a report's memory sections alone (no run)."""

    def test_peak_is_the_largest_device_side_and_sides_without_a_device_count_nothing(self):
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        try:
            import pd_sweep  # noqa: PLC0415
        finally:
            sys.path.pop(0)
        rng = random.Random(41)
        for _ in range(20):
            peaks = {side: rng.randrange(1, 1 << 26) for side in ("prefill_connector", "decode", "decode-pool-5")}
            # A CPU decode worker reports its batch counters only.
            batch_only = {"batch": {"steps": rng.randrange(100)}}
            runs = [{side: {"peak_transfer_bytes": v} for side, v in peaks.items()},
                    {"prefill_connector": {}, "decode": batch_only}]
            report = {"layers": 2, "points": [], "memory_runs": runs}
            self.assertEqual(pd_sweep.checks(report)["peak_transfer_bytes"], max(peaks.values()))
            self.assertIsNone(pd_sweep.checks({"layers": 2, "points": [], "memory": {"decode": batch_only}})
                              ["peak_transfer_bytes"])


if __name__ == "__main__":
    unittest.main()
