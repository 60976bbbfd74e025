"""kvserve.generation: greedy steps from a given cache, eager and CUDA-graph."""

import random
import unittest

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

try:
    import transformers
except ImportError:  # pragma: no cover - transformers is optional
    transformers = None

from kv_test_util import small_llama
from kvserve import generation, hf, pd


def _eager_steps(model, layers, last, steps):
    """The plain greedy loop a Generator must equal on its eager path."""
    cache = pd.new_cache(model)
    for l, (k, v) in enumerate(layers):
        cache.update(k[None] if k.dim() == 3 else k, v[None] if v.dim() == 3 else v, l)
    out = []
    with torch.no_grad():
        for _ in range(steps):
            o = model(input_ids=torch.tensor([[last]]), past_key_values=cache, use_cache=True)
            cache = o.past_key_values
            last = int(o.logits[0, -1].argmax())
            out.append(last)
    return out


def _prefill(model, ids):
    device = next(model.parameters()).device
    with torch.no_grad():
        cache = pd.new_cache(model)
        out = model(input_ids=torch.tensor([ids], device=device), past_key_values=cache, use_cache=True)
    return hf.cache_layers(cache), int(out.logits[0, -1].argmax())


@unittest.skipIf(torch is None, "torch not installed")
class EagerGeneratorTest(unittest.TestCase):
    def test_equals_the_plain_greedy_loop_from_any_layer_shape(self):
        rng = random.Random(61)
        model = pd.TinyCausalLM(seed=61)
        gen = generation.Generator(model)
        self.assertFalse(gen.graphs)  # a CPU model with its own cache steps eagerly
        for _ in range(4):
            ids = [rng.randrange(1, 96) for _ in range(rng.randrange(3, 40))]
            layers, first = _prefill(model, ids)
            steps = rng.randrange(1, 9)
            expected = _eager_steps(model, layers, first, steps)
            self.assertEqual(gen.generate(layers, first, steps), expected)
            self.assertEqual(len(gen.step_seconds), steps)
            # A 5-D buffer's (kv_heads, tokens, head_dim) views give the same.
            buffer = torch.stack([torch.stack([k[0], v[0]]) for k, v in layers])
            self.assertEqual(gen.generate([(buffer[l, 0], buffer[l, 1]) for l in range(len(layers))],
                                          first, steps), expected)
        self.assertEqual(gen.generate(layers, first, 0), [])
        self.assertEqual(gen.capacity_for(1), 1024)
        self.assertEqual(gen.capacity_for(1024), 1024)
        self.assertEqual(gen.capacity_for(1025), 2048)
        with self.assertRaises(ValueError):
            generation.Generator(model, keep=0)

    def test_math_attention_follows_torch_deterministic_mode(self):
        model = pd.TinyCausalLM(seed=64)
        was = torch.are_deterministic_algorithms_enabled()
        try:
            torch.use_deterministic_algorithms(True, warn_only=True)
            self.assertTrue(generation.Generator(model).math_attention)
            self.assertFalse(generation.Generator(model, math_attention=False).math_attention)
            torch.use_deterministic_algorithms(False)
            self.assertFalse(generation.Generator(model).math_attention)
            self.assertTrue(generation.Generator(model, math_attention=True).math_attention)
        finally:
            torch.use_deterministic_algorithms(was)


@unittest.skipIf(torch is None or transformers is None or not torch.cuda.is_available(),
                 "needs torch, transformers and a CUDA device")
class GraphGeneratorTest(unittest.TestCase):
    def test_replays_repeat_and_ignore_what_earlier_requests_left(self):
        rng = random.Random(62)
        model = small_llama(62)
        gen = generation.Generator(model, granularity=256, keep=2)
        self.assertTrue(gen.graphs)
        long_ids = [rng.randrange(1, 512) for _ in range(200)]
        short_ids = [rng.randrange(1, 512) for _ in range(30)]
        long_layers, long_first = _prefill(model, long_ids)
        short_layers, short_first = _prefill(model, short_ids)
        # Against the eager loop: the same model, different kernels; in fp32
        # on a small model the greedy tokens agree.
        expected = generation.Generator(model, graphs=False).generate(short_layers, short_first, 12)
        fresh = generation.Generator(model, granularity=256)
        self.assertEqual(fresh.generate(short_layers, short_first, 12), expected)
        self.assertTrue(fresh.graphs, "the capture failed")
        # The long prompt fills slots the short one's steps must not see.
        gen.generate(long_layers, long_first, 12)
        self.assertEqual(gen.generate(short_layers, short_first, 12), expected)
        self.assertEqual(gen.generate(short_layers, short_first, 12), expected)
        self.assertEqual(len(gen.step_seconds), 12)
        # A longer sequence than the capacity moves to the next one; the
        # least recently used capture goes when more than `keep` exist.
        self.assertEqual(gen.capacity_for(300), 512)
        gen.generate(long_layers, long_first, 100)
        self.assertEqual(gen.capacities, [256, 512])
        gen.generate(long_layers, long_first, 400)
        self.assertEqual(gen.capacities, [512, 768])
        self.assertEqual(gen.generate(short_layers, short_first, 12), expected)  # captured again


if __name__ == "__main__":
    unittest.main()
