"""kvserve.profile: the Bayesian profiler driven by a Python evaluate().

Property tests on seeded inputs, CPU only: an evaluate() that is a known
deterministic function of the profile (quality falls with fewer key/value
bits), random floors and budgets. The CUDA-kv test runs only where the
module has the CUDA codec and torch sees a GPU; the transformers task
evaluator test only with transformers, the shipped model and the qa eval set.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import random
import sqlite3
import subprocess
import tempfile
import unittest

import numpy as np

import kvserve
from kv_test_util import synth

try:
    import torch
except ImportError:
    torch = None

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPE = (2, 2, 256, 64)
BUILD = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(kvserve.__file__))))
CLI = os.environ.get("KVSERVE_CLI", os.path.join(BUILD, "tools", "kvserve", "kvserve"))


def kivi_space(bits=(2, 3, 4, 6, 8)):
    """kivi profiles over a (k, v) bit grid, plus none."""
    specs = ["none"]
    for k, v in itertools.product(bits, bits):
        p = kvserve.Profile.parse("kivi-2")
        p.set("k", k)
        p.set("v", v)
        specs.append(str(p))
    return specs


def bits_quality(profile) -> float:
    """Relative quality falling with fewer bits (monotone, as the engine's
    pruning assumes); `none` scores 1."""
    if profile.quantizer != "kivi":
        return 1.0
    k, v = profile.get("k"), profile.get("v")
    return 1.0 - 0.06 * (8 - k) / 6 - 0.04 * (8 - v) / 6


class Counter:
    """evaluate() that records its calls."""

    def __init__(self, fn=bits_quality):
        self.fn = fn
        self.calls = []

    def __call__(self, profile):
        self.calls.append(str(profile))
        return self.fn(profile)


def run(space, evaluate, kv, **kw):
    kw.setdefault("progress", False)
    return kvserve.profile(space, evaluate, kv=kv, **kw)


class ProfileSearchTest(unittest.TestCase):
    def test_best_is_feasible_and_budget_respected(self):
        rng = random.Random(2011)
        space = kivi_space()
        kv = synth(31, shape=SHAPE)
        for trial in range(4):
            quality_min = rng.uniform(0.93, 0.99)
            budget = rng.randint(3, 14)
            searcher = ["bayes", "random", "exhaustive"][trial % 3]
            ev = Counter()
            r = run(space, ev, kv, quality_min=quality_min, budget=budget, seed=rng.randint(1, 1000),
                    searcher=searcher)
            with self.subTest(trial=trial, quality_min=quality_min, budget=budget, searcher=searcher):
                self.assertLessEqual(len(r.rows), budget)
                self.assertEqual(len(ev.calls), len(r.rows))  # fresh db: every row evaluated once
                self.assertEqual(len(set(ev.calls)), len(ev.calls))
                self.assertEqual(r.evaluated, len(r.rows))
                self.assertEqual(r.reused, 0)
                self.assertEqual(r.space_size, len(space))
                for row in r.rows:
                    self.assertAlmostEqual(row.quality, bits_quality(row.profile), places=12)
                    self.assertEqual(row.feasible, row.quality >= quality_min)
                    self.assertFalse(row.from_db)
                feasible = [row for row in r.rows if row.feasible]
                if feasible:
                    self.assertIsNotNone(r.best)
                    self.assertGreaterEqual(r.best.quality, quality_min)
                    self.assertEqual(r.best.compression_ratio, max(f.compression_ratio for f in feasible))
                else:
                    self.assertIsNone(r.best)
                    self.assertIsNone(r.table_json)

    def test_codec_metrics_are_the_measured_ones(self):
        kv = synth(32, shape=SHAPE)
        r = run(kivi_space(bits=(2, 8)), bits_quality, kv, quality_min=0.9, budget=5, searcher="exhaustive")
        for row in r.rows:
            frame = kvserve.encode(kv, row.spec)
            self.assertAlmostEqual(row.compression_ratio, kv.nbytes / len(frame), places=9, msg=row.spec)
            self.assertGreater(row.encode_bytes_per_second, 0)
            self.assertGreater(row.decode_bytes_per_second, 0)
        self.assertEqual(r.codec_device, "cpu")

    def test_torch_and_pairs_give_the_same_metrics_as_numpy(self):
        if torch is None:
            self.skipTest("torch not installed")
        kv = synth(33, dtype="f32", shape=SHAPE)
        # rANS: the CR depends on the values (pack's does not).
        space = [s.replace("+pack", "+rans") for s in kivi_space(bits=(2, 4))]
        a = run(space, bits_quality, kv, quality_min=0.9, budget=5, searcher="exhaustive")
        t = torch.from_numpy(kv)
        views = [(t[l, 0], t[l, 1]) for l in range(t.shape[0])]  # one strided view
        # K token-major (strides differ from V's): the layers are gathered into a copy.
        copies = [(t[l, 0].permute(1, 0, 2).contiguous().permute(1, 0, 2), t[l, 1].clone())
                  for l in range(t.shape[0])]
        self.assertTrue(kvserve.describe_layout(views)["single_view"])
        self.assertFalse(kvserve.describe_layout(copies)["single_view"])
        for other in (t, views, copies):
            b = run(space, bits_quality, other, quality_min=0.9, budget=5, searcher="exhaustive")
            self.assertEqual([x.spec for x in a.rows], [x.spec for x in b.rows])
            self.assertEqual([x.compression_ratio for x in a.rows], [x.compression_ratio for x in b.rows])

    def test_resume_from_db_evaluates_nothing_twice(self):
        kv = synth(34, shape=SHAPE)
        space = kivi_space()
        with tempfile.TemporaryDirectory() as d:
            db = os.path.join(d, "results.sqlite")
            args = dict(quality_min=0.96, budget=8, db=db, model="m", workload="w", sample_set="s")
            first, second = Counter(), Counter()
            a = run(space, first, kv, **args)
            b = run(space, second, kv, **args)
            self.assertGreater(len(first.calls), 0)
            self.assertEqual(second.calls, [])
            self.assertEqual(b.reused, len(b.rows))
            self.assertEqual(b.evaluated, 0)
            self.assertEqual(b.codec_measured, 0)
            self.assertEqual(b.codec_from_db, len(space))
            self.assertTrue(all(row.from_db for row in b.rows))
            self.assertEqual([(x.spec, x.quality) for x in a.rows], [(x.spec, x.quality) for x in b.rows])
            # Another sample set is another scope: evaluated again.
            third = Counter()
            run(space, third, kv, **dict(args, sample_set="other"))
            self.assertEqual(len(third.calls), len(first.calls))
            # Another KV: codec metrics measured again, quality rows reused.
            c = run(space, Counter(), synth(35, shape=SHAPE), **args)
            self.assertEqual(c.codec_measured, len(space))

    def test_exception_in_evaluate_surfaces_and_keeps_finished_rows(self):
        class Boom(RuntimeError):
            pass

        kv = synth(36, shape=SHAPE)
        space = kivi_space()
        with tempfile.TemporaryDirectory() as d:
            db = os.path.join(d, "results.sqlite")
            done = []

            def flaky(profile):
                if len(done) == 3:
                    raise Boom(f"engine crashed on {profile}")
                done.append(str(profile))
                return bits_quality(profile)

            with self.assertRaises(Boom) as ctx:
                run(space, flaky, kv, quality_min=0.96, budget=10, db=db, evaluator="engine")
            self.assertIn("engine crashed on", str(ctx.exception))
            again = Counter()
            r = run(space, again, kv, quality_min=0.96, budget=10, db=db, evaluator="engine")
            self.assertGreaterEqual(r.reused, 3)
            self.assertTrue(set(done) <= {row.spec for row in r.rows})
            self.assertFalse(set(done) & set(again.calls))
        # KeyboardInterrupt (Ctrl-C inside evaluate) too.
        def interrupted(profile):
            raise KeyboardInterrupt

        with self.assertRaises(KeyboardInterrupt):
            run(space, interrupted, kv, budget=3)

    def test_bad_input_raises_clear_errors(self):
        kv = synth(37, shape=SHAPE)
        space = kivi_space(bits=(2, 4))
        with self.assertRaisesRegex(ValueError, "empty"):
            run([], bits_quality, kv)
        with self.assertRaisesRegex(ValueError, "budget"):
            run(space, bits_quality, kv, budget=0)
        with self.assertRaisesRegex(TypeError, "budget"):
            run(space, bits_quality, kv, budget=2.5)
        with self.assertRaisesRegex(ValueError, "kv"):
            run(space, bits_quality, np.zeros((2, 3, 4), dtype=np.float32))
        with self.assertRaisesRegex(ValueError, "kv"):
            run(space, bits_quality, None)
        with self.assertRaisesRegex(TypeError, "callable"):
            run(space, 0.99, kv)
        with self.assertRaisesRegex(TypeError, "returned str"):
            run(space, lambda p: "good", kv)
        with self.assertRaisesRegex(TypeError, "4 items"):
            run(space, lambda p: (1.0, 0.0, 3, 4), kv)
        with self.assertRaisesRegex(ValueError, "non-finite"):
            run(space, lambda p: float("nan"), kv)
        with self.assertRaisesRegex(ValueError, "searcher"):
            run(space, bits_quality, kv, searcher="annealing")
        with self.assertRaises(FileNotFoundError):
            run(os.path.join(REPO, "no-such-space.json"), bits_quality, kv)
        with self.assertRaises(ValueError):  # a spec that does not parse
            run(["kivi(k=99)"], bits_quality, kv)
        with self.assertRaisesRegex(ValueError, "head_scores"):
            run(["identity+mixhq+pack"], bits_quality, kv)

    def test_space_forms(self):
        kv = synth(38, shape=SHAPE)
        text = json.dumps({"format": "kvserve-strategy-space", "version": 1,
                           "quantizers": {"kivi": {"k": [2, 4], "v": [2, 4], "transforms": ["identity"],
                                                   "codecs": ["pack"]}},
                           "transforms": {"identity": {}}, "codecs": {"pack": {}}})
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "space.json")
            with open(path, "w") as f:
                f.write(text)
            sizes = {len(run(s, bits_quality, kv, budget=10, searcher="exhaustive", quality_min=0).rows)
                     for s in (text, path, json.loads(text), kvserve.StrategySpace.from_json(text))}
        self.assertEqual(len(sizes), 1)
        # The repository's space loads (mixhq/duo left out without head scores).
        space = kvserve.StrategySpace.load(os.path.join(REPO, "configs", "strategy_space.json"))
        self.assertGreater(len(space), 10)
        # Preset names in a list.
        r = run(["kivi-2", "kivi-4"], bits_quality, kv, budget=5, searcher="exhaustive", quality_min=0)
        self.assertEqual(len(r.rows), 2)
        self.assertEqual(r.stop_reason, "space exhausted")

    def test_table_loads_in_the_controller_and_the_cli(self):
        kv = synth(39, shape=SHAPE)
        quality_min = 0.96
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "table.json")
            space = kivi_space()
            r = run(space, bits_quality, kv, quality_min=quality_min, budget=len(space), workload="chat",
                    out=out, searcher="exhaustive")
            self.assertEqual(r.out, out)
            summary = json.loads(json.dumps(r.to_dict()))  # JSON-ready, for run records
            self.assertEqual(summary["best"]["spec"], r.best.spec)
            self.assertEqual(len(summary["rows"]), len(r.rows))
            table = kvserve.ProfileTable.load(out)
            self.assertEqual(table.workloads, ["chat"])
            feasible = {row.spec: row for row in r.rows if row.feasible}
            self.assertIn(r.best.spec, [p.spec for p in table.profiles])
            for i, p in enumerate(table.profiles[1:], start=1):  # row 0: raw
                self.assertIn(p.spec, feasible)
                self.assertGreaterEqual(table.quality(i, "chat"), quality_min)
                self.assertAlmostEqual(p.compression_ratio, feasible[p.spec].compression_ratio)
            with open(out) as f:
                doc = json.load(f)
            self.assertIn("kvserve.profile", doc["comment"])
            self.assertIn("quality_kind", doc)
            # A controller decides from it.
            c = kvserve.Controller(table)
            self.assertEqual(c.choose("chat", kv_bytes=1e9, bandwidth=1e8, quality_min=quality_min).action, "send")
            if os.access(CLI, os.X_OK):
                got = subprocess.run([CLI, "policy", out, "--workload", "chat", "--quality-min", str(quality_min)],
                                     capture_output=True, text=True)
                self.assertEqual(got.returncode, 0, got.stderr)
                self.assertIn(r.best.spec, got.stdout)  # the max-CR profile wins at low bandwidth
            # Nothing feasible: no table, and the error carries the trace.
            with self.assertRaises(kvserve.NoFeasibleProfileError) as ctx:
                run(kivi_space(bits=(2,)), bits_quality, kv, quality_min=0.999, budget=3,
                    out=os.path.join(d, "none.json"))
            self.assertGreater(len(ctx.exception.result.rows), 0)
            self.assertFalse(os.path.exists(os.path.join(d, "none.json")))
            # Only `none` feasible: nothing that compresses, no table either.
            with self.assertRaisesRegex(kvserve.NoFeasibleProfileError, "CR > 1"):
                run(kivi_space(bits=(2,)), bits_quality, kv, quality_min=0.99, budget=2, searcher="exhaustive",
                    out=os.path.join(d, "none.json"))

    def test_progress_line(self):
        kv = synth(40, shape=SHAPE)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            r = kvserve.profile(kivi_space(bits=(2, 8)), bits_quality, kv=kv, quality_min=0.95, budget=4)
        lines = [l for l in err.getvalue().splitlines() if " iter " in l]
        self.assertEqual(len(lines), len(r.rows))
        self.assertIn("best feasible CR", lines[-1])
        err = io.StringIO()
        with contextlib.redirect_stderr(err):  # a note every 64 codec measurements
            kvserve.profile(kivi_space(bits=range(1, 9)), bits_quality, kv=kv, budget=1)
        self.assertIn("codec metrics: 64 measured, 0 from the database, 64 / 65", err.getvalue())
        seen = []
        run(kivi_space(bits=(2, 8)), bits_quality, kv, budget=3, progress=seen.append)
        self.assertEqual([p["iteration"] for p in seen], list(range(1, len(seen) + 1)))
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            run(kivi_space(bits=(2, 8)), bits_quality, kv, budget=3, progress=False)
        self.assertEqual(err.getvalue(), "")
        # A progress callback that raises stops the search at the next evaluation.
        ev = Counter()
        with self.assertRaises(ZeroDivisionError):
            run(kivi_space(bits=(2, 8)), ev, kv, budget=4, progress=lambda p: 1 / 0)
        self.assertEqual(len(ev.calls), 1)

    def test_tuple_quality_is_stored_with_its_interval(self):
        kv = synth(41, shape=SHAPE)
        with tempfile.TemporaryDirectory() as d:
            db = os.path.join(d, "r.sqlite")
            r = run(kivi_space(bits=(2, 8)), lambda p: (bits_quality(p), 0.01, 50), kv, budget=3, db=db,
                    evaluator="fixed")
            self.assertTrue(all(row.ci_half_width == 0.01 and row.samples == 50 for row in r.rows))
            b = run(kivi_space(bits=(2, 8)), lambda p: 0.0, kv, budget=3, db=db, evaluator="fixed")
            self.assertEqual([(x.quality, x.ci_half_width, x.samples) for x in b.rows],
                             [(x.quality, x.ci_half_width, x.samples) for x in r.rows])
            with sqlite3.connect(db) as conn:
                tables = [t for (t,) in conn.execute("select name from sqlite_master where type='table'")]
            self.assertTrue(tables)


class HoldOutTest(unittest.TestCase):
    """kvserve.profile(holdout=...): the Pareto rows scored again on other samples."""

    def test_table_takes_the_held_out_lower_end_and_drops_rows_below_the_floor(self):
        kv = synth(51, dtype="f16", shape=SHAPE)
        space = kivi_space(bits=(2, 4, 8))
        calls = []

        def held(profile):  # out of sample: 0.02 worse than the search saw, +-0.01
            calls.append(str(profile))
            return bits_quality(profile) - 0.02, 0.01, 50

        r = run(space, bits_quality, kv, budget=10, searcher="exhaustive", quality_min=0.95, holdout=held)
        # Every Pareto row of the search (codec speeds are measured, so the set varies from run
        # to run) was scored once out of sample, and only those.
        self.assertEqual(sorted(calls), sorted(h["spec"] for h in r.holdout_rows))
        self.assertTrue(all(h["search_quality"] >= 0.95 for h in r.holdout_rows))
        rows = json.loads(r.table_json)["profiles"]
        self.assertTrue(rows)
        self.assertLess(len(rows), len(r.holdout_rows))  # some rows lose the floor out of sample
        for row in rows:
            spec = row["spec"]
            q = bits_quality(kvserve.Profile.parse(spec))
            self.assertAlmostEqual(row["quality"]["default"], q - 0.03)
            self.assertAlmostEqual(row["quality_holdout"]["default"], q - 0.02)
            self.assertAlmostEqual(row["quality_search"]["default"], q)
            self.assertGreaterEqual(row["quality"]["default"], 0.95)
        self.assertEqual({row["spec"] for row in rows}, {h["spec"] for h in r.holdout_rows if h["kept"]})
        self.assertIn("held-out", json.loads(r.table_json)["quality_kind"])
        point = run(space, bits_quality, kv, budget=10, searcher="exhaustive", quality_min=0.95,
                    holdout=held, floor_on="point")
        for row in json.loads(point.table_json)["profiles"]:
            self.assertAlmostEqual(row["quality"]["default"], row["quality_holdout"]["default"])
        self.assertGreaterEqual(len(json.loads(point.table_json)["profiles"]), len(rows))

    def test_nothing_meeting_the_floor_out_of_sample_writes_no_table(self):
        kv = synth(52, dtype="f16", shape=SHAPE)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "t.json")
            with self.assertRaisesRegex(kvserve.NoFeasibleProfileError, "held-out"):
                run(kivi_space(bits=(4, 8)), bits_quality, kv, budget=5, searcher="exhaustive",
                    quality_min=0.95, holdout=lambda p: 0.5, out=out)
            self.assertFalse(os.path.exists(out))
        with self.assertRaises(ValueError):
            run(kivi_space(bits=(8,)), bits_quality, kv, budget=2, holdout=bits_quality, floor_on="median")
        with self.assertRaises(TypeError):
            run(kivi_space(bits=(8,)), bits_quality, kv, budget=2, holdout=lambda p: "good")

    def test_lower_end_search_checks_the_interval_and_the_db_keeps_point_estimates(self):
        rng = random.Random(4103)
        kv = synth(53, shape=SHAPE)
        space = kivi_space()
        point_feasible_but_not_lower = 0
        for trial in range(4):
            quality_min = rng.uniform(0.93, 0.98)
            half = rng.uniform(0.005, 0.03)
            budget = rng.randint(6, 16)
            searcher = ["bayes", "random", "exhaustive", "bayes"][trial]

            def search_eval(profile, half=half):
                return bits_quality(profile), half, 40

            with self.subTest(trial=trial, quality_min=quality_min, half=half, searcher=searcher), \
                    tempfile.TemporaryDirectory() as d:
                db = os.path.join(d, "r.sqlite")
                r = run(space, search_eval, kv, quality_min=quality_min, budget=budget, searcher=searcher,
                        seed=rng.randint(1, 1000), db=db, evaluator="fixed", holdout=bits_quality)
                self.assertTrue(r.rows)
                for row in r.rows:
                    # Rows report the full estimate; feasibility is the lower end's.
                    self.assertEqual(row.quality, bits_quality(row.profile))
                    self.assertEqual(row.ci_half_width, half)
                    self.assertEqual(row.samples, 40)
                    self.assertEqual(row.feasible, row.quality - row.ci_half_width >= quality_min, row.spec)
                    self.assertEqual(row.floor, quality_min)
                    point_feasible_but_not_lower += row.quality >= quality_min and not row.feasible
                if r.best is not None:
                    self.assertGreaterEqual(r.best.quality - r.best.ci_half_width, quality_min)
                searched = {row.spec: row.quality - row.ci_half_width for row in r.rows}
                for h in r.holdout_rows:  # the walk's search figure: the lower end too
                    self.assertEqual(h["search_quality"], searched[h["spec"]])
                    self.assertGreaterEqual(h["search_quality"], quality_min)
                with sqlite3.connect(db) as conn:
                    stored = {spec: (q, ci, n) for spec, q, ci, n in conn.execute(
                        "select spec, quality, quality_ci, samples from evaluations where evaluator = 'fixed'")}
                self.assertEqual(set(stored), {row.spec for row in r.rows})
                for spec, (q, ci, n) in stored.items():
                    self.assertEqual((q, ci, n), (bits_quality(kvserve.Profile.parse(spec)), half, 40), spec)
                # floor_on="point" (or no holdout): the search checks point estimates.
                p = run(space, search_eval, kv, quality_min=quality_min, budget=budget, searcher=searcher,
                        seed=3, db=db, evaluator="fixed", holdout=bits_quality, floor_on="point")
                for row in p.rows:
                    self.assertEqual(row.feasible, row.quality >= quality_min, row.spec)
        self.assertGreater(point_feasible_but_not_lower, 0)  # the rule made a difference

    def test_walk_replaces_failing_pareto_rows_with_the_best_row_that_holds(self):
        rng = random.Random(5209)
        kv = synth(54, shape=SHAPE)
        space = kivi_space()
        cr = {spec: kv.nbytes / len(kvserve.encode(kv, spec)) for spec in space}
        walked_past_pareto = 0
        for trial in range(6):
            quality_min = rng.uniform(0.9, 0.96)
            half = rng.uniform(0.0, 0.01)
            held_half = rng.uniform(0.0, 0.01)
            searcher = ["exhaustive", "bayes", "random"][trial % 3]
            budget = len(space) if searcher == "exhaustive" else rng.randint(10, 18)

            def search_eval(profile, half=half):
                return bits_quality(profile), half, 40

            kw = dict(quality_min=quality_min, budget=budget, searcher=searcher, seed=rng.randint(1, 1000),
                      evaluator="search")
            with tempfile.TemporaryDirectory() as d:
                kw["db"] = os.path.join(d, "r.sqlite")  # the second run repeats the first search exactly
                # Every row holds: the rows scored are the search's Pareto rows.
                first = run(space, search_eval, kv, holdout=lambda p: 1.0, **kw)
                pareto = sorted((h["spec"] for h in first.holdout_rows if h["pareto"]), key=cr.get)
                # Out of sample the top Pareto rows (every third trial: all of them) lose 0.2.
                failing = set(pareto[0 if trial % 3 == 2 else rng.randrange(len(pareto)):]) if pareto else set()

                def held(profile, failing=failing, held_half=held_half):
                    return bits_quality(profile) - (0.2 if str(profile) in failing else 0.0), held_half, 30

                r = run(space, search_eval, kv, holdout=held, **kw)
            with self.subTest(trial=trial, quality_min=quality_min, failing=len(failing), searcher=searcher):
                self.assertEqual([row.spec for row in r.rows], [row.spec for row in first.rows])
                held_figure = {row.spec: held(row.profile)[0] - held_half for row in r.rows}
                holds = [row.compression_ratio for row in r.rows
                         if row.feasible and row.compression_ratio > 1 and held_figure[row.spec] >= quality_min]
                if not holds:
                    self.assertIsNone(r.table_json)
                    continue
                table = json.loads(r.table_json)["profiles"]
                # The best row: the highest-CR search-feasible row that holds out of sample.
                self.assertAlmostEqual(max(row["compression_ratio"] for row in table), max(holds), places=12)
                for row in table:
                    self.assertGreaterEqual(row["quality"]["default"], quality_min)
                    self.assertAlmostEqual(row["quality"]["default"], held_figure[row["spec"]])
                scored = [h["spec"] for h in r.holdout_rows]
                self.assertEqual(len(scored), len(set(scored)))  # each row scored once
                self.assertEqual({h["spec"] for h in r.holdout_rows if h["pareto"]}, set(pareto))
                for h in r.holdout_rows:
                    if not h["pareto"]:
                        # A feasible row of the search, scored only down to the first that holds.
                        self.assertGreaterEqual(h["search_quality"], quality_min)
                        self.assertGreaterEqual(cr[h["spec"]], max(holds))
                    self.assertEqual(h["kept"], h["spec"] in {row["spec"] for row in table})
                walked_past_pareto += any(not h["pareto"] and h["kept"] for h in r.holdout_rows)
        self.assertGreater(walked_past_pareto, 0)  # some table owes its best row to the walk


class StricterFloorsTest(unittest.TestCase):
    """kvserve.profile(more_floors=...): the same search again at stricter floors."""

    @staticmethod
    def best_cr_at(table_json, floor):
        rows = json.loads(table_json)["profiles"] if table_json else []
        return max([row["compression_ratio"] for row in rows if row["quality"]["default"] >= floor], default=0.0)

    def test_merged_table_serves_each_stricter_floor_as_well_as_its_own_search(self):
        rng = random.Random(6151)
        kv = synth(55, shape=SHAPE)
        space = kivi_space()
        stricter_rows_added = 0
        for trial in range(4):
            quality_min = rng.uniform(0.9, 0.93)
            strict = sorted(rng.sample([0.95, 0.96, 0.97, 0.98, 0.99], 2))
            half = rng.choice([0.0, 0.004])
            budget = rng.randint(5, 8)
            seed = rng.randint(1, 1000)
            holdout = trial % 2 == 1  # then the search checks lower ends and the walk runs at each floor

            def search_eval(profile, half=half):
                return bits_quality(profile), half, 40

            kw = dict(kv=kv, budget=budget, seed=seed, searcher="bayes",
                      holdout=search_eval if holdout else None)
            with self.subTest(trial=trial, quality_min=quality_min, strict=strict, holdout=holdout), \
                    tempfile.TemporaryDirectory() as d:
                db = os.path.join(d, "r.sqlite")
                ev = Counter(search_eval)
                # Unsorted, repeated, and one floor below quality_min (ignored).
                both = run(space, ev, quality_min=quality_min, db=db, more_floors=[strict[1], 0.5, strict[0],
                                                                                      strict[1]], **kw)
                self.assertEqual(len(ev.calls), len(set(ev.calls)))  # repeats cost nothing
                self.assertEqual(set(ev.calls), {row.spec for row in both.rows if not row.from_db})
                self.assertEqual([f for f in [quality_min] + strict if any(row.floor == f for row in both.rows)],
                                 [quality_min] + strict)
                for row in both.rows:
                    figure = row.quality - row.ci_half_width if holdout else row.quality
                    self.assertEqual(row.feasible, figure >= row.floor, row.spec)
                self.assertIn(f"then again at {strict[0]}, {strict[1]}", json.loads(both.table_json)["comment"])
                alone_low = run(space, ev, quality_min=quality_min, db=db, **kw)
                self.assertGreaterEqual(self.best_cr_at(both.table_json, quality_min),
                                        self.best_cr_at(alone_low.table_json, quality_min))
                for f in strict:
                    alone = run(space, ev, quality_min=f, db=db, **kw)
                    if alone.table_json is None:
                        continue  # nothing holds at f
                    self.assertGreaterEqual(self.best_cr_at(both.table_json, f),
                                            self.best_cr_at(alone.table_json, f), f"floor {f}")
                    stricter_rows_added += (self.best_cr_at(both.table_json, f) >
                                            self.best_cr_at(alone_low.table_json, f))
        # The stricter searches added rows the quality_min search alone did not have.
        self.assertGreater(stricter_rows_added, 0)

    def test_walk_runs_at_every_floor(self):
        rng = random.Random(7219)
        kv = synth(58, shape=SHAPE)
        space = kivi_space()
        served_by_the_walk = 0
        for trial in range(4):
            quality_min = rng.uniform(0.9, 0.92)
            strict = sorted(rng.sample([0.94, 0.95, 0.96, 0.97, 0.98], 2))
            half = rng.uniform(0.0, 0.005)
            searcher = ["exhaustive", "bayes", "random", "bayes"][trial]
            budget = len(space) if searcher == "exhaustive" else rng.randint(10, 18)

            def search_eval(profile, half=half):
                return bits_quality(profile), half, 40

            kw = dict(quality_min=quality_min, more_floors=strict, budget=budget, searcher=searcher,
                      seed=rng.randint(1, 1000), evaluator="search")
            with tempfile.TemporaryDirectory() as d:
                kw["db"] = os.path.join(d, "r.sqlite")
                first = run(space, search_eval, kv, holdout=lambda p: 1.0, **kw)
                # Out of sample every Pareto row of the merged table fails: each floor is served
                # only by feasible rows the walk goes on to.
                failing = {h["spec"] for h in first.holdout_rows if h["pareto"]}

                def held(profile, failing=failing):
                    return bits_quality(profile) - (0.2 if str(profile) in failing else 0.0), 0.0, 30

                r = run(space, search_eval, kv, holdout=held, **kw)
            with self.subTest(trial=trial, quality_min=quality_min, strict=strict, searcher=searcher):
                searched = {row.spec: (row.quality - row.ci_half_width, row.compression_ratio) for row in r.rows}
                for f in [quality_min] + strict:
                    holds = [c for spec, (q, c) in searched.items()
                             if q >= f and c > 1 and held(kvserve.Profile.parse(spec))[0] >= f]
                    got = self.best_cr_at(r.table_json, f)
                    if f == quality_min:
                        self.assertAlmostEqual(got, max(holds, default=0.0), places=12)
                    else:  # a row scored for a looser floor may serve f with more CR
                        self.assertGreaterEqual(got, max(holds, default=0.0), f"floor {f}")
                        served_by_the_walk += bool(holds)
        self.assertGreater(served_by_the_walk, 0)

    def test_without_db_the_searches_share_a_temporary_database(self):
        kv = synth(56, shape=SHAPE)
        ev = Counter()
        with tempfile.TemporaryDirectory() as d:
            saved, tempfile.tempdir = tempfile.tempdir, d  # where the call's temporary database goes
            try:
                r = run(kivi_space(), ev, kv, quality_min=0.9, budget=6, seed=7, more_floors=(0.95, 0.97, 0.99))
            finally:
                tempfile.tempdir = saved
            self.assertEqual(os.listdir(d), [])  # deleted afterwards
        self.assertEqual(len(ev.calls), len(set(ev.calls)))  # a repeat was answered by the database
        self.assertLess(len(ev.calls), len(r.rows))
        self.assertEqual(r.evaluated, len(ev.calls))
        self.assertEqual(r.reused, len(r.rows) - len(ev.calls))
        # Evaluation's floor has a default: code that builds rows itself keeps working.
        self.assertIsNone(kvserve.profiling.Evaluation("none", 1.0, 0.0, 1, True, 1.0, 1.0, 1.0, False, None).floor)

    def test_bad_more_floors_raise(self):
        kv = synth(57, shape=SHAPE)
        space = kivi_space(bits=(4, 8))
        for bad in ([float("nan")], [0.99, float("inf")], (float("-inf"),), np.array([0.99, np.nan])):
            with self.subTest(bad=bad), self.assertRaisesRegex(ValueError, "more_floors"):
                run(space, bits_quality, kv, budget=2, more_floors=bad)
        for bad in (["0.99"], [None], [True], 0.99, "0.99", [0.99, [0.995]]):
            with self.subTest(bad=bad), self.assertRaisesRegex(TypeError, "more_floors"):
                run(space, bits_quality, kv, budget=2, more_floors=bad)
        # Floors at or below quality_min are ignored: one search only.
        r = run(space, bits_quality, kv, budget=2, quality_min=0.95, more_floors=[0.9, 0.95])
        self.assertEqual({row.floor for row in r.rows}, {0.95})


class StatisticsTest(unittest.TestCase):
    def test_relative_quality_matches_a_direct_computation(self):
        rng = random.Random(7)
        got = [float(rng.random() < 0.7) for _ in range(60)]
        base = [float(rng.random() < 0.9) for _ in range(60)]
        rel, lo, hi = kvserve._kvserve.relative_quality(got, base, "exact_match", 500, 3)
        self.assertAlmostEqual(rel, sum(got) / sum(base))
        self.assertLessEqual(lo, rel)
        self.assertLessEqual(rel, hi)
        self.assertEqual(kvserve._kvserve.relative_quality(base, base, "exact_match", 200, 1), (1.0, 1.0, 1.0))
        subset = kvserve._kvserve.choose_subset(200, 100, 0)
        self.assertEqual(len(subset), 100)
        self.assertEqual(subset, sorted(set(subset)))
        self.assertEqual(kvserve._kvserve.choose_subset(10, 0, 0), list(range(10)))


class ToyCausalLM(torch.nn.Module if torch is not None else object):
    """A seeded two-layer attention LM with the transformers calling
    convention the task evaluator uses (input_ids, past_key_values as a
    legacy tuple of (1, heads, tokens, head_dim) pairs, attention_mask) --
    a real model of our own, so the evaluator's path (prefill, wire cast,
    encode, decode, restore, teacher-forced scoring, bootstrap) runs on CPU
    without transformers."""

    def __init__(self, vocab=64, heads=2, head_dim=32, layers=2, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        width = heads * head_dim
        self.heads, self.head_dim = heads, head_dim
        self.emb = torch.nn.Parameter(torch.randn(vocab, width, generator=g))
        self.w = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(3, width, width, generator=g) / width ** 0.5) for _ in range(layers)])
        self.config = type("Config", (), {"bos_token_id": 1, "name_or_path": "toy"})()

    def forward(self, input_ids, past_key_values=None, attention_mask=None, use_cache=True):
        x = self.emb[input_ids[0]]
        n, h, d = x.shape[0], self.heads, self.head_dim
        cache = []
        for l, w in enumerate(self.w):
            q, k, v = ((x @ w[i]).view(n, h, d).transpose(0, 1) for i in range(3))
            if past_key_values is not None:
                pk, pv = past_key_values[l]
                k, v = torch.cat([pk[0].to(k.dtype), k], 1), torch.cat([pv[0].to(v.dtype), v], 1)
            total = k.shape[1]
            pos = torch.arange(total - n, total)[:, None]
            bias = torch.where(torch.arange(total)[None, :] <= pos, 0.0, float("-inf"))
            if attention_mask is not None:
                bias = bias + torch.where(attention_mask[0].bool(), 0.0, float("-inf"))[None, :]
            att = torch.softmax(q @ k.transpose(1, 2) / d ** 0.5 + bias, dim=-1)
            x = (att @ v).transpose(0, 1).reshape(n, h * d) * 4  # no residual: answers depend on the KV
            cache.append((k[None], v[None]))
        logits = x @ self.emb.T
        return type("Out", (), {"logits": logits[None], "past_key_values": tuple(cache)})()


@unittest.skipIf(torch is None, "torch not installed")
class TaskEvaluatorToyModelTest(unittest.TestCase):
    def setUp(self):
        self.model = ToyCausalLM(seed=5).eval()
        rng = random.Random(13)
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "toy.jsonl")
        with open(self.path, "w") as f, torch.no_grad():
            for i in range(30):
                prompt = [rng.randrange(2, 64) for _ in range(rng.randint(200, 400))]
                ids, answer = [1] + prompt, []
                for _ in range(4):  # the model's own greedy answer: EM(none) is high
                    tok = int(self.model(torch.tensor([ids + answer])).logits[0, -1].argmax())
                    answer.append(tok)
                f.write(json.dumps({"id": f"toy-{i}", "metric": "exact_match", "prompt_ids": prompt,
                                    "answer_ids": answer}) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def test_scores_the_c_plus_plus_way_and_drives_a_profile_run(self):
        from kvserve.task_eval import TaskEvaluator

        ev = TaskEvaluator(self.model, self.path, samples=20, seed=3)
        chosen = kvserve._kvserve.choose_subset(30, 20, 3)
        self.assertEqual([s["id"] for s in ev.samples], [f"toy-{i}" for i in chosen])
        held = TaskEvaluator(self.model, self.path, samples=10, seed=3, holdout_of=20)
        self.assertEqual(len(held.samples), 10)  # exactly the 10 the search did not score
        self.assertFalse({s["id"] for s in held.samples} & {s["id"] for s in ev.samples})
        self.assertIn("holdout", held.name)
        self.assertNotEqual(held.sample_set, ev.sample_set)
        with self.assertRaises(ValueError):
            TaskEvaluator(self.model, self.path, samples=10, seed=3, holdout_of=30)
        self.assertEqual(ev(kvserve.Profile()), (1.0, 0.0, 20))
        self.assertGreater(ev.last["baseline_metric_value"], 0.5)
        lossy = kvserve.Profile.parse("kivi-2")
        lossy.set("k", 1)
        lossy.set("v", 1)
        lossy.set("residual", 0)
        q, half, n = ev(lossy)
        rows = ev.last["per_sample"]
        self.assertAlmostEqual(q, sum(r["score"] for r in rows) / sum(r["baseline"] for r in rows))
        self.assertLess(q, 1.0)  # 1-bit KV changes this model's answers
        lo, hi = ev.last["ci95"]
        self.assertTrue(lo <= q <= hi and half == (hi - lo) / 2)
        self.assertGreater(ev.last["compression_ratio"], 4)
        # duo prunes per head: not expressible as a transformers attention mask.
        scored = TaskEvaluator(self.model, self.path, samples=4, seed=3,
                               head_scores=kvserve.synthesize_head_scores(2, 2, seed=1))
        with self.assertRaisesRegex(NotImplementedError, "per head"):
            scored("duo")
        kv = ev.codec_kv(128)
        self.assertEqual(tuple(kv.shape), (2, 2, 2, 128, 32))
        self.assertEqual(kv.dtype, torch.float16)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "toy_table.json")
            r = kvserve.profile(["kivi-4", str(lossy), "none"], ev, kv=kv, quality_min=0.0, budget=3,
                                searcher="exhaustive", model=ev.model_name, workload="toy",
                                sample_set=ev.sample_set, out=out, progress=False)
            self.assertEqual({x.spec: x.quality for x in r.rows}[str(lossy)], q)
            self.assertEqual(kvserve.ProfileTable.load(out).workloads, ["toy"])
            with open(out) as f:
                self.assertIn("task:", json.load(f)["quality_kind"])


@unittest.skipUnless(kvserve.cuda_available() and torch is not None and torch.cuda.is_available(),
                     "needs the CUDA codec and a GPU")
class CudaKvTest(unittest.TestCase):
    def test_cuda_kv_is_measured_on_the_gpu_with_the_cpu_crs(self):
        kv = synth(42, dtype="f16", shape=SHAPE)
        space = kivi_space(bits=(2, 4)) + [kivi_space(bits=(2,))[1].replace("+pack", "+zstd")]
        cpu = run(space, bits_quality, kv, budget=6, searcher="exhaustive", quality_min=0)
        gpu = run(space, bits_quality, torch.from_numpy(kv).cuda(), budget=6, searcher="exhaustive", quality_min=0)
        self.assertEqual(gpu.codec_device, "cuda:0")
        self.assertEqual(gpu.codec_cpu_profiles, [space[-1]])  # zstd: not a CUDA codec
        self.assertEqual([x.compression_ratio for x in cpu.rows], [x.compression_ratio for x in gpu.rows])


def _model_dir():
    if os.environ.get("KVSERVE_HF_MODEL"):
        return os.environ["KVSERVE_HF_MODEL"]
    found = sorted(p for p in (os.path.join(REPO, "models", n) for n in os.listdir(os.path.join(REPO, "models")))
                   if os.path.exists(os.path.join(p, "config.json")))
    return found[0] if found else None


def _has_transformers():
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


QA = os.environ.get("KVSERVE_HF_WORKLOAD", os.path.join(REPO, "data", "eval", "qa.jsonl"))


@unittest.skipUnless(torch is not None and _has_transformers(), "transformers not installed")
@unittest.skipIf(_model_dir() is None, "no HF model (KVSERVE_HF_MODEL or models/*/config.json)")
@unittest.skipUnless(os.path.exists(QA), "no qa eval set (scripts/data/build_all.sh)")
class TaskEvaluatorTest(unittest.TestCase):
    def test_task_evaluator_drives_a_profile_run(self):
        from kvserve.task_eval import TaskEvaluator

        ev = TaskEvaluator(_model_dir(), QA, samples=8, seed=0)
        self.assertEqual(ev(kvserve.Profile()), (1.0, 0.0, 8))
        self.assertEqual(ev.samples_scored, 8)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "qa.json")
            r = kvserve.profile(["kivi-4", "kivi-2", "none"], ev, kv=ev.codec_kv(256), quality_min=0.5,
                                budget=3, searcher="exhaustive", model=ev.model_name, workload="qa",
                                sample_set=ev.sample_set, out=out, progress=False)
            self.assertEqual(len(r.rows), 3)
            self.assertEqual(kvserve.ProfileTable.load(out).workloads, ["qa"])
            with open(out) as f:
                self.assertIn("task:", json.load(f)["quality_kind"])


if __name__ == "__main__":
    unittest.main()
