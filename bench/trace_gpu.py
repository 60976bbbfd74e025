"""Serving a production trace under load: two prefill workers and a
batching decode worker on one GPU (or the CPU, for the toy model), every KV
transfer through one shaped link, prefix hits from the pool, and the
goodput at a TTFT target per method, link rate and load (issue 43).

    PYTHONPATH=build/release/python python3 bench/trace_gpu.py --model llama-8b-random --device cuda \\
        --kvserve build/release/tools/kvserve/kvserve \\
        --trace ../shared/data/traces/mooncake-conversation.jsonl --gbps 25,5 --loads 0.5,1,2 \\
        --methods none,kivi-2,cachegen,kivi-4,kvserve --table configs/profiles/kvs-qwen2-9m-qa.json \\
        --workload qa --baseline-quality docs/results/quality \\
        --out-json docs/results/trace-gpu.json --out-md docs/trace-gpu.md --plot docs/results/plots/trace-gpu.png

This process holds the prefill side: the model, and per point two fresh
library prefill workers (their own controllers; one shared link, one
token bucket for both; one embedded pool) listening for the replayer. The
decode worker runs in its own process (``python -m kvserve.pd --role
decode --decode-batch N``: the decode steps of every admitted request run
together). The requests come from ``kvserve replay`` (the one replayer,
src/experiments/trace_replay.cc), which sends each at its arrival time
through the router to the two workers and records what it saw.

Per link rate: first the raw method's saturation rate (the window's
requests all at once: answered requests over the span), then per load
(a multiple of that rate; the window's arrivals scaled to it) every
method. ``best static`` is picked per point after the fact among the fixed
compressed methods run. With ``--pool-check`` the kvserve point at the
first load is replayed again with ``--no-pool``: the same requests
recomputed, against which the pool's hits are compared. The JSON is
written after every point; ``--append`` keeps the points of an earlier
run (points are keyed by rate, load and method), so several calls can
build one report. ``--render-only`` writes the report from the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

RAW = "none"
FIXED_EXCLUDED = (RAW, "kvserve")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/trace_gpu.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="tiny (toy, CPU), llama-8b-random, or a checkpoint")
    p.add_argument("--device", default="cpu", help="torch device of the prefill side (cpu, cuda, cuda:0)")
    p.add_argument("--decode-device", default="",
                   help="torch device of the decode process (default: --device; cuda:1 on a machine of "
                        "several GPUs puts prefill and decode on GPUs of their own)")
    p.add_argument("--kvserve", default="build/release/tools/kvserve/kvserve", help="the kvserve CLI (replay)")
    p.add_argument("--trace", default="../shared/data/traces/mooncake-conversation.jsonl")
    p.add_argument("--window-start", type=float, default=0.0, help="trace seconds where the window starts")
    p.add_argument("--window-seconds", type=float, default=30.0, help="trace seconds in the window")
    p.add_argument("--max-requests", type=int, default=24, help="requests of the window at most")
    p.add_argument("--spread-ticks", type=float, default=3.0,
                   help="the trace's clock tick, trace seconds: the requests of one timestamp arrive evenly "
                        "over it (the Mooncake trace stamps about ten requests at a time every 3 s); 0: at once")
    p.add_argument("--max-prompt-tokens", type=int, default=16384, help="cap on each prompt (0: the trace's)")
    p.add_argument("--max-output-tokens", type=int, default=32, help="cap on each output")
    p.add_argument("--gbps", default="25,5", help="link rates of the shared link, comma-separated")
    p.add_argument("--loads", default="0.5,1,2", help="offered load as multiples of raw's saturation rate")
    p.add_argument("--methods", default="none,kivi-2,cachegen,kvserve",
                   help="fixed profiles (none = raw) and kvserve (the controller)")
    p.add_argument("--table", default="configs/profiles/kvs-qwen2-9m-qa.json")
    p.add_argument("--workload", default="qa")
    p.add_argument("--baseline-quality", default="docs/results/quality",
                   help="recorded qualities of the fixed methods the table lacks (bench/pd_sweep.py)")
    p.add_argument("--candidates", default="kivi-2,cachegen",
                   help="profiles/presets kvserve's controller may choose from besides the table's rows the "
                        "codec runs and the fixed methods of --methods (with the qualities --baseline-quality "
                        "records), so that its choice does not depend on which fixed methods run beside it")
    p.add_argument("--quality-min", type=float, default=0.97)
    p.add_argument("--slo-base-s", type=float, default=1.0)
    p.add_argument("--slo-per-1k-s", type=float, default=0.1)
    p.add_argument("--workers", type=int, default=2, help="prefill workers")
    p.add_argument("--max-decode-connections", type=int, default=4,
                   help="requests per prefill worker generating at once")
    p.add_argument("--decode-batch", type=int, default=8, help="decode worker's batch rows at most")
    p.add_argument("--decode-cache-mib", type=int, default=8192, help="decode worker's cache per batch, MiB")
    p.add_argument("--pool-chunk-tokens", type=int, default=512)
    p.add_argument("--pool-mib", type=int, default=16384, help="embedded pool budget, MiB")
    p.add_argument("--pool-backend", choices=["memory", "redis"], default="memory",
                   help="the prefix pool: embedded in the prefill process, or Redis (a fresh key prefix "
                        "per point)")
    p.add_argument("--redis", default="",
                   help="--pool-backend redis: host:port of a running Redis; empty: start redis-server "
                        "(from PATH, or --redis-server) on a free port for the run")
    p.add_argument("--redis-server", default="redis-server", help="the redis-server binary to start")
    p.add_argument("--pool-history", type=float, default=600.0,
                   help="trace seconds before the window whose prefixes the pool holds at each point's start "
                        "(kvserve replay --pool-history: the prefixes the window shares with them are stored "
                        "first, under the point's method; 0 = an empty pool)")
    p.add_argument("--pool-check", action="store_true",
                   help="also replay kvserve's first-load point without the pool (hits vs recomputed)")
    p.add_argument("--warmup-requests", type=int, default=4,
                   help="before the first measurement, the window's first N requests at once (raw, not recorded): "
                        "the workers' first-use costs (CUDA graphs of the decode batch, allocator growth) stay out of "
                        "raw's saturation rate, which sets every load")
    p.add_argument("--calibration-tokens", type=int, default=4096)
    p.add_argument("--device-budget-mib", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--secret", default="trace-gpu")
    p.add_argument("--out-json", default="trace.json")
    p.add_argument("--out-md", default="")
    p.add_argument("--plot", default="", help="goodput against offered load per method (PNG)")
    p.add_argument("--kill-run", action="store_true",
                   help="after the points: a short replay (--kill-requests) through two prefill worker "
                        "processes, the second SIGKILLed --kill-after s in; every request must be answered")
    p.add_argument("--kill-requests", type=int, default=12)
    p.add_argument("--kill-after", type=float, default=2.0)
    p.add_argument("--kill-gbps", type=float, default=25.0, help="each kill-run worker's own link")
    p.add_argument("--append", action="store_true", help="keep the points of --out-json")
    p.add_argument("--render-only", action="store_true", help="write --out-md/--plot from --out-json")
    return p


# -- running ----------------------------------------------------------------


class GpuBusy:
    """Samples the GPU's utilisation (NVML through torch, else nvidia-smi)
    every ``period`` s between start() and stop(); ``share`` is the mean
    (0-1), None on the CPU or without a way to read it."""

    def __init__(self, device: str, period: float = 0.25) -> None:
        self.device, self.period = device, period
        self.samples: List[float] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _read(self) -> Optional[float]:
        try:
            import torch  # noqa: PLC0415

            return float(torch.cuda.utilization(torch.device(self.device))) / 100
        except Exception:  # noqa: BLE001 -- no pynvml: nvidia-smi
            pass
        try:
            index = self.device.split(":")[1] if ":" in self.device else "0"
            out = subprocess.run(["nvidia-smi", "-i", index, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=5)
            return float(out.stdout.strip()) / 100
        except Exception:  # noqa: BLE001
            return None

    def start(self) -> None:
        if not self.device.startswith("cuda"):
            return

        def loop() -> None:
            while not self._stop.wait(self.period):
                v = self._read()
                if v is not None:
                    self.samples.append(v)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> Optional[float]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return statistics.fmean(self.samples) if self.samples else None


def _replay(args: argparse.Namespace, addresses: Sequence[str], method: str, time_scale: float, out: str,
            vocab: int, use_pool: bool = True, max_requests: int = 0,
            spread_ticks: Optional[float] = None) -> Dict[str, Any]:
    """One ``kvserve replay`` of the window (its first ``max_requests``
    requests when given, else ``args.max_requests``; each tick's requests
    spread over ``spread_ticks`` s, else ``args.spread_ticks``); its summary
    and records."""
    cmd = [args.kvserve, "replay", "--trace", args.trace, "--prefill", ",".join(addresses),
           "--vocab", str(vocab), "--window-start", str(args.window_start), "--window-seconds", str(args.window_seconds),
           "--max-requests", str(max_requests or args.max_requests), "--time-scale", f"{time_scale:.6g}",
           "--spread-ticks", f"{args.spread_ticks if spread_ticks is None else spread_ticks:g}",
           "--max-output-tokens", str(args.max_output_tokens), "--max-prompt-tokens", str(args.max_prompt_tokens),
           "--pool-chunk-tokens", str(args.pool_chunk_tokens), "--seed", str(args.seed),
           "--method", "adaptive" if method == "kvserve" else method, "--workload", args.workload,
           "--quality-min", str(args.quality_min), "--slo-base-s", str(args.slo_base_s),
           "--slo-per-1k-s", str(args.slo_per_1k_s), "--out-json", out]
    if not use_pool:
        cmd.append("--no-pool")
    elif args.pool_history > 0:
        cmd += ["--pool-history", f"{args.pool_history:g}"]
    env = dict(os.environ, KVSERVE_SECRET=args.secret)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if not os.path.exists(out):
        raise RuntimeError(f"kvserve replay wrote nothing (exit {done.returncode}): {done.stderr[-3000:]}")
    with open(out) as f:
        report = json.load(f)
    report["exit"] = done.returncode
    report["stderr_tail"] = done.stderr[-2000:] if done.returncode else ""
    return report


def _keep(record: Dict[str, Any]) -> Dict[str, Any]:
    fields = ("id", "ok", "error", "prompt_tokens", "arrival_s", "ttft_s", "jct_s", "ttft_slo_s", "met_slo",
              "profile", "prefill_s", "queue_s", "kv_s", "pool_fetch_s", "decode_kv_s", "generation_s", "first_token_s",
              "send_delay_s", "connection_wait_s", "streamed", "kv_bytes",
              "frame_bytes", "prefix_hit", "prefix_chunks", "bandwidth_gbps", "link_transfers", "fair_share_gbps",
              "worker", "submissions")
    return {k: record[k] for k in fields if k in record}


def _window_rate(records: Sequence[Dict[str, Any]]) -> float:
    """The window's own arrival rate (requests per trace second)."""
    arrivals = sorted(r["arrival_s"] for r in records)
    span = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
    return (len(arrivals) - 1) / span if span > 0 else float(len(arrivals))


