"""Bad input raises Python exceptions carrying the library's message; never a crash."""
from __future__ import annotations

import unittest

import numpy as np

import kvserve
from kv_test_util import SHAPE, synth

try:
    import torch
except ImportError:
    torch = None


class FrameCorruptionTest(unittest.TestCase):
    def setUp(self):
        self.kv = synth(81, "f16")
        self.frame = bytes(kvserve.encode(self.kv, "kivi-2"))

    def test_flipped_bytes_are_corruption(self):
        rng = np.random.default_rng(81)
        out = np.empty_like(self.kv)
        for _ in range(40):
            data = bytearray(self.frame)
            pos = int(rng.integers(0, len(data)))
            data[pos] ^= 1 << int(rng.integers(0, 8))
            with self.assertRaises(kvserve.KvserveError) as ctx:
                kvserve.decode(bytes(data), out=out)
                kvserve.inspect(bytes(data))
            e = ctx.exception
            self.assertIsInstance(e, ValueError)
            self.assertIn(e.code, ("corruption", "invalid_argument"), str(e))
            self.assertTrue(str(e))

    def test_payload_flip_is_a_checksum_corruption(self):
        info = kvserve.inspect(self.frame)
        last = info.chunks[-1]
        data = bytearray(self.frame)
        data[last.offset + last.size - 1] ^= 0x55
        with self.assertRaises(kvserve.KvserveCorruptionError) as ctx:
            kvserve.decode(bytes(data), out=np.empty_like(self.kv))
        self.assertEqual(ctx.exception.code, "corruption")

    def test_truncations_are_corruption(self):
        rng = np.random.default_rng(82)
        for cut in sorted(set(int(x) for x in rng.integers(0, len(self.frame), 30))) + [0, 1]:
            with self.assertRaises(kvserve.KvserveCorruptionError, msg=f"cut at {cut}"):
                kvserve.decode(self.frame[:cut], out=np.empty_like(self.kv))

    def test_random_garbage_never_crashes(self):
        rng = np.random.default_rng(83)
        for _ in range(50):
            junk = rng.integers(0, 256, int(rng.integers(0, 4096)), dtype=np.uint8).tobytes()
            with self.assertRaises(kvserve.KvserveError):
                kvserve.decode(junk)


class ArgumentErrorTest(unittest.TestCase):
    def test_bad_profile_names_the_token(self):
        with self.assertRaises(kvserve.KvserveInvalidArgumentError) as ctx:
            kvserve.Profile("hadamard+kivi(k=2,bogus=1)+rans")
        self.assertIn("bogus", str(ctx.exception))
        self.assertIsInstance(ctx.exception, ValueError)
        with self.assertRaises(ValueError):
            kvserve.encode(synth(1), "no-such-preset")

    def test_wrong_shapes_and_types(self):
        kv = synth(84, "f16")
        cases = {
            "4-D": kv[0],
            "axis 1 not 2": np.concatenate([kv, kv], axis=1),
            "float64": kv.astype(np.float64),
            "int32": kv.astype(np.int32),
            "not a tensor": "hello",
            "pair of non-tensors": [(1, 2)],
            "empty list": [],
            "mismatched layer": [(kv[0, 0], kv[0, 1]), (kv[1, 0], kv[1, 1, :, :10])],
            "uint16 without dtype": synth(1, "bf16"),
        }
        for name, bad in cases.items():
            with self.subTest(name), self.assertRaises(ValueError) as ctx:
                kvserve.encode(bad, "none")
            self.assertTrue(str(ctx.exception))

    def test_negative_strides_rejected(self):
        kv = synth(85, "f16")
        with self.assertRaises(ValueError) as ctx:
            kvserve.encode(kv[:, :, :, ::-1], "none")
        self.assertIn("stride", str(ctx.exception))

    def test_out_mismatch_and_readonly(self):
        kv = synth(86, "f16")
        frame = kvserve.encode(kv, "none")
        with self.assertRaises(kvserve.KvserveInvalidArgumentError):
            kvserve.decode(frame, out=np.empty((SHAPE[0], 2, SHAPE[1], SHAPE[2] - 1, SHAPE[3]), np.float16))
        with self.assertRaises(kvserve.KvserveInvalidArgumentError):
            kvserve.decode(frame, out=np.empty_like(kv, dtype=np.float32))
        readonly = np.empty_like(kv)
        readonly.flags.writeable = False
        with self.assertRaises(ValueError) as ctx:
            kvserve.decode(frame, out=readonly)
        self.assertIn("writable", str(ctx.exception))

    def test_profile_parameter_errors(self):
        p = kvserve.Profile("kivi-2")
        with self.assertRaises(kvserve.KvserveOutOfRangeError):
            p.set("k", 9)
        with self.assertRaises(kvserve.KvserveNotFoundError):
            p.get("nonsense")
        with self.assertRaises(kvserve.KvserveInvalidArgumentError):
            p.set("level", 3)  # a zstd parameter on a pack/rans profile

    def test_missing_head_scores(self):
        with self.assertRaises(kvserve.KvserveError) as ctx:
            kvserve.encode(synth(87), "mixhq")
        self.assertIn("head", str(ctx.exception).lower())

    @unittest.skipIf(torch is None, "torch not installed")
    def test_dlpack_capsule_consumed_once(self):
        t = torch.from_numpy(synth(88, "f32"))
        capsule = t.__dlpack__()
        frame = kvserve.encode(capsule, "none")
        self.assertEqual(bytes(frame), bytes(kvserve.encode(t, "none")))
        with self.assertRaises(ValueError) as ctx:
            kvserve.encode(capsule, "none")
        self.assertIn("consumed", str(ctx.exception))

    @unittest.skipIf(torch is None, "torch not installed")
    def test_tensor_requiring_grad(self):
        t = torch.from_numpy(synth(89, "f32")).requires_grad_()
        with self.assertRaises(Exception):
            kvserve.encode(t, "none")
        kvserve.encode(t.detach(), "none")

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "needs a CUDA tensor")
    def test_cuda_tensor_is_not_for_the_cpu_entry_points(self):
        with self.assertRaises(kvserve.KvserveNotSupportedError):
            kvserve.Encoder("none").encode(torch.zeros((1, 2, 1, 16, 64), device="cuda"))
        if not kvserve.cuda_available():  # a CPU-only build says so
            with self.assertRaises(kvserve.KvserveNotSupportedError):
                kvserve.encode(torch.zeros((1, 2, 1, 16, 64), device="cuda"), "none")


if __name__ == "__main__":
    unittest.main()
