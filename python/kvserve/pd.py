"""Prefill/decode disaggregation of a transformers model on kvserve's serving
core: the library's prefill and decode workers (:mod:`kvserve.serve`)
around :class:`kvserve.integration.transformers.TransformersEngine`. The
forward hook of each decoder layer only says "layer l is done"; the
library encodes and sends it (on the GPU for a model there, in bounded
device memory) while the next layers run, the decode worker decodes each
window of records into its cache as it arrives, and the controller picks
each request's profile. Nothing of the protocol or of a decision lives
here.

    python -m kvserve.pd --model tiny --check          # both workers here, toy model, CPU
    python -m kvserve.pd --role decode --model llama-8b-random --device cuda --address-file a
    python -m kvserve.pd --role prefill --address $(cat a) --model llama-8b-random --device cuda

Run ``python -m kvserve.pd --help`` for the options.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
from typing import Any, Callable, List, Optional, Sequence

import kvserve
from kvserve import generation, hf, serve
from kvserve import pool as kvpool
from kvserve.integration.transformers import (TinyCausalLM, TransformersEngine, decoder_layers,  # noqa: F401
                                              deterministic, freeze_heap, last_logits_only, load_model,
                                              new_cache)

RAW_SPEC = "none"  # the raw profile's spec (table index 0)


def _torch() -> Any:
    import torch  # noqa: PLC0415

    return torch


def connector_for(engine: TransformersEngine, device_budget_bytes: int = 64 << 20) -> Any:
    """The device connector a GPU engine's workers move KV with (None for a
    CPU engine)."""
    device = engine.info()["device"]
    if device < 0:
        return None
    return serve.device_connector(device, device_budget_bytes=device_budget_bytes)


def raw_table(workload: str = "default") -> Any:
    """A profile table with raw alone: for workers whose requests name their
    method (a controller then has nothing else to choose)."""
    return kvserve.ProfileTable.from_rows([], [workload])


def reference_tokens(model: Any, prompt_ids: Sequence[int], max_new_tokens: int,
                     generator: Any = None) -> List[int]:
    """Greedy tokens of a single-process run (no KV movement): what the
    decode worker must produce through a lossless profile. The steps after
    the prefill's token run through ``generator`` (a
    :class:`kvserve.generation.Generator` of ``model``; a new one when None),
    as the decode worker's do."""
    torch = _torch()
    device = next(model.parameters()).device
    generator = generator if generator is not None else generation.Generator(model)
    with torch.no_grad():
        cache = new_cache(model)
        out = model(input_ids=torch.tensor([list(prompt_ids)], device=device), past_key_values=cache,
                    use_cache=True, **last_logits_only(model))
        first = int(out.logits[0, -1].argmax())
        layers = hf.cache_layers(cache)
    return [first] + generator.generate(layers, first, max_new_tokens - 1)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kvserve.pd",
        description="Prefill/decode over kvserve's serving core: a decode worker (in this process, or "
                    "--role decode elsewhere) and a prefill worker that streams each layer's KV as the "
                    "prefill produces it. Prints one JSON line per request.")
    p.add_argument("--model", default="tiny",
                   help="tiny (seeded toy, CPU), llama-8b-random (timing only) or a transformers "
                        "checkpoint (e.g. models/kvs-qwen2-9m)")
    p.add_argument("--device", default="cpu", help="torch device of the models (cpu, cuda, cuda:1)")
    p.add_argument("--role", choices=["both", "prefill", "decode", "prefill-server"], default="both",
                   help="both: the two workers here, requests sent from here; decode: a decode worker; "
                        "prefill: a prefill worker sending --methods requests of its own; prefill-server: "
                        "a prefill worker serving clients (kvserve replay / router) at --listen")
    p.add_argument("--address", default="127.0.0.1:0",
                   help="decode worker's listen address (role decode/both) or the one to dial (prefill, "
                        "prefill-server)")
    p.add_argument("--listen", default="127.0.0.1:0", help="role prefill-server: where clients reach it")
    p.add_argument("--address-file",
                   help="roles decode and prefill-server: write the bound address here once listening")
    p.add_argument("--max-decode-connections", type=int, default=4,
                   help="role prefill-server: requests generating at once on the decode worker")
    p.add_argument("--pool-memory-mib", type=int, default=0,
                   help="role prefill-server: an embedded prefix pool of this budget (0: none)")
    p.add_argument("--pool-redis", default="",
                   help="role prefill-server: the prefix pool in Redis at host:port (shared by workers)")
    p.add_argument("--pool-chunk-tokens", type=int, default=512, help="role prefill-server: pool chunk")
    p.add_argument("--memory-file",
                   help="role decode: at exit, and at each SIGUSR1 while running, write the device "
                        "connector's memory report and the batched decoder's counters here (JSON)")
    p.add_argument("--secret", default="", help="shared secret of the connections (both sides)")
    p.add_argument("--pool",
                   help="role decode: address of the prefill workers' pool server (kvserve.pool.serve); "
                        "prefix hits are then fetched from it here, straight into the cache, instead of "
                        "relayed by the prefill worker")
    p.add_argument("--methods", default="none,kivi-2",
                   help="comma-separated profiles or presets; 'kvserve' lets the controller choose "
                        "(needs --table)")
    p.add_argument("--table", help="profile table JSON for the controller (kvserve method)")
    p.add_argument("--workload", default="", help="workload of the table (default: unified or its first)")
    p.add_argument("--slo", type=float, default=float("inf"), help="prefill + KV time budget per request, s")
    p.add_argument("--quality-min", type=float, default=0.0, help="quality floor per request")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--requests", type=int, default=3, help="requests per method")
    p.add_argument("--gbps", type=float, default=0.0, help="shape the prefill->decode link (0: off)")
    p.add_argument("--device-budget-mib", type=int, default=64,
                   help="device memory per transfer for the GPU connector's ring, MiB")
    p.add_argument("--decode-batch", type=int, default=0,
                   help="role decode: step up to this many requests together (continuous batching, "
                        "kvserve.batching.BatchDecoder); 0: one request at a time")
    p.add_argument("--decode-cache-mib", type=int, default=8192,
                   help="role decode with --decode-batch: static cache of one batch of requests of "
                        "similar length at most, MiB (fewer rows for longer requests; one at least)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true",
                   help="compare the tokens of lossless methods with a single-process run; exit 1 "
                        "on a difference (implies --deterministic)")
    p.add_argument("--deterministic", action="store_true",
                   help="torch's deterministic algorithms (see deterministic()); both sides of a "
                        "token comparison need it")
    return p