def run(args: argparse.Namespace, report: Dict[str, Any], save: Any,
        progress=lambda s: print(s, file=sys.stderr, flush=True)) -> None:
    import kvserve  # noqa: PLC0415
    from kvserve import pd, serve, transport  # noqa: PLC0415
    from kvserve import pool as kvpool  # noqa: PLC0415
    from kvserve.integration.transformers import TransformersEngine, freeze_heap, load_model  # noqa: PLC0415
    import pd_sweep  # noqa: PLC0415

    progress(f"loading {args.model} on {args.device}")
    model = load_model(args.model, args.device, args.seed)
    freeze_heap()
    engine = TransformersEngine(model)
    device = pd.connector_for(engine, args.device_budget_mib << 20)
    vocab = engine.vocab_size or 96
    prefill_side = {"engine": engine, "device": device}  # let go of before the kill run's processes start
    methods = [m for m in args.methods.split(",") if m]
    fixed = [m for m in methods if m != "kvserve"]
    import random  # noqa: PLC0415

    rng = random.Random(args.seed)
    kv = pd_sweep.prompt_kv(model, [rng.randrange(1, vocab) for _ in range(args.calibration_tokens)])
    table = kvserve.ProfileTable.load(args.table)
    if args.baseline_quality:
        table = pd_sweep.with_baselines(table, fixed + [c for c in args.candidates.split(",") if c],
                                        args.baseline_quality)
    table = pd_sweep.calibrate(table, kv, engine.info()["kv_dtype"])
    if "kvserve" in methods and all(c.spec == RAW for c in table.profiles):
        raise SystemExit("bench/trace_gpu.py: kvserve would have only raw to choose from (the table's rows are not "
                         f"ones the {args.device} codec runs, and --methods / --candidates add no compressed "
                         "profile with a recorded quality); pass --candidates or --baseline-quality")
    del kv, engine, device
    progress("calibrated: " + ", ".join(f"{c.spec} CR {c.compression_ratio:.2f}" for c in table.profiles))
    report["table"] = [{"spec": c.spec, "compression_ratio": c.compression_ratio,
                        "encode_gbps": c.encode_bytes_per_second * 8e-9, "decode_gbps": c.decode_bytes_per_second * 8e-9,
                        "quality": c.quality.get(args.workload)} for c in table.profiles]
    tmp = tempfile.mkdtemp(prefix="kvserve-trace-")
    memory_file = os.path.join(tmp, "decode-memory.json")
    decode_args = ["--decode-batch", str(args.decode_batch), "--decode-cache-mib", str(args.decode_cache_mib)]
    sweep_args = argparse.Namespace(model=args.model, device=args.decode_device or args.device, seed=args.seed,
                                    secret=args.secret,
                                    device_budget_mib=args.device_budget_mib, check=False)
    proc, decode_address, decode_log = pd_sweep.start_decode_process(sweep_args, tmp, memory_file, extra=decode_args)
    failures: List[str] = report.setdefault("failures", [])

    redis_address, redis_proc = args.redis, None
    if args.pool_backend == "redis" and not redis_address:
        redis_proc, redis_address = _start_redis(args.redis_server, tmp)
    # The first run's backend names the report's pool; a later --append run with another backend
    # adds its points beside (named "<load>/<method>@<backend>").
    report.setdefault("pool_backend", args.pool_backend + (f" ({redis_address})" if redis_address else ""))
    report.setdefault("pool_backends", {})[args.pool_backend] = args.pool_backend + (
        f" ({redis_address})" if redis_address else "")
    suffix = "" if args.pool_backend == "memory" else "@" + args.pool_backend
    points_run = [0]
    snapshots = [0]

    def decode_counters() -> Dict[str, Any]:
        """The decode process's batched-decode counters now (cumulative)."""
        snapshots[0] += 1
        return pd_sweep.decode_snapshot(proc, memory_file, snapshots[0]).get("batch", {})

    def new_pool() -> Any:
        """A pool holding nothing: a fresh embedded one, or a fresh key prefix in Redis."""
        points_run[0] += 1
        if args.pool_backend == "redis":
            return kvpool.redis(redis_address, key_prefix=f"kvserve-trace-{os.getpid()}-{points_run[0]}")
        return kvpool.memory(args.pool_mib << 20)

    def point(gbps: float, method: str, time_scale: float, use_pool: bool = True,
              requests: int = 0) -> Dict[str, Any]:
        """Fresh workers on a fresh shared link and pool; one replay (of the
        window's first ``requests`` requests when given)."""
        link = transport.SharedLink(gbps) if gbps > 0 else None
        store = new_pool()
        workers = [serve.PrefillWorker(prefill_side["engine"], table, [decode_address], secret=args.secret,
                                       device=prefill_side["device"],
                                       default_workload=args.workload, shared_link=link, pool=store,
                                       pool_chunk_tokens=args.pool_chunk_tokens,
                                       table_reference_tokens=args.calibration_tokens,
                                       max_decode_connections=args.max_decode_connections)
                   for _ in range(args.workers)]
        before = decode_counters()
        busy = GpuBusy(args.device)
        busy.start()
        decode_busy = GpuBusy(args.decode_device) if args.decode_device not in ("", args.device) else None
        if decode_busy is not None:
            decode_busy.start()
        try:
            out = _replay(args, [w.address for w in workers], method, time_scale,
                          os.path.join(tmp, "replay.json"), vocab, use_pool, max_requests=requests)
        finally:
            share = busy.stop()
            decode_share = decode_busy.stop() if decode_busy is not None else None
            for w in workers:
                w.stop()
        after = decode_counters()
        batch = {k: after[k] - before.get(k, 0) for k in ("steps", "row_steps", "step_seconds", "requests")
                 if k in after}
        s = out["summary"]
        records = [_keep(r) for r in out["records"]]
        for r in records:
            if r.get("ok") and method == "kvserve" and r.get("profile") not in ("", RAW, None):
                q = table.quality(table.index_of(r["profile"]), args.workload)
                r["quality"] = q
                if q < args.quality_min:
                    failures.append(f"{gbps} Gbps {method}: request {r['id']} sent {r['profile']} (quality {q})")
        if s.get("answered", 0) + s.get("failed", 0) != s.get("requests", 0):
            failures.append(f"{gbps} Gbps {method}: {s.get('requests')} requests, {s.get('answered')} answered, "
                            f"{s.get('failed')} failed: some were lost")
        if out["exit"] != 0 or s.get("failed", 0):
            failures.append(f"{gbps} Gbps {method} x{time_scale:.3g}: {s.get('failed')} failed: {out['stderr_tail']}")
        return {"gbps": gbps, "method": method, "time_scale": time_scale, "pool": use_pool,
                "pool_backend": args.pool_backend if use_pool else None, "pool_history": out.get("pool_history"),
                "pool_history_s": args.pool_history if use_pool else None, "gpu_busy": share,
                "decode_gpu_busy": decode_share,
                "decode_batch": batch, "summary": s, "records": records}

    try:
        if args.warmup_requests > 0:
            progress(f"warm-up: {args.warmup_requests} requests at once (raw, not recorded)")
            warm = point(0.0, RAW, 1e-3, requests=args.warmup_requests)
            report.setdefault("warmups", []).append({"requests": args.warmup_requests,
                                                     "summary": warm["summary"]})
        for gbps in [float(x) for x in args.gbps.split(",") if x]:
            key = f"{gbps:g}"
            rate = report["rates"].setdefault(key, {})
            if "saturation" not in rate:
                progress(f"{gbps:g} Gbps: raw's saturation rate (the window at once)")
                sat = point(gbps, RAW, 1e-3)
                s = sat["summary"]
                # Arrivals in the replay are trace seconds times the time scale.
                rate["saturation"] = {"rps": s["answered"] / s["span_s"] if s.get("span_s") else 0.0,
                                      "window_rps": _window_rate(sat["records"]) * sat["time_scale"],
                                      "gpu_busy": sat["gpu_busy"], "summary": s, "records": sat["records"]}
                save()
            sat_rps, window_rps = rate["saturation"]["rps"], rate["saturation"]["window_rps"]
            points = rate.setdefault("points", {})
            for load in [float(x) for x in args.loads.split(",") if x]:
                time_scale = window_rps / (load * sat_rps)
                for method in methods:
                    name = f"{load:g}/{method}{suffix}"
                    if name in points:
                        continue
                    progress(f"{gbps:g} Gbps, load x{load:g} ({load * sat_rps:.3g} req/s): {method}")
                    p = point(gbps, method, time_scale)
                    p["load"] = load
                    points[name] = p
                    s = p["summary"]
                    progress(f"  goodput {s['goodput_rps']:.3f} req/s, TTFT p50 {s['ttft_p50_s']:.3f} "
                             f"p99 {s['ttft_p99_s']:.3f} s, hits {s['prefix_hit_rate']:.2f}, busy {p['gpu_busy']}")
                    save()
                if args.pool_check and load == float(args.loads.split(",")[0]) and "kvserve" in methods \
                        and f"{load:g}/kvserve-no-pool" not in points:
                    p = point(gbps, "kvserve", time_scale, use_pool=False)
                    p["load"] = load
                    points[f"{load:g}/kvserve-no-pool"] = p
                    save()
        if args.kill_run and "kill" not in report:
            # This process's model and device memory go first: the kill run's two prefill
            # processes load a model each beside the decode process's.
            prefill_side.clear()
            del model
            import gc  # noqa: PLC0415

            gc.unfreeze()  # freeze_heap() put the model out of the collector's reach
            gc.collect()
            if args.device.startswith("cuda"):
                import torch  # noqa: PLC0415

                torch.cuda.empty_cache()
            progress(f"kill run: {args.kill_requests} requests, two prefill worker processes, the second "
                     f"SIGKILLed after {args.kill_after:g} s")
            report["kill"] = kill_run(args, decode_address, table, tmp, vocab, redis_address)
            k = report["kill"]["summary"]
            if k.get("answered") != k.get("requests"):
                failures.append(f"kill run: {k.get('answered')} of {k.get('requests')} answered")
            save()
    finally:
        memory: Dict[str, Any] = {}
        pd_sweep.stop_decode_process(proc, decode_log, memory_file, memory, "decode", failures)
        report["decode"] = memory.get("decode", {})
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)
        save()


