"""Round trips, zero-copy and streaming through the Python bindings."""
from __future__ import annotations

import gc
import threading
import time
import tracemalloc
import unittest

import numpy as np

import kvserve
from kv_test_util import SHAPE, head_scores_for, relative_rmse, synth, to_float

try:
    import torch
except ImportError:  # the tests that need torch skip
    torch = None

# Loose upper bound on relative RMS error for the lossy presets on synthetic
# caches (the 2-bit ones land near 0.2-0.4); a broken pipeline gives >= 1.
LOSSY_RMSE_BOUND = 0.6


class PresetRoundTripTest(unittest.TestCase):
    """Every preset, numpy f16 and torch bf16: lossless ones are bit-exact,
    lossy ones bounded; encoding is deterministic and every input layout
    gives the same frame."""

    def check_preset(self, preset: kvserve.Preset, kv, seed: int) -> None:
        profile = preset.profile
        scores = head_scores_for(profile, SHAPE)
        frame = kvserve.encode(kv, profile, head_scores=scores)
        self.assertEqual(len(frame), frame.stats.total_bytes)
        again = kvserve.encode(kv, preset.name, head_scores=scores)
        self.assertEqual(bytes(frame), bytes(again), "encoding is not deterministic")
        info = kvserve.inspect(frame)
        self.assertEqual(info.shape, SHAPE)
        self.assertEqual(info.profile, profile)
        decoded, mask = kvserve.decode(frame, keep_mask=True)
        self.assertEqual(tuple(decoded.shape), (SHAPE[0], 2) + SHAPE[1:])
        if profile.is_lossless:
            self.assertTrue(np.array_equal(to_float(decoded), to_float(kv)),
                            f"{preset.name}: lossless round trip differs (seed {seed})")
        else:
            err = relative_rmse(decoded, kv, mask)
            self.assertLess(err, LOSSY_RMSE_BOUND, f"{preset.name} seed {seed}")
        if profile.quantizer != "duo":
            self.assertTrue(mask.all(), f"{preset.name} pruned tokens")
        # Per-layer (K, V) pairs give the same bytes as the 5-D tensor.
        pairs = [(kv[l, 0], kv[l, 1]) for l in range(SHAPE[0])]
        self.assertEqual(bytes(kvserve.encode(pairs, profile, head_scores=scores, dtype=_dtype(kv))),
                         bytes(frame))

    def test_every_preset_numpy_f16(self):
        for i, preset in enumerate(kvserve.presets()):
            with self.subTest(preset=preset.name):
                self.check_preset(preset, synth(100 + i, "f16"), 100 + i)

    @unittest.skipIf(torch is None, "torch not installed")
    def test_every_preset_torch_bf16(self):
        for i, preset in enumerate(kvserve.presets()):
            with self.subTest(preset=preset.name):
                self.check_preset(preset, kvserve.as_torch(synth(200 + i, "bf16")), 200 + i)

    def test_f32_and_uint16_bits(self):
        kv = synth(7, "f32")
        self.assertTrue(np.array_equal(kvserve.decode(kvserve.encode(kv, "none")), kv))
        bits = synth(8, "bf16")  # numpy uint16 holding bf16
        frame = kvserve.encode(bits, "none", dtype="bf16")
        self.assertEqual(kvserve.inspect(frame).dtype, "bf16")
        self.assertTrue(np.array_equal(kvserve.decode(frame, framework="numpy"), bits))


def _dtype(kv):
    return "bf16" if getattr(kv, "dtype", None) == np.uint16 else None