def _announce(what: str, address: str, address_file: Optional[str]) -> None:
    """Says where ``what`` listens, on stderr and (written whole, then
    renamed) in ``address_file``."""
    print(f"{what} listening on {address}", file=sys.stderr, flush=True)
    if address_file:
        with open(address_file + ".tmp", "w") as f:
            f.write(address)
        os.replace(address_file + ".tmp", address_file)


def _wait_for_signal(on_usr1: Optional[Callable[[], None]] = None) -> None:
    """Blocks (the GIL released) until SIGTERM or SIGINT; calls ``on_usr1``
    (in this thread) at each SIGUSR1 meanwhile."""
    done = threading.Event()
    asked = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    if on_usr1 is not None:
        signal.signal(signal.SIGUSR1, lambda *_: asked.set())
    while not done.wait(0.1):
        if asked.is_set():
            asked.clear()
            on_usr1()


def _write_decode_report(path: str, device: Any, batch: Any, snapshot: int) -> None:
    """Writes the decode worker's report to ``path`` whole (through a
    temporary file): the device connector's memory report and the batched
    decoder's counters (cumulative); with ``snapshot`` > 0 (the SIGUSR1 that
    asked for it, counted from 1) also ``snapshot``; 0 at exit."""
    report = device.memory() if device is not None else {}
    if batch is not None:
        report = {**report, "batch": dict(batch.stats)}
    if snapshot > 0:
        report["snapshot"] = snapshot
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.deterministic or args.check:
        deterministic()
    if args.decode_batch < 0 or args.decode_cache_mib < 1:
        raise SystemExit("--decode-batch must be >= 0 and --decode-cache-mib >= 1")
    if args.decode_batch and args.role != "decode":
        raise SystemExit("--decode-batch is for --role decode (a process of its own: the prefill "
                         "side's layer hooks would see the batch's steps)")
    model = load_model(args.model, args.device, args.seed)
    freeze_heap()
    batch = None
    if args.decode_batch:
        from kvserve.batching import BatchDecoder  # noqa: PLC0415

        batch = BatchDecoder(model, max_batch=args.decode_batch, cache_budget_bytes=args.decode_cache_mib << 20)
    engine = TransformersEngine(model, batch=batch)
    device = connector_for(engine, args.device_budget_mib << 20)
    if args.role == "prefill-server":
        table = kvserve.ProfileTable.load(args.table) if args.table else raw_table()
        store = kvpool.redis(args.pool_redis) if args.pool_redis else \
            kvpool.memory(args.pool_memory_mib << 20) if args.pool_memory_mib else None
        server = serve.PrefillWorker(engine, table, [args.address], listen=args.listen, secret=args.secret,
                                     link_bytes_per_second=kvserve.gbps_to_bytes_per_second(args.gbps),
                                     default_workload=args.workload, device=device, pool=store,
                                     pool_chunk_tokens=args.pool_chunk_tokens,
                                     max_decode_connections=args.max_decode_connections)
        _announce("prefill worker", server.address, args.address_file)
        _wait_for_signal()
        server.stop()
        return 0
    if args.role == "decode":
        pool = kvpool.remote(args.pool, secret=args.secret) if args.pool else None
        worker = serve.DecodeWorker(engine, listen=args.address, secret=args.secret, device=device, pool=pool)
        _announce("decode worker", worker.address, args.address_file)
        snapshots = [0]

        def snapshot() -> None:
            snapshots[0] += 1
            _write_decode_report(args.memory_file, device, batch, snapshots[0])

        _wait_for_signal(snapshot if args.memory_file else None)
        worker.stop()
        if args.memory_file:
            _write_decode_report(args.memory_file, device, batch, 0)
        if batch is not None:
            batch.close()
        return 0
    decode = None
    address = args.address
    if args.role == "both":
        decode = serve.DecodeWorker(engine, secret=args.secret, device=device)
        address = decode.address
    methods = [m for m in args.methods.split(",") if m]
    if "kvserve" in methods and not args.table:
        raise SystemExit("--methods kvserve needs --table")
    table = kvserve.ProfileTable.load(args.table) if args.table else raw_table()
    prefill = serve.PrefillWorker(engine, table, [address], secret=args.secret,
                                  link_bytes_per_second=kvserve.gbps_to_bytes_per_second(args.gbps),
                                  default_workload=args.workload, device=device)
    vocab = engine.vocab_size or 96
    rng = random.Random(args.seed)
    failures = 0
    request_id = 0
    generator = generation.Generator(model) if args.check else None
    for method in methods:
        for _ in range(args.requests):
            prompt = [rng.randrange(1, vocab) for _ in range(args.prompt_tokens)]
            r = prefill.serve(serve.request(request_id, prompt, max_new_tokens=args.new_tokens,
                                            method="adaptive" if method == "kvserve" else method,
                                            slo_seconds=args.slo, quality_min=args.quality_min))
            row = {"id": request_id, "method": method, "prompt_tokens": len(prompt), "ok": r["ok"],
                   "error": r["error"], "tokens": r["tokens"], **r["timings"]}
            if args.check and r["ok"] and kvserve.Profile(r["timings"]["profile"]).is_lossless:
                row["matches_single_process"] = reference_tokens(model, prompt, args.new_tokens,
                                                                 generator) == r["tokens"]
                failures += not row["matches_single_process"]
            failures += not r["ok"]
            print(json.dumps(row), flush=True)
            request_id += 1
    prefill.stop()
    if decode is not None:
        decode.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
