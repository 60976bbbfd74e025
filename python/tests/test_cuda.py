"""The CUDA codec from Python: CUDA tensors in, device frames out, the same
bytes as the CPU codec, no staging through host memory. Skips without a CUDA
build and a GPU (CI); runs on the GPU machine (scripts/device_python_test.sh).
"""
from __future__ import annotations

import random
import resource
import unittest

import kvserve
from kv_test_util import head_scores_for, synth

try:
    import torch
except ImportError:
    torch = None

HAVE_GPU = torch is not None and torch.cuda.is_available() and kvserve.cuda_available()
SHAPE = (3, 2, 300, 128)  # odd token count: partial chunks and residual windows
PROFILES = ["none", "kivi-2", "kivi-4", "duo", "kvserve-h2r", "hadamard+kivi(k=2,v=2,residual=128)+pack"]


def cuda_cache(seed: int, shape=SHAPE) -> "torch.Tensor":
    """A seeded bf16 cache (layers, 2, kv_heads, tokens, head_dim) on the GPU
    and the same values on the CPU."""
    host = kvserve.as_torch(synth(seed, "bf16", shape))
    return host.cuda(), host


def cpu_frame(host: "torch.Tensor", spec: str, scores) -> bytes:
    return bytes(kvserve.encode(host, spec, head_scores=scores))


@unittest.skipUnless(HAVE_GPU, "needs the CUDA codec and a GPU")
class CudaRoundTripTest(unittest.TestCase):
    def test_device_frames_equal_cpu_frames_and_decode_equal(self):
        kv, host = cuda_cache(1)
        for spec in PROFILES:
            with self.subTest(spec=spec):
                scores = head_scores_for(kvserve.Profile.parse(spec), SHAPE)
                frame = kvserve.encode(kv, spec, head_scores=scores)
                self.assertIsInstance(frame, kvserve.DeviceFrame)
                want = cpu_frame(host, spec, scores)
                self.assertEqual(len(frame), len(want))
                self.assertEqual(frame.tobytes(), want)
                # Decode on the GPU from the device frame and from host bytes.
                on_gpu = kvserve.decode(frame)
                self.assertTrue(on_gpu.is_cuda)
                on_cpu = kvserve.decode(want)
                self.assertTrue(torch.equal(on_gpu.cpu(), on_cpu))
                out = torch.empty_like(kv)
                kvserve.decode(want, out=out)
                self.assertTrue(torch.equal(out.cpu(), on_cpu))

    def test_dlpack_and_cuda_array_interface_views_of_a_frame(self):
        kv, host = cuda_cache(2)
        frame = kvserve.encode(kv, "kivi-2")
        as_tensor = torch.from_dlpack(frame)
        self.assertEqual(as_tensor.device.type, "cuda")
        self.assertEqual(bytes(as_tensor.cpu().numpy().tobytes()), cpu_frame(host, "kivi-2", None))
        cai = frame.__cuda_array_interface__
        self.assertEqual(cai["shape"], (len(frame),))
        self.assertEqual(cai["data"][0], frame.data_ptr)
        # A frame held in a torch CUDA tensor decodes too.
        self.assertTrue(torch.equal(kvserve.decode(as_tensor).cpu(), kvserve.decode(frame.tobytes())))

    def test_per_layer_pairs_including_v_below_k(self):
        kv, host = cuda_cache(3)
        layers = []
        for l in range(SHAPE[0]):
            # Allocate V first for odd layers: its address is below K's.
            if l % 2:
                v = kv[l, 1].clone().unsqueeze(0)
                k = kv[l, 0].clone().unsqueeze(0)
            else:
                k = kv[l, 0].clone().unsqueeze(0)
                v = kv[l, 1].clone().unsqueeze(0)
            layers.append((k, v))
        self.assertTrue(any(v.data_ptr() < k.data_ptr() for k, v in layers))
        for spec in ("kivi-2", "kvserve-h2r"):
            frame = kvserve.encode(layers, spec)
            self.assertEqual(frame.tobytes(), cpu_frame(host, spec, None), spec)
            out = [(torch.empty_like(k), torch.empty_like(v)) for k, v in layers]
            kvserve.decode(frame, out=out)
            whole = kvserve.decode(frame.tobytes())
            for l, (k, v) in enumerate(out):
                self.assertTrue(torch.equal(k[0].cpu(), whole[l, 0]), f"{spec} layer {l} K")
                self.assertTrue(torch.equal(v[0].cpu(), whole[l, 1]), f"{spec} layer {l} V")

    def test_forward_hooks_encode_layer_by_layer_like_the_whole_cache(self):
        kv, host = cuda_cache(4)

        class Layer(torch.nn.Module):
            def __init__(self, index):
                super().__init__()
                self.index = index

            def forward(self, x):  # "computes" this layer's KV
                return kv[self.index, 0] + 0, kv[self.index, 1] + 0

        model = torch.nn.Sequential(*[Layer(i) for i in range(SHAPE[0])])
        for spec in ("kivi-2", "kvserve-h2r", "none"):
            enc = kvserve.CudaEncoder(spec, kv)
            enc.begin()
            hooks = [m.register_forward_hook(lambda m, inp, out: enc.encode_layer(m.index, out))
                     for m in model]
            with torch.no_grad():
                for m in model:
                    m(None)
            for h in hooks:
                h.remove()
            streamed = enc.finish(check=True)
            self.assertEqual(streamed.tobytes(), enc.encode(kv, check=True).tobytes(), spec)
            self.assertEqual(streamed.tobytes(), cpu_frame(host, spec, None), spec)

    def test_decode_layer_from_each_layers_records(self):
        kv, host = cuda_cache(5)
        enc = kvserve.CudaEncoder("kivi-2", kv)
        frame = enc.encode(kv, check=True)
        raw = torch.from_dlpack(frame)
        dec = kvserve.CudaDecoder(frame)
        out = torch.zeros_like(kv)
        order = list(range(SHAPE[0]))
        random.Random(5).shuffle(order)
        for l in order:
            offset, n = frame.layer_records(l)
            dec.decode_layer(l, raw[offset:offset + n], out)
        dec.check()
        self.assertTrue(torch.equal(out.cpu(), kvserve.decode(frame.tobytes())))
        with self.assertRaises(kvserve.KvserveNotSupportedError):
            kvserve.CudaEncoder("kvserve-h2r", kv).encode(kv).layer_records(0)

    def test_caller_buffers_device_and_pinned_host(self):
        kv, host = cuda_cache(6)
        for spec in ("kivi-2", "kvserve-h2r"):
            want = cpu_frame(host, spec, None)
            enc = kvserve.CudaEncoder(spec, kv)
            dev = torch.empty(enc.max_frame_bytes, dtype=torch.uint8, device="cuda")
            frame = enc.encode(kv, out=dev, check=True)
            self.assertEqual(frame.data_ptr, dev.data_ptr())
            self.assertEqual(dev[:len(want)].cpu().numpy().tobytes(), want)
            pinned = torch.empty(enc.max_frame_bytes, dtype=torch.uint8).pin_memory()
            n = enc.encode(kv, out=pinned)
            torch.cuda.current_stream().synchronize()
            self.assertEqual(n, len(want))
            self.assertEqual(pinned[:n].numpy().tobytes(), want)
            again = enc.encode(kv, out=frame)  # reuse a DeviceFrame
            self.assertEqual(again.tobytes(), want)
            with self.assertRaises(ValueError):
                enc.encode(kv, out=torch.empty(16, dtype=torch.uint8, device="cuda"))

    def test_side_stream(self):
        kv, host = cuda_cache(7)
        side = torch.cuda.Stream()
        enc = kvserve.CudaEncoder("kivi-4", kv)
        with torch.cuda.stream(side):
            doubled = kv * 1  # queued on the side stream; the encode must wait for it
            frame = enc.encode(doubled)
        side.synchronize()
        self.assertEqual(frame.tobytes(), cpu_frame(host, "kivi-4", None))


