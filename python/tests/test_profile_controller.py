"""Profiles, presets, the controller and the bandwidth estimator from Python."""
from __future__ import annotations

import json
import os
import pickle
import tempfile
import threading
import unittest

import numpy as np

import kvserve


class ProfileTest(unittest.TestCase):
    def test_presets_parse_and_print_round_trip(self):
        names = [p.name for p in kvserve.presets()]
        for required in ["none", "kivi-2", "kivi-4", "cachegen", "duo", "mixhq"]:
            self.assertIn(required, names)
        for preset in kvserve.presets():
            p = kvserve.Profile.parse(preset.name)
            self.assertEqual(kvserve.Profile.parse(str(p)), p)
            self.assertEqual(kvserve.Profile.from_json(p.to_json()), p)
            self.assertEqual(pickle.loads(pickle.dumps(p)), p)
            self.assertEqual(json.loads(p.to_json())["spec"], str(p))
        self.assertTrue(kvserve.Profile().is_lossless)
        self.assertEqual(str(kvserve.Profile()), str(kvserve.Profile("none")))

    def test_set_get_params_within_bounds(self):
        rng = np.random.default_rng(5)
        info = {i.key: i for i in kvserve.param_info()}
        for _ in range(20):
            p = kvserve.Profile("hadamard+uniform+rans")
            k = int(rng.integers(info["k"].min_value, info["k"].max_value + 1))
            p.set("k", k)
            p.set("axis_v", "channel")
            self.assertEqual(p.get("k"), k)
            self.assertEqual(p.get("axis_v"), "channel")
            self.assertEqual(p.params()["k"], k)
            self.assertEqual(kvserve.Profile(str(p)), p)
        self.assertEqual(p.transform, "hadamard")
        self.assertEqual(p.quantizer, "uniform")
        self.assertEqual(p.codec, "rans")


def _table() -> kvserve.ProfileTable:
    # Three profiles with increasing CR and decreasing quality / speed.
    rows = [
        kvserve.ProfileCost("kivi-4", 3.5, 8e9, 1.2e10, 1e-4, {"chat": 0.99, "math": 0.97}),
        kvserve.ProfileCost("kivi-2", 6.0, 6e9, 1e10, 1e-4, {"chat": 0.95, "math": 0.80}),
        kvserve.ProfileCost("cachegen", 9.0, 1.5e9, 2e9, 2e-4, {"chat": 0.90}),
    ]
    return kvserve.ProfileTable.from_rows(rows)