class ZeroCopyTest(unittest.TestCase):
    def test_strided_views_are_read_in_place(self):
        rng = np.random.default_rng(1)
        for trial in range(3):
            base = synth(300 + trial, "f16")
            # A head-major engine layout (layers, 2, tokens, heads, dim) viewed as ours.
            engine = np.ascontiguousarray(base.transpose(0, 1, 3, 2, 4))
            view = engine.transpose(0, 1, 3, 2, 4)
            self.assertFalse(view.flags.c_contiguous)
            layout = kvserve.describe_layout(view)
            self.assertTrue(layout["single_view"])
            self.assertEqual(layout["strides"], tuple(s // 2 for s in view.strides))
            profile = ["none", "kivi-2", "cachegen"][trial]
            self.assertEqual(bytes(kvserve.encode(view, profile)), bytes(kvserve.encode(base, profile)))
            # Every other element along head_dim of a wider buffer.
            wide = np.zeros(SHAPE[:0] + (SHAPE[0], 2, SHAPE[1], SHAPE[2], SHAPE[3] * 2), np.float16)
            wide[..., ::2] = base
            wide[..., 1::2] = rng.standard_normal(base.shape).astype(np.float16)
            self.assertEqual(bytes(kvserve.encode(wide[..., ::2], profile)),
                             bytes(kvserve.encode(base, profile)))

    def test_per_layer_slices_of_one_allocation_are_one_view(self):
        kv = synth(5, "f16")
        pairs = [(kv[l, 0], kv[l, 1]) for l in range(SHAPE[0])]
        layout = kvserve.describe_layout(pairs)
        self.assertTrue(layout["single_view"])
        self.assertEqual(layout["strides"], tuple(s // 2 for s in kv.strides))

    def test_no_copy_of_the_input(self):
        # 48 MiB of f16; a copy would show as >= 48 MiB of extra peak memory.
        shape = (8, 4, 3072, 128)
        kv = kvserve.synthesize_kv(shape, dtype="f16", seed=9)
        view = kv[:, :, :, :, :]  # a view, same memory
        encoder = kvserve.Encoder("kivi-2", threads=2)
        encoder.encode(view)  # warm the context's scratch
        gc.collect()
        tracemalloc.start()
        peak_before = _reset_peak_rss()
        frame = encoder.encode(view)
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        peak_after = _peak_rss()
        self.assertLess(traced_peak, 1 << 20, "Python-side allocation during encode")
        if peak_before is not None:
            growth = peak_after - peak_before
            self.assertLess(growth, kv.nbytes // 2,
                            f"peak RSS grew {growth >> 20} MiB encoding {kv.nbytes >> 20} MiB "
                            f"into a {len(frame) >> 20} MiB frame")

    @unittest.skipIf(torch is None, "torch not installed")
    def test_decode_writes_into_the_callers_tensor(self):
        for seed, dtype in [(21, torch.bfloat16), (22, torch.float16), (23, torch.float32)]:
            src = torch.randn((SHAPE[0], 2) + SHAPE[1:], generator=torch.Generator().manual_seed(seed)).to(dtype)
            frame = kvserve.encode(src, "none")
            out = torch.full_like(src, float("nan"))
            pointer = out.data_ptr()
            result = kvserve.decode(frame, out=out)
            self.assertIs(result, out)
            self.assertEqual(out.data_ptr(), pointer)
            self.assertTrue(torch.equal(out, src))

    def test_decode_into_strided_numpy_leaves_gaps_alone(self):
        kv = synth(31, "f16")
        frame = kvserve.encode(kv, "none")
        wide = np.full((SHAPE[0], 2, SHAPE[1], SHAPE[2], SHAPE[3] * 2), 7.0, np.float16)
        out = wide[..., 1::2]
        kvserve.decode(frame, out=out)
        self.assertTrue(np.array_equal(out, kv))
        self.assertTrue((wide[..., 0::2] == 7.0).all())

    @unittest.skipIf(torch is None, "torch not installed")
    def test_per_layer_separate_tensors_round_trip(self):
        # HF layout: one K and one V tensor per layer, (1, heads, tokens, dim),
        # separately allocated; some layers get V below K in memory (staged).
        gen = torch.Generator().manual_seed(41)
        layers = []
        for l in range(SHAPE[0]):
            a = torch.randn((1,) + SHAPE[1:], generator=gen, dtype=torch.float32).to(torch.bfloat16)
            b = torch.randn((1,) + SHAPE[1:], generator=gen, dtype=torch.float32).to(torch.bfloat16)
            k, v = (a, b) if (l % 2 == 0) == (a.data_ptr() < b.data_ptr()) else (b, a)
            layers.append((k, v))
        layout = kvserve.describe_layout(layers)
        self.assertFalse(layout["single_view"])
        self.assertEqual(layout["staged_layers"], [1])
        whole = torch.stack([torch.stack([k[0], v[0]]) for k, v in layers])
        for profile in ["none", "kivi-4"]:
            frame = kvserve.encode(layers, profile)
            self.assertEqual(bytes(frame), bytes(kvserve.encode(whole, profile)))
            outs = [(torch.empty_like(k), torch.empty_like(v)) for k, v in layers]
            kvserve.decode(frame, out=outs)
            expected = kvserve.decode(frame)
            for l, (k, v) in enumerate(outs):
                self.assertTrue(torch.equal(k[0], expected[l, 0]), f"{profile} layer {l} K")
                self.assertTrue(torch.equal(v[0], expected[l, 1]), f"{profile} layer {l} V")

    def test_encode_into_callers_buffer(self):
        kv = synth(51, "f16")
        expected = bytes(kvserve.encode(kv, "kivi-4"))
        buffer = bytearray(len(expected) + 100)
        view = kvserve.encode(kv, "kivi-4", out=buffer)
        self.assertIsInstance(view, memoryview)
        self.assertEqual(bytes(view), expected)
        self.assertEqual(bytes(buffer[:len(expected)]), expected)
        with self.assertRaises(kvserve.KvserveResourceExhaustedError):
            kvserve.encode(kv, "kivi-4", out=bytearray(len(expected) - 1))

    def test_frame_is_bytes_like_without_copy(self):
        frame = kvserve.encode(synth(52, "f16"), "kivi-2")
        m1, m2 = memoryview(frame), memoryview(frame)
        self.assertTrue(m1.readonly)
        self.assertEqual(np.frombuffer(m1, np.uint8).ctypes.data, np.frombuffer(m2, np.uint8).ctypes.data)
        self.assertEqual(frame, bytes(frame))
        self.assertEqual(kvserve.decode(bytes(frame)).tobytes(), kvserve.decode(m1).tobytes())


def _peak_rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def _reset_peak_rss():
    """Resets VmHWM to the current RSS (Linux clear_refs 5); None if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return _peak_rss()


class StreamingTest(unittest.TestCase):
    def test_layer_at_a_time_equals_whole(self):
        for seed, profile in [(61, "kivi-2"), (62, "cachegen"), (63, "none")]:
            kv = synth(seed, "f16")
            whole = bytes(kvserve.encode(kv, profile))
            encoder = kvserve.Encoder(profile)
            pieces = [encoder.begin(SHAPE, "f16")]
            for l in range(SHAPE[0]):
                pieces.append(encoder.encode_layer(l, (kv[l, 0], kv[l, 1])))
            pieces.append(encoder.finish())
            self.assertEqual(b"".join(pieces), whole, profile)
            # The full 5-D tensor works too (only layer l is read).
            encoder.begin(SHAPE, "f16")
            parts = [encoder.encode_layer(l, kv) for l in range(SHAPE[0])]
            encoder.finish()
            self.assertEqual(b"".join(parts), whole[len(pieces[0]):len(whole) - len(pieces[-1])])

    def test_records_decode_in_any_order(self):
        kv = synth(64, "f16")
        frame = kvserve.encode(kv, "kivi-4")
        info = kvserve.inspect(frame)
        expected = kvserve.decode(frame)
        decoder = kvserve.Decoder()
        data = bytes(frame)
        header = decoder.start(data)
        self.assertEqual(header, info.chunks[0].offset)
        out = np.zeros_like(kv)
        order = np.random.default_rng(64).permutation(len(info.chunks))
        for i in order:
            c = info.chunks[i]
            used = decoder.decode_record(data[c.offset:c.offset + c.size], out)
            self.assertEqual(used, c.size)
        self.assertTrue(np.array_equal(out, expected))


class GilTest(unittest.TestCase):
    def test_encode_releases_the_gil(self):
        kv = kvserve.synthesize_kv((8, 4, 2048, 128), dtype="f16", seed=71)
        encoder = kvserve.Encoder("cachegen", threads=1)
        times = {}

        def work():
            times["start"] = time.perf_counter()
            encoder.encode(kv)
            times["end"] = time.perf_counter()

        ticks = []
        thread = threading.Thread(target=work)
        thread.start()
        while thread.is_alive():
            ticks.append(time.perf_counter())
            time.sleep(0.001)
        thread.join()
        duration = times["end"] - times["start"]
        inside = [t for t in ticks if times["start"] + 0.02 < t < times["end"] - 0.02]
        if duration > 0.1:
            # With the GIL held the main thread could not tick at all.
            self.assertGreater(len(inside), 3, f"encode took {duration:.2f}s, main thread ran {len(inside)}x")


if __name__ == "__main__":
    unittest.main()