def _start_redis(binary: str, tmp: str) -> tuple:
    """A redis-server on a free port of 127.0.0.1 (no persistence, its
    files in ``tmp``); (process, address) once it answers."""
    import socket  # noqa: PLC0415

    from kvserve import pool as kvpool  # noqa: PLC0415
    import kvserve  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            kvpool.redis(address, key_prefix="probe", reconnect_attempts=0).stats()
            return proc, address
        except kvserve.KvserveError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{binary} did not start on {address}")
            time.sleep(0.05)


def kill_run(args: argparse.Namespace, decode_address: str, table: Any, tmp: str, vocab: int,
             redis_address: str = "") -> Dict[str, Any]:
    """Two prefill workers as processes of their own (``python -m
    kvserve.pd --role prefill-server``, each its own model and link: a
    shared link is one process's), a replay of the window's first
    ``--kill-requests`` requests at the trace's own pace (a tick's requests
    at once: many in flight when the kill comes) with the
    controller choosing, and the second worker SIGKILLed ``--kill-after`` s
    after the replay starts. The router re-submits that worker's requests
    to the other; the replay's summary says how many (``rerouted``)."""
    import pd_sweep  # noqa: PLC0415

    table_path = os.path.join(tmp, "table.json")
    with open(table_path, "w") as f:
        f.write(table.to_json())
    procs = []
    try:
        addresses = []
        for i in range(2):
            address_file = os.path.join(tmp, f"prefill{i}.address")
            cmd = [sys.executable, "-m", "kvserve.pd", "--role", "prefill-server", "--model", args.model,
                   "--device", args.device, "--seed", str(args.seed), "--secret", args.secret,
                   "--address", decode_address, "--address-file", address_file, "--table", table_path,
                   "--workload", args.workload, "--gbps", str(args.kill_gbps),
                   "--max-decode-connections", str(args.max_decode_connections),
                   "--pool-chunk-tokens", str(args.pool_chunk_tokens),
                   *(["--pool-redis", redis_address] if redis_address else ["--pool-memory-mib", str(args.pool_mib)]),
                   "--device-budget-mib", str(args.device_budget_mib)]
            proc, address = pd_sweep.start_process(cmd, address_file, os.path.join(tmp, f"prefill{i}.log"),
                                                   f"prefill worker {i}")
            procs.append(proc)
            addresses.append(address)
        victim = procs[1]
        timer = threading.Timer(args.kill_after, victim.kill)
        timer.start()
        try:
            out = _replay(args, addresses, "kvserve", 1.0, os.path.join(tmp, "kill.json"), vocab,
                          max_requests=args.kill_requests, spread_ticks=0.0)
        finally:
            timer.cancel()
        killed = victim.poll() is not None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(120)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return {"requests": args.kill_requests, "kill_after_s": args.kill_after, "gbps": args.kill_gbps,
            "killed": killed, "exit": out["exit"], "summary": out["summary"],
            "records": [_keep(r) for r in out["records"]]}


