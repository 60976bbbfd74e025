"""kvserve.batching: continuous batching of decode steps. Requests stepped
together get the tokens each gets alone (and a Generator's); more requests
than rows wait and take rows as they free; a closed decoder fails what
waits; and concurrent requests through one prefill worker meet in a batching
decode engine with the single-process tokens (toy model on the CPU; the
CUDA-graph path on a GPU with transformers)."""

import random
import threading
import time
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
from kvserve import generation, hf, serve

if torch is not None:
    from kvserve import pd
    from kvserve.batching import BatchDecoder
    from kvserve.integration.transformers import TinyCausalLM, TransformersEngine


def _requests(model, seed, n, vocab, lengths=(5, 40), steps=(3, 10)):
    """``n`` (layers, first token, steps) of fresh random prompts."""
    rng = random.Random(seed)
    device = next(model.parameters()).device
    out = []
    for _ in range(n):
        ids = [rng.randrange(1, vocab) for _ in range(rng.randrange(*lengths))]
        with torch.no_grad():
            cache = pd.new_cache(model)
            logits = model(input_ids=torch.tensor([ids], device=device), past_key_values=cache,
                           use_cache=True).logits
        out.append((hf.cache_layers(cache), int(logits[0, -1].argmax()), rng.randrange(*steps)))
    return out


def _together(decoder, requests):
    """Every request submitted before the scheduler starts: they step together."""
    pending = [decoder.submit(*r) for r in requests]
    decoder.start()
    return [p.result().tokens for p in pending]


