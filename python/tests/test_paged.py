"""kvserve.PagedKv: frames encoded from an engine's paged caches (vLLM and
FlashInfer layouts, numpy and torch, bf16/f16/f32, block sizes 16 and 32,
random block tables) equal those of the contiguous cache, and decoding into
a receiver's pages writes exactly the request's slots. The pages are filled
and read with numpy indexing here, independently of the library."""
from __future__ import annotations

import unittest

import numpy as np

import kvserve
from kv_test_util import synth

LAYOUTS = ("vllm", "vllm-block-first", "flashinfer-nhd", "flashinfer-hnd")
SHAPE = (2, 2, 203, 64)  # layers, kv_heads, tokens (not a multiple of 16 or 32), head_dim


def layer_shape(layout, num_blocks, block_size, heads, dim):
    if layout == "vllm":
        return (2, num_blocks, block_size, heads, dim)
    if layout == "flashinfer-hnd":
        return (num_blocks, 2, heads, block_size, dim)
    return (num_blocks, 2, block_size, heads, dim)


def token_slots(cache, layout, kind, blocks, slots):
    """An indexing expression's result: (tokens, heads, dim) of one kind."""
    if layout == "vllm":
        return cache[kind, blocks, slots]
    if layout == "flashinfer-hnd":
        return cache[blocks, kind, :, slots]
    return cache[blocks, kind, slots]


def set_token_slots(cache, layout, kind, blocks, slots, values):
    if layout == "vllm":
        cache[kind, blocks, slots] = values
    elif layout == "flashinfer-hnd":
        cache[blocks, kind, :, slots] = values
    else:
        cache[blocks, kind, slots] = values