# -- the report ---------------------------------------------------------------


def _main_pool(p: Dict[str, Any]) -> bool:
    """A point of the report's main comparison: with the pool, the first
    run's backend (points of a second backend sit beside, named
    ``<load>/<method>@<backend>``)."""
    return bool(p["pool"]) and p.get("pool_backend") in (None, "memory")


def best_static(points: Dict[str, Any], load: float) -> Optional[str]:
    """The fixed compressed method with the highest goodput at ``load``
    (ties: lower p99 TTFT)."""
    cands = [p for p in points.values() if p.get("load") == load and p["method"] not in FIXED_EXCLUDED and _main_pool(p)]
    if not cands:
        return None
    return max(cands, key=lambda p: (p["summary"]["goodput_rps"], -p["summary"]["ttft_p99_s"]))["method"]


def pool_effect(points: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Per load with a no-pool replay: the TTFT of kvserve's requests that
    hit the pool (each backend's point), against the same requests (same
    ids) recomputed."""
    out = []
    for name, p in points.items():
        if not name.endswith("/kvserve-no-pool"):
            continue
        off = {r["id"]: r for r in p["records"] if r.get("ok")}
        for pooled_name, pooled in sorted(points.items()):
            if pooled_name.split("@")[0] != f"{p['load']:g}/kvserve" or not pooled["pool"]:
                continue
            hits = [r for r in pooled["records"] if r.get("ok") and r.get("prefix_hit") and r["id"] in off]
            if hits:
                out.append({"gbps": p.get("gbps"), "load": p["load"], "hits": len(hits),
                            "backend": pooled.get("pool_backend") or "memory",
                            "prefix_chunks_mean": statistics.fmean(r.get("prefix_chunks", 0) for r in hits),
                            "ttft_hit_mean_s": statistics.fmean(r["ttft_s"] for r in hits),
                            "ttft_recomputed_mean_s": statistics.fmean(off[r["id"]]["ttft_s"] for r in hits)})
    return out


def checks(report: Dict[str, Any]) -> Dict[str, Any]:
    """Issue 43's criteria on the recorded points (None where a point is missing)."""
    rows = []
    for key, rate in sorted(report["rates"].items(), key=lambda kv: float(kv[0])):
        points = rate.get("points", {})
        for load in sorted({p["load"] for p in points.values()}):
            get = lambda m: points.get(f"{load:g}/{m}")  # noqa: E731
            kv, raw = get("kvserve"), get(RAW)
            best = best_static(points, load)
            if kv is None:
                continue
            g = kv["summary"]["goodput_rps"]
            row = {"gbps": float(key), "load": load, "kvserve_goodput": g, "best_static": best}
            if best:
                b = get(best)["summary"]
                row["vs_best_static"] = g / b["goodput_rps"] if b["goodput_rps"] else None
                row["p99_vs_best_static"] = kv["summary"]["ttft_p99_s"] / b["ttft_p99_s"] if b["ttft_p99_s"] else None
            if raw:
                row["vs_raw"] = g / raw["summary"]["goodput_rps"] if raw["summary"]["goodput_rps"] else None
            others = [p["summary"]["goodput_rps"] for n, p in points.items()
                      if p.get("load") == load and p["method"] != "kvserve" and _main_pool(p)]
            row["vs_best_other"] = g / max(others) if others and max(others) else None
            rows.append(row)
    return {"points": rows, "pool": [e for r in report["rates"].values() for e in pool_effect(r.get("points", {}))],
            "failures": len(report.get("failures", []))}


STAGES = (("queue_s", "queue"), ("connection_wait_s", "connection wait"),
          ("prefill_s", "prefill"), ("kv_s", "KV"), ("pool_fetch_s", "pool fetch"), ("decode_kv_s", "KV decode"),
          ("first_token_s", "first token"))


def _label(p: Dict[str, Any]) -> str:
    """A point's method, and its pool when not the main one."""
    if not p["pool"]:
        return p["method"] + ", no pool"
    return p["method"] + ("" if _main_pool(p) else f", {p['pool_backend']} pool")


def stage_table(report: Dict[str, Any]) -> List[str]:
    """Where the time to first token goes: per point, the mean of each stage
    the prefill worker timed over the answered requests ("-": not recorded
    by the run's build), and the share whose KV streamed during the prefill."""
    lines = ["## Where the time to first token goes", "",
             "Means over each point's answered requests, seconds (the stages overlap where the KV streams during "
             "the prefill; first token: the decode worker's call to its first token, the wait for a batch row "
             "and the KV's import included; the rest of the TTFT is messages between the workers).", "",
             "| Gbps | load | method | TTFT | " + " | ".join(label for _, label in STAGES) + " | streamed |",
             "|---:|---:|---|---:|" + "---:|" * len(STAGES) + "---:|"]
    for key, rate in sorted(report["rates"].items(), key=lambda kv: -float(kv[0])):
        for name, p in sorted(rate.get("points", {}).items(), key=lambda kv: (kv[1]["load"], kv[0])):
            ok = [r for r in p["records"] if r.get("ok")]
            if not ok:
                continue

            def mean(field: str) -> str:
                values = [r[field] for r in ok if field in r]
                return f"{statistics.fmean(values):.2f}" if values else "-"

            streamed = [r["streamed"] for r in ok if "streamed" in r]
            share = f"{sum(streamed) / len(streamed):.2f}" if streamed else "-"
            lines.append(f"| {float(key):g} | x{p['load']:g} | {_label(p)} | {mean('ttft_s')} | "
                         + " | ".join(mean(field) for field, _ in STAGES) + f" | {share} |")
    return lines + [""]


def _batch_cell(batch: Optional[Dict[str, Any]]) -> str:
    """A point's decode batching: the batch rows a decode step ran on average
    and the step's mean wall time; "-" for a point recorded without them."""
    if not batch or not batch.get("steps"):
        return "-"
    return f"{batch['row_steps'] / batch['steps']:.2f} ({1e3 * batch['step_seconds'] / batch['steps']:.0f})"


def markdown(report: Dict[str, Any]) -> str:
    a = report["args"]
    lines = ["# Serving a production trace on the GPU (issue 43)", "",
             f"Generated by `bench/trace_gpu.py` ({report['machine'].get('device', '')}; "
             f"{report['machine'].get('torch', '')}); its JSON: `{a['out_json']}`. Every number below is "
             "measured in the recorded run(s) named in the JSON's `runs`.", "",
             f"Trace: `{os.path.basename(a['trace'])}`, window {a['window_start']:g} s + {a['window_seconds']:g} s, "
             f"at most {a['max_requests']} requests"
             + (f" (the requests of one trace timestamp arriving evenly over its {a['spread_ticks']:g} s tick)"
                if a.get("spread_ticks") else " (the requests of one trace timestamp at once)")
             + f", prompts capped at {a['max_prompt_tokens']} tokens, outputs at "
             f"{a['max_output_tokens']}; TTFT target {a['slo_base_s']:g} s + {a['slo_per_1k_s']:g} s per 1K prompt "
             f"tokens; quality floor {a['quality_min']}. {a['workers']} prefill workers (one process, one model, "
             f"one shared link; {a['device']}), one decode worker ({a.get('decode_device') or a['device']}; "
             f"its own process, continuous batching of up to "
             f"{a['decode_batch']} requests), prefix pool: {report.get('pool_backend', 'memory')} "
             f"({a['pool_chunk_tokens']}-token chunks, "
             + (f"at each point's start holding what the trace's {a['pool_history']:g} s before the window "
                "stored: the prefixes the window's requests share with those earlier requests, sent first "
                "under the point's method and not recorded; the hits below are against that pool"
                if a.get("pool_history") else "empty at each point's start") + ")."
             + (f" Each call first replays the window's first {a['warmup_requests']} requests at once, raw and "
                "unrecorded (the workers' first-use costs)." if report.get("warmups") else "")
             + "".join(f" Points marked `{b} pool` ran with {text} as the pool instead (a later call), beside the "
                       "comparison, which uses the first." for b, text in sorted(report.get("pool_backends", {}).items())
                       if b != "memory"), ""]
    for key, rate in sorted(report["rates"].items(), key=lambda kv: -float(kv[0])):
        sat = rate.get("saturation")
        if not sat:
            continue
        pooled = sorted(n for n, p in rate.get("points", {}).items() if p.get("pool"))
        # Pool history on: the flag recorded (from this version), or what it sent (a run before that).
        empty = [n for n in pooled
                 if not rate["points"][n].get("pool_history_s") and not rate["points"][n].get("pool_history")]
        lines += [f"## {float(key):g} Gbps", "",
                  f"Raw's saturation rate: {sat['rps']:.3f} requests/s (the window's requests at once).", ""]
        if empty:
            which = "Every point here" if empty == pooled else "Points " + ", ".join(f"`{n}`" for n in empty) + ":"
            lines += [which + " recorded without a pool history (`--pool-history` 0, or an earlier call's, from "
                      "before the flag): the pool started empty.", ""]
        lines += ["| load | offered req/s | method | goodput req/s | TTFT mean / p50 / p99 s | JCT mean / p50 / p99 s "
                  "| KV MB/request | pool hits | GPU busy (prefill / decode GPU) | decode rows a step (ms a step) "
                  "| failed |",
                  "|---:|---:|---|---:|---|---|---:|---:|---:|---:|---:|"]
        points = rate.get("points", {})
        for name, p in sorted(points.items(), key=lambda kv: (kv[1]["load"], kv[0])):
            s = p["summary"]
            best = best_static(points, p["load"])
            label = _label(p) + (" (best static)" if p["method"] == best and _main_pool(p) else "")
            busy = f"{p['gpu_busy']:.2f}" if p.get("gpu_busy") is not None else "-"
            if p.get("decode_gpu_busy") is not None:
                busy += f" / {p['decode_gpu_busy']:.2f}"
            lines.append(f"| x{p['load']:g} | {s.get('offered_rps', 0):.3f} | {label} | {s['goodput_rps']:.3f} | "
                         f"{s['ttft_mean_s']:.2f} / {s['ttft_p50_s']:.2f} / {s['ttft_p99_s']:.2f} | "
                         f"{s['jct_mean_s']:.2f} / {s['jct_p50_s']:.2f} / {s['jct_p99_s']:.2f} | "
                         f"{s['kv_bytes_mean'] / 1e6:.1f} | {s['prefix_hit_rate']:.2f} | {busy} | "
                         f"{_batch_cell(p.get('decode_batch'))} | {s['failed']} |")
        lines.append("")
        shares = [(p["load"], p["summary"]) for p in points.values() if p["method"] == "kvserve" and _main_pool(p)]
        if shares:
            lines += ["The controller's bandwidth estimate at each decision against the link's rate divided by "
                      "the transfers on it then (1 = it estimates its fair share under contention):", ""]
            for load, s in sorted(shares, key=lambda x: x[0]):
                lines.append(f"- load x{load:g}: estimate / fair share p50 {s.get('estimate_vs_fair_share_p50', 0):.2f}, "
                             f"mean {s.get('estimate_vs_fair_share_mean', 0):.2f}; transfers on the link at a "
                             f"decision {s.get('link_transfers_mean', 0):.2f} on average")
            lines.append("")
    lines += stage_table(report)
    c = checks(report)
    lines += ["## Against issue 43's criteria", "",
              "| Gbps | load | kvserve goodput | best static | / best static | / raw | / best other | p99 TTFT / best static |",
              "|---:|---:|---:|---|---:|---:|---:|---:|"]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for r in c["points"]:
        lines.append(f"| {r['gbps']:g} | x{r['load']:g} | {r['kvserve_goodput']:.3f} | {r['best_static'] or '-'} | "
                     f"{fmt(r.get('vs_best_static'))} | {fmt(r.get('vs_raw'))} | {fmt(r.get('vs_best_other'))} | "
                     f"{fmt(r.get('p99_vs_best_static'))} |")
    if c["pool"]:
        lines += ["", "Pool hits against the same requests recomputed (kvserve, `--no-pool` replay):", ""]
        for e in c["pool"]:
            lines.append(f"- {e['gbps']:g} Gbps, load x{e['load']:g}, {e.get('backend', 'memory')} pool: {e['hits']} hits "
                         f"({e.get('prefix_chunks_mean', 0):.1f} chunks on average), TTFT {e['ttft_hit_mean_s']:.3f} s "
                         f"with the pool vs {e['ttft_recomputed_mean_s']:.3f} s recomputed")
    kill = report.get("kill")
    if kill:
        k = kill["summary"]
        lines += ["", f"Kill run: {kill['requests']} requests of the window at the trace's pace (each timestamp's "
                  "requests at once) through two "
                  f"prefill worker processes (each its own {kill['gbps']:g} Gbps link), the second SIGKILLed "
                  f"{kill['kill_after_s']:g} s in ({'killed' if kill['killed'] else 'it had already exited'}): "
                  f"{k['answered']} answered, {k['failed']} failed, {k['rerouted']} re-routed to the live "
                  f"worker (served per worker: {k.get('served_per_worker')})."]
    lines += ["", f"Failures recorded: {c['failures']}."]
    for f in report.get("failures", [])[:20]:
        lines.append(f"- {f}")
    if report.get("decode", {}).get("batch"):
        b = report["decode"]["batch"]
        lines += ["", f"Decode batching over the last call's whole decode process (every point, warm-up and "
                  f"saturation run): {b['requests']} requests in {b['steps']} "
                  f"steps, {b['row_steps'] / max(1, b['steps']):.2f} rows a step on average, {b['most_rows']} at most."]
    if a.get("plot"):
        lines += ["", f"![goodput against offered load]({os.path.relpath(a['plot'], os.path.dirname(a['out_md']) or '.')})"]
    return "\n".join(lines) + "\n"


def plot(report: Dict[str, Any], path: str) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    rates = sorted(report["rates"].items(), key=lambda kv: -float(kv[0]))
    fig, axes = plt.subplots(1, max(1, len(rates)), figsize=(6 * max(1, len(rates)), 4), squeeze=False)
    for ax, (key, rate) in zip(axes[0], rates):
        by_method: Dict[str, List[tuple]] = {}
        for p in rate.get("points", {}).values():
            if _main_pool(p):
                by_method.setdefault(p["method"], []).append((p["summary"].get("offered_rps", 0), p["summary"]["goodput_rps"]))
        for method, xy in sorted(by_method.items()):
            xy.sort()
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=method)
        ax.set_title(f"{float(key):g} Gbps")
        ax.set_xlabel("offered load (requests/s)")
        ax.set_ylabel("goodput (requests/s meeting the TTFT target)")
        ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=100)