@unittest.skipIf(torch is None, "torch not installed")
class BatchDecoderTest(unittest.TestCase):
    def test_requests_stepped_together_get_their_tokens_alone(self):
        model = TinyCausalLM(seed=71)
        requests = _requests(model, 71, 7, 96)
        alone = BatchDecoder(model, max_batch=3, granularity=64)
        self.addCleanup(alone.close)
        expected = [alone.generate(*r).tokens for r in requests]
        self.assertEqual(alone.stats["most_rows"], 1)
        # The Generator's eager loop gives the same tokens.
        gen = generation.Generator(model)
        self.assertEqual([gen.generate(*r) for r in requests], expected)
        self.assertGreater(len({t for ts in expected for t in ts}), 3)  # not a degenerate model
        # Seven requests, three rows: four wait and take rows as they free.
        decoder = BatchDecoder(model, max_batch=3, granularity=64, start=False)
        self.addCleanup(decoder.close)
        self.assertEqual(_together(decoder, requests), expected)
        self.assertEqual(decoder.stats["most_rows"], 3)
        self.assertEqual(decoder.stats["requests"], 7)
        self.assertLess(decoder.stats["steps"], alone.stats["steps"])
        self.assertEqual(decoder.stats["row_steps"], sum(r[2] for r in requests))

    def test_buckets_by_capacity_and_rows_by_budget(self):
        model = TinyCausalLM(seed=72)
        # Short and long prompts land in buckets of different capacities.
        requests = _requests(model, 72, 6, 96, lengths=(5, 120))
        alone = BatchDecoder(model, granularity=16)
        self.addCleanup(alone.close)
        expected = [alone.generate(*r).tokens for r in requests]
        decoder = BatchDecoder(model, granularity=16, cache_budget_bytes=1, start=False)
        self.addCleanup(decoder.close)
        self.assertEqual(_together(decoder, requests), expected)
        self.assertEqual(decoder.capacity_for(16), 16)
        self.assertEqual(decoder.capacity_for(17), 32)
        self.assertEqual(decoder.capacity_for(100), 128)
        self.assertEqual(decoder.rows_for(128), 1)  # a budget below one row still gives one
        self.assertEqual(decoder.stats["requests"], 6)

    def test_a_short_request_steps_beside_a_busy_long_one(self):
        model = TinyCausalLM(seed=76)
        (long_kv, long_last, _), = _requests(model, 76, 1, 96, lengths=(100, 120))
        (short_kv, short_last, _), = _requests(model, 77, 1, 96, lengths=(5, 10))
        k = long_kv[0][0]
        per_token = 2 * len(long_kv) * k.shape[-3] * k.shape[-1] * k.element_size()
        decoder = BatchDecoder(model, max_batch=4, granularity=16, keep=2, start=False)
        capacity = decoder.capacity_for(k.shape[-2] + 50)
        # The budget holds four rows of the long request's bucket; its share (a half) two.
        decoder.cache_budget_bytes = 4 * capacity * per_token
        self.addCleanup(decoder.close)
        big = decoder.submit(long_kv, long_last, 50)
        small = decoder.submit(short_kv, short_last, 3)
        self.assertEqual(decoder.rows_for(capacity), 2)
        decoder.start()
        self.assertEqual(len(small.result().tokens), 3)
        self.assertEqual(len(big.result().tokens), 50)
        # The short request did not wait for the long one's bucket to empty.
        self.assertEqual(decoder.stats["most_buckets"], 2)

    def test_a_closed_decoder_fails_what_waits(self):
        model = TinyCausalLM(seed=73)
        decoder = BatchDecoder(model, start=False)
        pending = decoder.submit(*_requests(model, 73, 1, 96)[0])
        decoder.start()
        decoder.close()
        try:
            pending.result()  # it may have finished before the close
        except RuntimeError as e:
            self.assertIn("closed", str(e))
        with self.assertRaises(RuntimeError):
            decoder.generate(*_requests(model, 74, 1, 96)[0])
        with self.assertRaises(ValueError):
            BatchDecoder(model, max_batch=0)

    def test_concurrent_requests_of_one_prefill_worker_meet_in_the_batch(self):
        # Two processes' models (the same weights): the prefill engine's
        # layer hooks must not see the decode side's steps.
        model, decode_model = TinyCausalLM(seed=3), TinyCausalLM(seed=3)
        batch = BatchDecoder(decode_model, max_batch=4, granularity=256, start=False)
        self.addCleanup(batch.close)
        decode = serve.DecodeWorker(TransformersEngine(decode_model, batch=batch), secret="k")
        self.addCleanup(decode.stop)
        prefill = serve.PrefillWorker(TransformersEngine(model), pd.raw_table(), [decode.address], secret="k",
                                      max_decode_connections=4)
        self.addCleanup(prefill.stop)
        rng = random.Random(75)
        prompts = [[rng.randrange(1, 96) for _ in range(rng.randrange(20, 200))] for _ in range(6)]
        responses = [None] * len(prompts)

        def run(i):
            responses[i] = prefill.serve(serve.request(i, prompts[i], max_new_tokens=40, method="none"))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        # The decoder starts once four requests wait in it: the prefill
        # worker let each go on to the next while it awaited its result.
        deadline = time.monotonic() + 60
        while batch.waiting() < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(batch.waiting(), 4)
        batch.start()
        for t in threads:
            t.join()
        generator = generation.Generator(model)
        for p, r in zip(prompts, responses):
            serve.raise_for(r)
            self.assertEqual(r["tokens"], pd.reference_tokens(model, p, 40, generator))
        self.assertEqual(batch.stats["requests"], len(prompts))
        self.assertEqual(batch.stats["most_rows"], 4)  # the four stepped together


@unittest.skipIf(torch is None or transformers is None or not torch.cuda.is_available(),
                 "needs torch, transformers and a CUDA device")
class GraphBatchDecoderTest(unittest.TestCase):
    def test_captured_rows_get_their_tokens_alone(self):
        model = small_llama(76)
        requests = _requests(model, 76, 7, 512, lengths=(20, 300), steps=(4, 24))
        alone = BatchDecoder(model, max_batch=3, granularity=256)
        self.addCleanup(alone.close)
        self.assertTrue(alone.graphs)
        expected = [alone.generate(*r).tokens for r in requests]
        # Against the one-request Generator (graph steps too): in fp32 on a
        # small model the greedy tokens agree.
        gen = generation.Generator(model, granularity=256)
        self.assertEqual([gen.generate(*r) for r in requests], expected)
        decoder = BatchDecoder(model, max_batch=3, granularity=256, start=False)
        self.addCleanup(decoder.close)
        self.assertEqual(_together(decoder, requests), expected)
        self.assertEqual(decoder.stats["most_rows"], 3)


if __name__ == "__main__":
    unittest.main()