@unittest.skipUnless(HAVE_GPU, "needs the CUDA codec and a GPU")
class CudaErrorsTest(unittest.TestCase):
    def test_bad_arguments_raise(self):
        kv, host = cuda_cache(8)
        enc = kvserve.CudaEncoder("kivi-2", kv)
        with self.assertRaises(ValueError):  # CPU tensor to the CUDA encoder
            enc.encode(host)
        with self.assertRaises(ValueError):  # another shape
            enc.encode(kv[:, :, :, :100])
        with self.assertRaises(ValueError):  # another dtype
            enc.encode(kv.half())
        with self.assertRaises(kvserve.KvserveNotSupportedError):  # CPU entry point, CUDA tensor
            kvserve.Encoder("none").encode(kv)
        with self.assertRaises(ValueError):
            enc.encode_layer(0, (kv[0, 0], kv[0, 1]))  # before begin
        frame = enc.encode(kv)
        dec = kvserve.CudaDecoder(frame)
        with self.assertRaises(ValueError):
            dec.decode(frame, out=torch.empty_like(host))  # CPU out
        with self.assertRaises(ValueError):
            dec.decode(frame, out=torch.empty_like(kv[:2]))  # wrong shape

    def test_non_finite_input_is_reported(self):
        kv, _ = cuda_cache(9)
        kv[1, 0, 1, 7, 3] = float("nan")
        with self.assertRaises(ValueError):
            kvserve.encode(kv, "kivi-2")

    def test_corrupt_frame_is_reported(self):
        kv, _ = cuda_cache(10)
        for spec in ("kivi-2", "kvserve-h2r", "none"):
            good = kvserve.encode(kv, spec).tobytes()
            bad = bytearray(good)
            bad[len(bad) // 2] ^= 0x04
            with self.assertRaises(kvserve.KvserveCorruptionError, msg=spec):
                kvserve.decode(bytes(bad), out=torch.empty_like(kv))


@unittest.skipUnless(HAVE_GPU, "needs the CUDA codec and a GPU")
class CudaNoStagingTest(unittest.TestCase):
    def test_host_memory_stays_flat_and_kernels_do_the_work(self):
        shape = (32, 2, 8, 2048, 128)  # Llama-3.1-8B KV of 2K tokens: 268 MB of bf16
        kv = torch.randn(shape, device="cuda").to(torch.bfloat16)
        out = torch.empty_like(kv)
        enc = kvserve.CudaEncoder("kivi-2", kv)
        frame = enc.encode(kv, check=True)  # warm-up: CUDA context, pools
        dec = kvserve.CudaDecoder(frame)
        dec.decode(frame, out, check=True)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
        for _ in range(3):
            frame = enc.encode(kv, out=frame)
            dec.decode(frame, out)
        dec.check()
        enc.check()
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        cache_mb = kv.numel() * 2 / 1e6
        self.assertLess(grown_mb, 32, f"host peak RSS grew {grown_mb:.0f} MB encoding a {cache_mb:.0f} MB cache")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            frame = enc.encode(kv, out=frame)
            dec.decode(frame, out)
            dec.check()
        names = [e.key for e in prof.key_averages()]
        ours = [n for n in names if "kvserve::cuda" in n]
        self.assertTrue(ours, f"no kvserve CUDA kernel in the profile: {names[:10]}")
        staged = [n for n in names if "HtoD" in n and "Pageable" in n]
        self.assertFalse(staged, f"host-to-device copies of pageable memory: {staged}")


if __name__ == "__main__":
    unittest.main()
