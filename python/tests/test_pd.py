"""kvserve.pd: the library's prefill and decode workers around a
transformers-style engine (a seeded toy model on CPU; on a GPU when
present): tokens through a lossless profile equal a single-process run,
layers leave while the prefill still runs, the controller decides from
measured bandwidth within the quality floor, prefix-pool hits give the
recomputed tokens, workers on one shared link send through its one
bucket, and an engine that fails a request (an allocation
refused, a forward pass raising) fails that request with its error while
the workers keep serving."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import unittest

try:
    import torch
except ImportError:  # the package works without torch; these tests need it
    torch = None

import kvserve
from kvserve import pool as kvpool, serve

if torch is not None:
    from kvserve import pd
    from kvserve.integration.transformers import TinyCausalLM, TransformersEngine, decoder_layers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def prompt(seed, n=160, vocab=96):
    rng = random.Random(seed)
    return [rng.randrange(1, vocab) for _ in range(n)]


@unittest.skipIf(torch is None, "torch not installed")
class PdTest(unittest.TestCase):
    def workers(self, prefill_engine, decode_engine=None, table=None, **options):
        """A decode worker and a prefill worker dialling it (stopped at the end)."""
        decode = serve.DecodeWorker(decode_engine or prefill_engine, secret="k")
        self.addCleanup(decode.stop)
        prefill = serve.PrefillWorker(prefill_engine, table or pd.raw_table(), [decode.address], secret="k",
                                      **options)
        self.addCleanup(prefill.stop)
        return prefill, decode

    def test_lossless_tokens_equal_a_single_process_run_and_lossy_frames_are_smaller(self):
        model = TinyCausalLM(seed=3)
        prefill, decode = self.workers(TransformersEngine(model))
        # Prompts whose greedy continuation does not settle into one repeated
        # token (which would hide a wrong KV byte).
        for i, (seed, method, n) in enumerate([(41, "none", 160), (45, "none", 200), (42, "kivi-2", 640)]):
            p = prompt(seed, n)
            r = serve.raise_for(prefill.serve(serve.request(i, p, max_new_tokens=12, method=method)))
            t = r["timings"]
            self.assertEqual(len(r["tokens"]), 12)
            self.assertEqual(t["kv_bytes"], 2 * 4 * n * 2 * 32 * 4)  # 4 layers, 2 heads, dim 32, f32
            self.assertEqual(t["profile"], method)
            if method == "none":
                expected = pd.reference_tokens(model, p, 12)
                self.assertGreaterEqual(len(set(expected)), 5)
                self.assertEqual(r["tokens"], expected, f"request {i}")
                self.assertGreater(t["frame_bytes"], t["kv_bytes"])
            else:
                self.assertLess(t["frame_bytes"], t["kv_bytes"] / 2)  # 128 residual tokens stay raw
            self.assertGreaterEqual(t["jct_seconds"], t["ttft_seconds"])
        self.assertEqual(decode.completed, 3)

    def test_layers_leave_while_the_prefill_still_runs(self):
        """The last layer's forward waits until the decode side has layer
        0's KV in the tensor it allocated: only a streamed prefill gets past
        it."""
        model = TinyCausalLM(seed=4)
        allocated = []

        class Receiving(TransformersEngine):
            def allocate_kv(self, shape, dtype):
                t = super().allocate_kv(shape, dtype)
                t.zero_()
                allocated.append(t)
                return t

        prefill, _ = self.workers(TransformersEngine(model), Receiving(TinyCausalLM(seed=4)))
        seen = []

        def wait_for_layer0(*_):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                if allocated and bool(allocated[-1][0].abs().sum() > 0):
                    seen.append(True)
                    return
                time.sleep(0.01)
            seen.append(False)

        handle = decoder_layers(model)[-1].register_forward_pre_hook(wait_for_layer0)
        r = prefill.serve(serve.request(0, prompt(7, 300), max_new_tokens=1, method="kivi-4"))
        handle.remove()
        serve.raise_for(r)
        self.assertEqual(seen, [True])

    def test_controller_decides_on_the_shaped_links_rate_and_respects_the_floor(self):
        rows = [kvserve.ProfileCost("kivi-2", 7.0, 4e9, 4e9, quality={"w": 0.9}),
                kvserve.ProfileCost("kivi-4", 3.7, 4e9, 4e9, quality={"w": 0.99})]
        table = kvserve.ProfileTable.from_rows(rows, ["w"])
        model = TinyCausalLM(seed=3)
        prefill, _ = self.workers(TransformersEngine(model), table=table, bandit=False, epsilon=0.0,
                                  link_bytes_per_second=kvserve.gbps_to_bytes_per_second(0.05),
                                  table_reference_tokens=600)
        ask = lambda i, p: serve.raise_for(prefill.serve(serve.request(i, p, max_new_tokens=3, workload="w",
                                                                        quality_min=0.95)))["timings"]
        # The first request, before any measurement, is decided on the rate the worker shapes its link to.
        later = [ask(i, prompt(60 + i, 600)) for i in range(3)]
        for t in later:
            self.assertNotEqual(t["profile"], "none", "a 50 Mbps link should compress")
            self.assertEqual(kvserve.Profile(t["profile"]).to_json(), kvserve.Profile("kivi-4").to_json())
            self.assertGreater(t["bandwidth_estimate"], 0)
        # Both profiles keep 128 tokens unquantised: for a 100-token prompt
        # their frames outweigh the KV, the table's 7x and 3.7x
        # notwithstanding, so the request goes raw.
        self.assertEqual(ask(3, prompt(3, n=100))["profile"], "none")

    def test_prefix_pool_hits_give_the_recomputed_tokens(self):
        model = TinyCausalLM(seed=3)
        pool = kvpool.memory(budget_bytes=1 << 28)
        prefill, _ = self.workers(TransformersEngine(model), pool=pool, pool_chunk_tokens=64)
        shared = prompt(5, 256)
        first = serve.raise_for(prefill.serve(serve.request(0, shared + [7], max_new_tokens=6, method="none",
                                                            use_pool=True)))
        self.assertFalse(first["timings"]["prefix_hit"])
        second = serve.raise_for(prefill.serve(serve.request(1, shared + [9, 11], max_new_tokens=6, method="none",
                                                             use_pool=True)))
        self.assertTrue(second["timings"]["prefix_hit"])
        self.assertEqual(second["timings"]["prefix_chunks"], 4)
        self.assertEqual(second["tokens"], pd.reference_tokens(model, shared + [9, 11], 6))
        # A hit covering all but the last token: the chunks go into the generator's cache one by one.
        third = serve.raise_for(prefill.serve(serve.request(2, shared + [13], max_new_tokens=6, method="none",
                                                            use_pool=True)))
        self.assertEqual(third["timings"]["prefix_chunks"], 4)
        self.assertEqual(third["tokens"], pd.reference_tokens(model, shared + [13], 6))

    def test_workers_on_a_shared_link_send_through_its_one_bucket(self):
        from kvserve import transport  # noqa: PLC0415

        model = TinyCausalLM(seed=3)
        engine = TransformersEngine(model)
        link = transport.SharedLink(gbps=100)
        first, decode = self.workers(engine, shared_link=link)
        second = serve.PrefillWorker(engine, pd.raw_table(), [decode.address], secret="k", shared_link=link)
        self.addCleanup(second.stop)
        sent = 0
        for i, worker in enumerate([first, second, first]):
            r = serve.raise_for(worker.serve(serve.request(i, prompt(50 + i), max_new_tokens=2, method="none")))
            sent += r["timings"]["frame_bytes"]
            # One request at a time: its own transfer is the only one on the link at the decision.
            self.assertEqual(r["timings"]["link_transfers"], 1)
            self.assertAlmostEqual(r["timings"]["link_bytes_per_second"], kvserve.gbps_to_bytes_per_second(100))
        self.assertGreaterEqual(link.bytes, sent)
        second.set_link_rate(kvserve.gbps_to_bytes_per_second(40))
        self.assertAlmostEqual(link.gbps, 40)  # for both workers

    def test_engine_failures_fail_the_request_and_the_workers_go_on(self):
        model = TinyCausalLM(seed=3)

        class Refusing(TransformersEngine):
            refuse = True

            def allocate_kv(self, shape, dtype):
                if Refusing.refuse:
                    raise MemoryError("out of device memory for the KV")
                return super().allocate_kv(shape, dtype)

        prefill, decode = self.workers(TransformersEngine(model), Refusing(TinyCausalLM(seed=3)))
        r = prefill.serve(serve.request(0, prompt(1), max_new_tokens=4, method="kivi-2"))
        self.assertFalse(r["ok"])
        self.assertIn("out of device memory", r["error"])
        Refusing.refuse = False
        p = prompt(2)
        r = serve.raise_for(prefill.serve(serve.request(1, p, max_new_tokens=4, method="none")))
        self.assertEqual(r["tokens"], pd.reference_tokens(model, p, 4))

    def test_command_line_checks_lossless_tokens(self):
        env = dict(os.environ)
        out = subprocess.run([sys.executable, "-m", "kvserve.pd", "--model", "tiny", "--methods", "none,kivi-2",
                              "--requests", "1", "--prompt-tokens", "64", "--new-tokens", "4", "--check"],
                             capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        self.assertEqual([r["method"] for r in rows], ["none", "kivi-2"])
        self.assertTrue(rows[0]["matches_single_process"])
        help_text = subprocess.run([sys.executable, "-m", "kvserve.pd", "--help"], capture_output=True,
                                   text=True, timeout=60, env=env).stdout
        self.assertIn("--methods", help_text)


@unittest.skipIf(torch is None or not torch.cuda.is_available() or not kvserve.cuda_available(),
                 "needs torch with a CUDA device and a CUDA build of kvserve")
class PdGpuTest(unittest.TestCase):
    def test_device_kv_moves_through_the_bounded_ring(self):
        model = TinyCausalLM(seed=3).to("cuda", torch.bfloat16)
        engine = TransformersEngine(model)
        device = serve.device_connector(device_budget_bytes=1 << 20, pinned_budget_bytes=1 << 20)
        decode = serve.DecodeWorker(engine, device=device)
        prefill = serve.PrefillWorker(engine, pd.raw_table(), [decode.address], device=device)
        try:
            for i, (method, n) in enumerate([("none", 700), ("kivi-2", 900), ("kvserve-h2r", 600)]):
                p = prompt(50 + i, n)
                r = serve.raise_for(prefill.serve(serve.request(i, p, max_new_tokens=8, method=method)))
                if method == "none":
                    self.assertEqual(r["tokens"], pd.reference_tokens(model, p, 8))
            memory = device.memory()
            self.assertGreater(memory["peak_transfer_bytes"], 0)
            self.assertLessEqual(memory["peak_transfer_bytes"], 1 << 20)
        finally:
            prefill.stop()
            decode.stop()


if __name__ == "__main__":
    unittest.main()