class ControllerTest(unittest.TestCase):
    def test_table_json_round_trip_and_load(self):
        table = _table()
        self.assertEqual(len(table), 4)
        self.assertEqual(table.profiles[0].spec, "none")
        self.assertEqual(table.workloads, ["chat", "math"])
        again = kvserve.ProfileTable.from_json(table.to_json())
        self.assertEqual([p.spec for p in again.profiles], [p.spec for p in table.profiles])
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "table.json")
            with open(path, "w") as f:
                f.write(table.to_json())
            loaded = kvserve.ProfileTable.load(path)
        self.assertEqual(loaded.quality(table.index_of("kivi-2"), "math"), 0.80)
        with self.assertRaises(kvserve.KvserveCorruptionError):
            kvserve.ProfileTable.from_json("{not json")

    def test_choose_respects_floor_and_bandwidth(self):
        table = _table()
        controller = kvserve.Controller(table, bandit=False)
        v = 512e6
        rng = np.random.default_rng(6)
        for _ in range(50):
            gbps = float(10 ** rng.uniform(-1, 3))  # 0.1 .. 1000 Gbps
            q_min = float(rng.choice([0.0, 0.85, 0.96]))
            workload = str(rng.choice(["chat", "math"]))
            d = controller.choose(workload, kv_bytes=v, bandwidth=kvserve.gbps_to_bytes_per_second(gbps),
                                  quality_min=q_min)
            self.assertEqual(d.action, "send")
            idx = d.profile_index
            self.assertGreaterEqual(table.quality(idx, workload), q_min)
            # The choice is the fastest eligible profile under the model.
            best = min(
                (kvserve.predict_seconds(p, v, kvserve.gbps_to_bytes_per_second(gbps)), i)
                for i, p in enumerate(table.profiles)
                if table.quality(i, workload) >= q_min)
            self.assertAlmostEqual(d.predicted_seconds, best[0], delta=1e-9 + 1e-9 * best[0])
        slow = controller.choose("chat", kv_bytes=v, bandwidth=kvserve.gbps_to_bytes_per_second(0.5))
        fast = controller.choose("chat", kv_bytes=v, bandwidth=kvserve.gbps_to_bytes_per_second(2000))
        self.assertNotEqual(slow.spec, "none")
        self.assertEqual(fast.spec, "none")
        self.assertEqual(slow.profile, kvserve.Profile(slow.spec))

    def test_a_prefill_in_front_hides_what_streams(self):
        # Per layer the prefill (the source) is slower than a streamed pack
        # profile's stages: only one layer's worth is left after it. A rANS
        # frame with a better ratio moves whole after the prefill.
        pack = kvserve.ProfileCost("kivi-2", 4.0, 50e9, 50e9, quality={"w": 0.9})
        whole = kvserve.ProfileCost("cachegen", 4.5, 50e9, 50e9, quality={"w": 0.9}, streamed=False)
        self.assertFalse(whole.streamed)
        table = kvserve.ProfileTable.from_rows([pack, whole], ["w"])
        self.assertFalse(kvserve.ProfileTable.from_json(table.to_json()).profiles[2].streamed)
        controller = kvserve.Controller(table, model="streamed", layers=32, bandit=False)
        v, b = 268e6, kvserve.gbps_to_bytes_per_second(20)
        alone = controller.choose("w", kv_bytes=v, bandwidth=b)
        hidden = controller.choose("w", kv_bytes=v, bandwidth=b, source_seconds=0.075)
        self.assertEqual(hidden.spec, "kivi-2")
        # Only one layer's stages are left: encode, send, decode of 1/32 of V.
        self.assertAlmostEqual(hidden.predicted_seconds, (v / 50e9 * 2 + v / (b * 4.0)) / 32, delta=1e-9)
        self.assertLess(hidden.predicted_seconds, alone.predicted_seconds)
        for p in (pack, whole):
            self.assertLessEqual(kvserve.predict_seconds(p, v, b, "streamed", 32, source_seconds=0.075),
                                 kvserve.predict_seconds(p, v, b, "streamed", 32))
        with self.assertRaises(kvserve.KvserveInvalidArgumentError):
            controller.choose("w", kv_bytes=v, bandwidth=b, source_seconds=-1.0)

    def test_frame_size_model_is_exact_for_pack_and_learns_rans(self):
        rng = np.random.default_rng(8)
        shape = (2, 2, 96, 32)
        kv = rng.standard_normal((shape[0], 2, shape[1], shape[2], shape[3])).astype(np.float32)
        pack, rans = "kivi-4", "identity+kivi(k=4,v=4)+rans"
        table = kvserve.ProfileTable.from_rows(
            [kvserve.ProfileCost(pack, 3.0, quality={"w": 1.0}), kvserve.ProfileCost(rans, 3.0, quality={"w": 1.0})],
            ["w"])
        model = kvserve.FrameSizeModel(table, shape, "f32", reference_tokens=96)
        sizes = model.sizes(96)
        self.assertEqual(sizes[0], 0.0)  # raw: the table's ratio
        self.assertEqual(sizes[1], len(kvserve.encode(kv, pack)))
        rans_frame = len(kvserve.encode(kv, rans))
        self.assertNotEqual(sizes[2], rans_frame)  # a guess from the table's ratio
        model.observe(2, 96, rans_frame)
        self.assertAlmostEqual(model.sizes(96)[2], rans_frame, delta=1.0)  # the first sample is taken as is
        self.assertEqual(model.gain(1), 1.0)
        for bad in (lambda: model.sizes(0), lambda: model.observe(3, 96, 1), lambda: model.gain(-1),
                    lambda: kvserve.FrameSizeModel(table, (2, 2, 96), "f32"),
                    lambda: kvserve.FrameSizeModel(table, shape, "f32", reference_tokens=0)):
            with self.assertRaises(kvserve.KvserveInvalidArgumentError):
                bad()

    def test_peer_bandwidth_and_observe(self):
        estimator = kvserve.BandwidthEstimator(prior_bytes_per_second=kvserve.gbps_to_bytes_per_second(100))
        controller = kvserve.Controller(_table(), estimator=estimator, seed=3)
        self.assertEqual(controller.choose("chat", kv_bytes=256e6, peer="decode-0").spec, "none")
        for i in range(20):  # the link to decode-0 is really ~1 Gbps
            estimator.observe("decode-0", 125e6, 1.0, now_seconds=float(i))
        self.assertAlmostEqual(estimator.estimate("decode-0") / kvserve.GBPS, 1.0, places=3)
        self.assertEqual(estimator.sample_count("decode-0"), 20)
        d = controller.choose("chat", kv_bytes=256e6, peer="decode-0", slo_seconds=5.0, now_seconds=20.0)
        self.assertNotEqual(d.spec, "none")
        controller.observe(d, d.predicted_seconds * 1.1, now_seconds=21.0)

    def test_unmeasured_peer_goes_raw_whatever_the_prior(self):
        # A prior of 1 Gbps would make compression pay for 256 MB; with no
        # sample of the peer the decision is raw (docs/controller.md).
        slow = kvserve.gbps_to_bytes_per_second(1)
        estimator = kvserve.BandwidthEstimator(prior_bytes_per_second=slow)
        controller = kvserve.Controller(_table(), estimator=estimator, seed=5)
        self.assertNotEqual(controller.choose("chat", kv_bytes=256e6, bandwidth=slow).spec, "none")
        self.assertEqual(controller.choose("chat", kv_bytes=256e6, peer="decode-1").spec, "none")
        for i in range(5):
            estimator.observe("decode-1", 125e6, 1.0, now_seconds=float(i))
        self.assertNotEqual(controller.choose("chat", kv_bytes=256e6, peer="decode-1").spec, "none")

    def test_concurrent_choose(self):
        controller = kvserve.Controller(_table(), seed=4)
        errors = []

        def worker(seed):
            rng = np.random.default_rng(seed)
            try:
                for _ in range(200):
                    d = controller.choose("chat", kv_bytes=1e8, bandwidth=float(10 ** rng.uniform(7, 11)))
                    controller.observe(d, max(d.predicted_seconds, 1e-6))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_errors(self):
        controller = kvserve.Controller(_table())
        with self.assertRaises(kvserve.KvserveNotFoundError):
            controller.choose("nope", kv_bytes=1e6, bandwidth=1e9)
        with self.assertRaises(ValueError):
            controller.choose("chat", kv_bytes=1e6, bandwidth=-1.0)
        with self.assertRaises(ValueError):
            controller.choose("chat", kv_bytes=1e6)  # neither bandwidth nor peer
        with self.assertRaises(ValueError):
            controller.choose("chat", kv_bytes=1e6, peer="x")  # no estimator
        with self.assertRaises(ValueError):
            kvserve.ProfileTable.from_rows([kvserve.ProfileCost("kivi-2", -1.0)])
        with self.assertRaises(ValueError):
            kvserve.BandwidthEstimator().observe("p", -5, 1.0)

    def test_policy_intervals_cover_bandwidth(self):
        table = _table()
        intervals = kvserve.piecewise_policy(table, "chat", 0.0)
        self.assertEqual(intervals[0][0], 0.0)
        self.assertEqual(intervals[-1][1], float("inf"))
        self.assertEqual(intervals[-1][2], "none")
        for a, b in zip(intervals, intervals[1:]):
            self.assertEqual(a[1], b[0])


if __name__ == "__main__":
    unittest.main()