def _machine(device: str) -> Dict[str, Any]:
    m: Dict[str, Any] = {"host": platform.node(), "cpus": os.cpu_count()}
    try:
        import torch  # noqa: PLC0415

        m["torch"] = f"torch {torch.__version__}"
        if device.startswith("cuda"):
            m["device"] = torch.cuda.get_device_name(torch.device(device))
        else:
            m["device"] = f"CPU ({os.cpu_count()} cores)"
    except ImportError:
        pass
    return m


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.render_only:
        with open(args.out_json) as f:
            report = json.load(f)
        report["args"]["out_json"] = args.out_json  # where the report's JSON now is
    else:
        report: Dict[str, Any] = {"rates": {}, "runs": []}
        if args.append and os.path.exists(args.out_json):
            with open(args.out_json) as f:
                report = json.load(f)
        report["args"] = vars(args)
        report["machine"] = _machine(args.device)
        report["runs"].append({"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                               "argv": list(argv if argv is not None else sys.argv[1:]), "machine": report["machine"]})

        def save() -> None:
            os.makedirs(os.path.dirname(args.out_json) or ".", exist_ok=True)
            with open(args.out_json + ".tmp", "w") as f:
                json.dump(report, f, indent=1)
            os.replace(args.out_json + ".tmp", args.out_json)

        run(args, report, save)
        report["checks"] = checks(report)
        save()
    if args.out_md:
        report["args"]["out_md"] = args.out_md
        if args.plot:
            report["args"]["plot"] = args.plot
            plot(report, args.plot)
        with open(args.out_md, "w") as f:
            f.write(markdown(report))
    return 1 if report.get("failures") else 0


if __name__ == "__main__":
    sys.exit(main())