class Pages:
    """Per-layer caches of one layout holding a request at a random table."""

    def __init__(self, rng, layout, block_size, kv, np_dtype):
        layers, _, heads, tokens, dim = kv.shape
        needed = -(-tokens // block_size)
        self.num_blocks = needed + 4
        self.layout = layout
        self.block_size = block_size
        self.table = rng.permutation(self.num_blocks)[:needed].astype(np.int32)
        shape = layer_shape(layout, self.num_blocks, block_size, heads, dim)
        # Every slot starts at 7 (bf16 bits 0x0007), so a test sees what changed.
        self.layers = [np.full(shape, 7, dtype=np_dtype) for _ in range(layers)]
        self.blocks = self.table[np.arange(tokens) // block_size]
        self.slots = np.arange(tokens) % block_size

    def fill(self, kv):
        for l, cache in enumerate(self.layers):
            for k in range(2):
                set_token_slots(cache, self.layout, k, self.blocks, self.slots,
                                np.transpose(kv[l, k], (1, 0, 2)))

    def read(self, shape, np_dtype):
        layers, _, heads, tokens, dim = shape
        out = np.empty(shape, dtype=np_dtype)
        for l, cache in enumerate(self.layers):
            for k in range(2):
                out[l, k] = np.transpose(
                    token_slots(cache, self.layout, k, self.blocks, self.slots), (1, 0, 2))
        return out


class PagedTest(unittest.TestCase):
    def test_paged_frames_equal_contiguous_frames(self):
        rng = np.random.default_rng(31)
        for dtype, np_dtype in (("f32", np.float32), ("f16", np.float16), ("bf16", np.uint16)):
            kv = synth(seed=int(rng.integers(1 << 30)), dtype=dtype, shape=SHAPE)
            kw = {"dtype": "bf16"} if dtype == "bf16" else {}
            for layout in LAYOUTS:
                for block_size in (16, 32):
                    with self.subTest(dtype=dtype, layout=layout, block_size=block_size):
                        pages = Pages(rng, layout, block_size, kv, np_dtype)
                        pages.fill(kv)
                        paged = kvserve.PagedKv(pages.layers, layout, pages.table, SHAPE[2], **kw)
                        self.assertEqual(paged.shape, SHAPE)
                        self.assertEqual(paged.block_size, block_size)
                        for profile in ("none", "kivi-2"):
                            contiguous = kvserve.encode(kv, profile, dtype=kw.get("dtype"))
                            self.assertEqual(bytes(kvserve.encode(paged, profile)), bytes(contiguous))
                        # Layer by layer from the pages: the same bytes.
                        enc = kvserve.Encoder("kivi-2", threads=1)
                        streamed = enc.begin(SHAPE, dtype)
                        for l in range(SHAPE[0]):
                            streamed += enc.encode_layer(l, paged)
                        streamed += enc.finish()
                        self.assertEqual(streamed, bytes(kvserve.encode(kv, "kivi-2", dtype=kw.get("dtype"))))

    def test_decode_scatters_into_the_receivers_pages(self):
        rng = np.random.default_rng(32)
        kv = synth(seed=5, dtype="f16", shape=SHAPE)
        frame = kvserve.encode(kv, "kivi-2")
        expected = kvserve.decode(frame)
        for layout in LAYOUTS:
            for block_size in (16, 32):
                with self.subTest(layout=layout, block_size=block_size):
                    pages = Pages(rng, layout, block_size, kv, np.float16)
                    before = [c.copy() for c in pages.layers]
                    paged = kvserve.PagedKv(pages.layers, layout, pages.table, SHAPE[2])
                    kvserve.decode(frame, out=paged)
                    np.testing.assert_array_equal(pages.read(kv.shape, np.float16), expected)
                    # Only the request's slots changed.
                    for c, b in zip(pages.layers, before):
                        changed = c != b
                        for k in range(2):
                            mask = token_slots(changed, layout, k, pages.blocks, pages.slots)
                            set_token_slots(changed, layout, k, pages.blocks, pages.slots,
                                            np.zeros_like(mask))
                        self.assertFalse(changed.any())
                    # Record by record into another receiver.
                    other = Pages(rng, layout, block_size, kv, np.float16)
                    paged_other = kvserve.PagedKv(other.layers, layout, other.table, SHAPE[2])
                    dec = kvserve.Decoder(threads=1)
                    data = memoryview(frame)
                    dec.start(data)
                    for chunk in kvserve.inspect(frame).chunks:
                        dec.decode_record(data[chunk.offset:chunk.offset + chunk.size], paged_other)
                    np.testing.assert_array_equal(other.read(kv.shape, np.float16), expected)
                    # gather() reads the pages back through the library.
                    gathered = np.empty_like(expected)
                    paged_other.gather(gathered)
                    np.testing.assert_array_equal(gathered, expected)

    def test_torch_bf16_pages_with_a_layer_axis(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch not installed")
        rng = np.random.default_rng(33)
        kv = kvserve.as_torch(synth(seed=9, dtype="bf16", shape=SHAPE))
        layers, _, heads, tokens, dim = kv.shape
        block_size = 16
        num_blocks = -(-tokens // block_size) + 3
        table = torch.from_numpy(rng.permutation(num_blocks)[: -(-tokens // block_size)].astype(np.int32))
        cache = torch.zeros((layers, 2, num_blocks, block_size, heads, dim), dtype=torch.bfloat16)
        paged = kvserve.PagedKv(cache, "vllm", table, tokens)
        paged.scatter(kv)
        self.assertEqual(bytes(kvserve.encode(paged, "kivi-2")), bytes(kvserve.encode(kv, "kivi-2")))
        out = torch.zeros((layers, num_blocks, 2, heads, block_size, dim), dtype=torch.bfloat16)
        receiver = kvserve.PagedKv(list(out.unbind(0)), "flashinfer-hnd", table.flip(0), tokens)
        kvserve.decode(kvserve.encode(kv, "none"), out=receiver)
        back = torch.empty_like(kv)
        receiver.gather(back)
        self.assertTrue(torch.equal(back, kv))

    def test_bad_pages_raise(self):
        kv = synth(seed=1, dtype="f32", shape=SHAPE)
        rng = np.random.default_rng(34)
        pages = Pages(rng, "vllm", 16, kv, np.float32)
        with self.assertRaises(ValueError):  # unknown layout
            kvserve.PagedKv(pages.layers, "paged-v9", pages.table, SHAPE[2])
        with self.assertRaises(ValueError):  # table too short
            kvserve.PagedKv(pages.layers, "vllm", pages.table[:2], SHAPE[2])
        bad = pages.table.copy()
        bad[0] = pages.num_blocks
        with self.assertRaises(ValueError):  # entry outside the cache
            kvserve.PagedKv(pages.layers, "vllm", bad, SHAPE[2])
        with self.assertRaises(ValueError):  # the K/V axis of vllm has size 2
            kvserve.PagedKv([c[:1] for c in pages.layers], "vllm", pages.table, SHAPE[2])
        twice = pages.table.copy()
        twice[1] = twice[0]
        paged = kvserve.PagedKv(pages.layers, "vllm", twice, SHAPE[2])
        with self.assertRaises(ValueError):  # decoding into a block named twice
            kvserve.decode(kvserve.encode(kv, "none"), out=paged)
        frozen = [np.array(c) for c in pages.layers]
        for c in frozen:
            c.flags.writeable = False
        ro = kvserve.PagedKv(frozen, "vllm", pages.table, SHAPE[2], writable=False)
        with self.assertRaises(ValueError):
            kvserve.decode(kvserve.encode(kv, "none"), out=ro)
        corrupt = bytearray(kvserve.encode(kv, "kivi-2"))
        corrupt[len(corrupt) // 2] ^= 0x20
        good = kvserve.PagedKv(pages.layers, "vllm", pages.table, SHAPE[2])
        with self.assertRaises(kvserve.KvserveCorruptionError):
            kvserve.decode(corrupt, out=good)


if __name__ == "__main__":
    unittest.main()
