"""The prefill/decode benchmark on kvserve's serving core: a sweep of prompt
sizes, link rates and methods through the library's workers around a
transformers model (kvserve.integration.transformers), with a report.

    PYTHONPATH=build/release/python python3 bench/pd_sweep.py --model llama-8b-random --device cuda \\
        --prompt-tokens 8192,32768,65536 --gbps 0,25,5 \\
        --table configs/profiles/kvs-qwen2-9m-unified.json --workload unified \\
        --out-json docs/results/e2e-gpu.json --out-md docs/e2e-gpu.md

The decode worker runs in its own process (``python -m kvserve.pd --role
decode``, same device); this process holds the prefill worker (the
library's PrefillWorker; this script only submits requests and reads their
timings). Per link rate the prefill worker's decode link is re-shaped
(0: unshaped loopback); before the first point, unrecorded warm-up requests
(every prompt size with every profile a request may use) and two short
requests per profile that measure its fixed per-request overhead t0; then
per point one unrecorded ``--warmup-method`` request and ``--requests``
rounds: in a round every method serves the same prompt, in an order
rotated per round. Methods: fixed profiles (``none`` is raw),
``best-static`` (per point, the fixed method with the lowest mean JCT,
picked after the fact) and ``kvserve`` (the controller per request, from
the measured bandwidth, ``--slo`` and ``--quality-min``, with the table's
CR and codec speeds re-measured on this model's KV by the codec the
workers run).

Device memory: each side's device connector reports the most device
memory one transfer's ring held (``--device-budget-mib``); the report also
gives the prefill process's device memory outside torch's allocator (the
CUDA context, libraries and kvserve) before the first transfer and after
the last -- per process with NVML (pynvml), otherwise device-wide, which
then includes the decode process sharing the GPU; the report says which.

Everything in the report is measured in this run; the prediction columns
are the controller's latency model for the choices it made.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import kvserve
from kvserve import hf, pd, profiling, serve
from kvserve import pool as kvpool
from kvserve.integration.transformers import TransformersEngine, freeze_heap, last_logits_only, load_model, new_cache

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loopback import transport_frames_gbps, transport_loopback_gbps  # noqa: E402

RAW = pd.RAW_SPEC
GPU_CODECS = ("pack", "rans")
PAPER_FIGURES = ("The paper, for comparison (vLLM, A100/H100-class GPUs, its own profiles): up to 9.13× JCT "
                 "speedup in PD-separated serving (HotpotQA) and up to 3.15× on bandwidth-constrained prefill "
                 "hardware (§7.2); in its artifact, Llama-8B at 5 Gbps goes from 9520 ms to 1695 ms (5.6×), "
                 "and the gain shrinks to about 1.07× at 100 Gbps.")


def outside_torch_bytes(device: str) -> Optional[Dict[str, Any]]:
    """Device memory outside this process's torch caching allocator (CUDA
    context, libraries, kvserve's rings): {"bytes", "scope"}. With NVML
    (pynvml) the scope is "process": this process's own use less torch's
    reserved; without it "device": everything in use on the GPU (other
    processes such as the decode worker included) less torch's reserved."""
    import torch  # noqa: PLC0415

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    dev = torch.device(device)
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved(dev)
    try:
        import pynvml  # noqa: PLC0415

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(dev.index or 0)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                return {"bytes": int(proc.usedGpuMemory - reserved), "scope": "process"}
    except Exception:  # noqa: BLE001 - no NVML (or no per-process accounting): fall back to the device
        pass
    free, total = torch.cuda.mem_get_info(dev)
    return {"bytes": int(total - free - reserved), "scope": "device"}


def _outside_torch_text(runs: Sequence[Dict[str, Any]]) -> str:
    """Report sentence for the memory outside torch's allocator, per device
    call; a number from a report written before the scope was recorded is an
    int measured device-wide."""
    parts = []
    for i, r in enumerate(runs):
        before, after = r.get("prefill_outside_torch_before"), r.get("prefill_outside_torch_after")
        if before is None and after is None:
            continue
        norm = [v if isinstance(v, dict) or v is None else {"bytes": v, "scope": "device"} for v in (before, after)]
        scope = next((v["scope"] for v in norm if v), "device")
        where = ("in the prefill process" if scope == "process" else
                 "on the whole GPU (the decode process, its weights and cache included), beyond the prefill "
                 "process's torch allocator")
        mib = [f"{(v['bytes'] if v else 0) / 2**20:.0f} MiB" for v in norm]
        call = f"device call {i + 1}, " if len(runs) > 1 else ""
        parts.append(f"{call}{where}: {mib[0]} before the first transfer, {mib[1]} after the last")
    if not parts:
        return ""
    return " Device memory outside torch's allocator, " + "; ".join(parts) + "."


def start_decode_process(args: argparse.Namespace, tmp: str, memory_file: str, timeout: float = 900.0,
                         pool: str = "", name: str = "decode", extra: Sequence[str] = ()) -> tuple:
    """Starts ``python -m kvserve.pd --role decode`` (with ``--pool pool``
    when given: it then fetches prefix hits from that pool server itself;
    ``extra``: more of its flags, e.g. ``--decode-batch 8``)
    with its address file and log ``name``.* in the directory ``tmp`` (the
    caller removes it) and returns (process, address, log path) once it
    listens; RuntimeError with its log when it exits first or does not
    listen within ``timeout`` s."""
    address_file = os.path.join(tmp, name + ".address")
    log_path = os.path.join(tmp, name + ".log")
    cmd = [sys.executable, "-m", "kvserve.pd", "--role", "decode", "--model", args.model, "--device", args.device,
           "--address", "127.0.0.1:0", "--address-file", address_file, "--seed", str(args.seed),
           "--secret", args.secret, "--device-budget-mib", str(args.device_budget_mib),
           "--memory-file", memory_file]
    if pool:
        cmd += ["--pool", pool]
    cmd += list(extra)
    if args.check:
        cmd += ["--deterministic"]
    proc, address = start_process(cmd, address_file, log_path, "decode worker", timeout)
    return proc, address, log_path


def start_process(cmd: Sequence[str], address_file: str, log_path: str, what: str = "worker",
                  timeout: float = 900.0) -> tuple:
    """Starts ``cmd`` (a worker that writes its address to
    ``address_file``; output to ``log_path``); (process, address) once it
    listens; RuntimeError with its log when it exits first or does not
    listen within ``timeout`` s."""
    log = open(log_path, "w+")
    proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while not os.path.exists(address_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log.seek(0)
            raise RuntimeError(f"{what} did not start: " + log.read()[-4000:])
        time.sleep(0.1)
    with open(address_file) as f:
        return proc, f.read().strip()


def decode_snapshot(proc: Any, memory_file: str, number: int, timeout: float = 30.0) -> Dict[str, Any]:
    """The report of a running process of start_decode_process, asked for
    by SIGUSR1 (its ``number``-th: the process counts them from 1): its
    memory report and batched-decode counters (cumulative) now; {} when it
    does not write one within ``timeout`` s (e.g. it has exited)."""
    proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(memory_file) as f:
                report = json.load(f)
            if report.get("snapshot") == number:
                return report
        except (OSError, ValueError):
            pass  # not written yet
        time.sleep(0.05)
    return {}


def stop_decode_process(proc: Any, log_path: str, memory_file: str, memory: Dict[str, Any], key: str,
                        failures: List[str]) -> None:
    """Stops a process of start_decode_process: its memory report goes to
    ``memory[key]``, an exit other than by the signal to ``failures``."""
    proc.terminate()
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
    if os.path.exists(memory_file):
        with open(memory_file) as f:
            memory[key] = json.load(f)
    with open(log_path) as f:
        tail = f.read()[-2000:]
    if proc.returncode not in (0, None, -15):
        failures.append(f"{key} worker exited with {proc.returncode}: {tail}")


def prompt_kv(model: Any, ids: Sequence[int]) -> Any:
    """The 5-D KV (on the model's device) of a prefill of ``ids``."""
    import torch  # noqa: PLC0415

    device = next(model.parameters()).device
    with torch.no_grad():
        cache = new_cache(model)
        model(input_ids=torch.tensor([list(ids)], device=device), past_key_values=cache, use_cache=True,
              **last_logits_only(model))
    return torch.stack([torch.stack([k[0], v[0]]) for k, v in hf.cache_layers(cache)])


def calibrate(table: Any, kv: Any, dtype: str, *, repeats: int = 3, cpu_tokens: int = 512) -> Any:
    """The table with every row's CR and codec speeds measured again on
    ``kv`` by the codec the workers run for that row, qualities kept: for a
    CUDA ``kv`` the GPU codec (fastest of ``repeats``); rows it does not run
    (zstd, lz4) are dropped (a GPU engine's workers leave them out); for a
    CPU ``kv`` the CPU codec (one thread) on its first ``cpu_tokens``
    tokens."""
    on_gpu = kvserve.cuda.is_cuda(kv)
    meter = profiling._cuda_meter(kv, None, repeats, []) if on_gpu else None
    host = None if on_gpu else kv[:, :, :, :cpu_tokens].contiguous()
    rows = []
    for cost in table.profiles:
        if cost.spec == RAW:
            continue
        profile = kvserve.Profile(cost.spec)
        try:
            if on_gpu:
                if profile.codec not in GPU_CODECS:
                    continue
                cr, enc, dec = meter(profile)
            else:
                m = kvserve.measure_codec(profile, host, dtype, None)
                cr, enc, dec = m["compression_ratio"], m["encode_bytes_per_second"], m["decode_bytes_per_second"]
        except kvserve.KvserveError:
            continue
        rows.append(kvserve.ProfileCost(cost.spec, cr, enc, dec, 0.0, dict(cost.quality)))
    return kvserve.ProfileTable.from_rows(rows, list(table.workloads))


def with_baselines(table: Any, methods: Sequence[str], quality_dir: str) -> Any:
    """``table`` plus a row for every fixed method of ``methods`` it lacks
    (raw aside), with the relative qualities ``kvserve quality`` recorded in
    ``quality_dir/<workload>.json`` (docs/results/quality); a workload
    without a file (a mix such as ``unified``) gets the mean over the table's
    other workloads when all of those were found. A method with no recorded
    quality is not added. CR and speeds are placeholders here:
    :func:`calibrate` measures them."""
    recorded: Dict[str, Dict[str, float]] = {}
    for w in table.workloads:
        path = os.path.join(quality_dir, f"{w}.json")
        if os.path.exists(path):
            with open(path) as f:
                recorded[w] = {str(kvserve.Profile(r["profile"])): float(r["relative"]) for r in json.load(f)}
    have = {str(kvserve.Profile(c.spec)) for c in table.profiles}
    rows = [c for c in table.profiles if c.spec != RAW]
    for method in methods:
        spec = str(kvserve.Profile(method))
        if method in ("kvserve", "best-static", RAW) or spec in have or kvserve.Profile(spec).is_lossless:
            continue
        quality = {w: q[spec] for w, q in recorded.items() if spec in q}
        if not quality:
            continue
        for w in table.workloads:
            parts = [x for x in table.workloads if x != w]
            if w not in quality and parts and all(x in quality for x in parts):
                quality[w] = statistics.fmean(quality[x] for x in parts)
        rows.append(kvserve.ProfileCost(spec, 1.0, 1.0, 1.0, 0.0, quality))
        have.add(spec)
    return kvserve.ProfileTable.from_rows(rows, list(table.workloads))


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in [0, 100])."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def summarize(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Mean / p50 / p99 of JCT and TTFT and mean stage times of ``rows``."""
    jct = [r["jct_seconds"] for r in rows]
    ttft = [r["ttft_seconds"] for r in rows]
    out = {"requests": len(rows), "jct_mean": statistics.fmean(jct), "jct_p50": percentile(jct, 50),
           "jct_p99": percentile(jct, 99), "ttft_mean": statistics.fmean(ttft), "ttft_p50": percentile(ttft, 50),
           "ttft_p99": percentile(ttft, 99)}
    for k in ("prefill_seconds", "encode_seconds", "kv_seconds", "transfer_seconds", "decode_kv_seconds",
              "generation_seconds", "frame_bytes", "kv_bytes"):
        out[k] = statistics.fmean(r[k] for r in rows)
    out["codec_share"] = (statistics.fmean(r["encode_seconds"] + r["decode_kv_seconds"] for r in rows)
                          / out["jct_mean"]) if out["jct_mean"] > 0 else 0.0
    profiles: Dict[str, int] = {}
    for r in rows:
        profiles[r["profile"]] = profiles.get(r["profile"], 0) + 1
    out["profiles"] = profiles
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/pd_sweep.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="as kvserve.pd: tiny, llama-8b-random or a checkpoint")
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompt-tokens", default="256,1024", help="comma-separated prompt sizes")
    p.add_argument("--gbps", default="1,0", help="comma-separated link rates, Gbit/s; 0 = unshaped loopback; empty: no sweep "
                        "(e.g. the pool phase alone, appended to an earlier report)")
    p.add_argument("--methods", default="none,kivi-2,cachegen,kvserve",
                   help="fixed profiles/presets and 'kvserve'; best-static is derived from the fixed ones")
    p.add_argument("--table", help="profile table for the controller (qualities per workload); required unless "
                        "--render-only")
    p.add_argument("--workload", default="unified", help="workload of the table")
    p.add_argument("--baseline-quality", default="",
                   help="directory of `kvserve quality` results (docs/results/quality): the fixed methods the "
                        "table lacks join the controller's candidates with the qualities recorded there")
    p.add_argument("--candidates", default="",
                   help="more profiles/presets the controller may choose from (not swept), with the qualities "
                        "--baseline-quality records for them")
    p.add_argument("--quality-min", type=float, default=0.97)
    p.add_argument("--slo", type=float, default=float("inf"), help="prefill + KV time budget per request, s")
    p.add_argument("--requests", type=int, default=3,
                   help="rounds per point: in a round every method serves the same prompt, in rotated order")
    p.add_argument("--warmup-method", default="kivi-2",
                   help="profile of the unrecorded request sent before each point's rounds")
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--pool-tokens", default="",
                   help="prompt sizes of the prefix-pool phase (comma-separated; empty: no pool phase)")
    p.add_argument("--pool-gbps", default="5", help="rates of the pool server's link, Gbit/s (comma-separated)")
    p.add_argument("--pool-requests", type=int, default=2, help="requests per pool point and source")
    p.add_argument("--calibration-tokens", type=int, default=0,
                   help="prompt size the codec speeds are measured on (0: the smallest prompt size)")
    p.add_argument("--device-budget-mib", type=int, default=64, help="device memory per transfer, MiB")
    p.add_argument("--secret", default="kvserve-bench", help="connection secret (both processes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-json", help="write every request and the summary here (also after every point)")
    p.add_argument("--out-md", help="write the markdown report here")
    p.add_argument("--append", action="store_true",
                   help="keep the points already in --out-json (earlier device calls) and add this run's")
    p.add_argument("--render-only", action="store_true",
                   help="run nothing: rewrite --out-md, and the checks in --out-json, from the report already in --out-json (after a change to "
                        "the report's wording)")
    p.add_argument("--check", action="store_true",
                   help="compare the tokens of the first lossless request per point with a single-process "
                        "run, and exit 1 on a difference or a failed request (whether issue 41's criteria hold "
                        "is the report's last line)")
    return p


def run(args: argparse.Namespace, progress=lambda s: print(s, file=sys.stderr, flush=True),
        on_partial: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """Runs the sweep described by ``args``; returns the report dict."""
    sizes = [int(x) for x in args.prompt_tokens.split(",") if x]
    rates = [float(x) for x in args.gbps.split(",") if x]
    methods = [m for m in args.methods.split(",") if m]
    fixed = [m for m in methods if m not in ("kvserve", "best-static")]
    started = time.time()
    if args.check:
        pd.deterministic()
    progress(f"loading {args.model} on {args.device}")
    model = load_model(args.model, args.device, args.seed)
    freeze_heap()
    engine = TransformersEngine(model)
    layers = engine.layers
    memory: Dict[str, Any] = {"budget_bytes": args.device_budget_mib << 20,
                              "prefill_outside_torch_before": outside_torch_bytes(args.device)}
    device = pd.connector_for(engine, args.device_budget_mib << 20)
    calib_tokens = args.calibration_tokens or min(sizes)
    rng = random.Random(args.seed)
    vocab = engine.vocab_size or 96
    kv = prompt_kv(model, [rng.randrange(1, vocab) for _ in range(calib_tokens)])
    dtype = engine.info()["kv_dtype"]
    table = kvserve.ProfileTable.load(args.table)
    if args.baseline_quality:
        table = with_baselines(table, fixed + [c for c in args.candidates.split(",") if c], args.baseline_quality)
    table = calibrate(table, kv, dtype)
    loopback_reference = transport_loopback_gbps(kvserve.encode(kv.cpu(), RAW), args.secret)
    del kv
    progress(f"calibrated {len(table)} profiles on {calib_tokens} tokens of KV ({dtype}): "
             + ", ".join(f"{c.spec} CR {c.compression_ratio:.2f}" for c in table.profiles))
    progress(f"kvserve's TCP transport alone over loopback: {loopback_reference:.1f} Gbps")
    tmp = tempfile.mkdtemp(prefix="kvserve-pd-")
    memory_file = os.path.join(tmp, "decode-memory.json")
    try:
        proc, address, decode_log = start_decode_process(args, tmp, memory_file)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    rows: List[Dict[str, Any]] = []
    pool_rows: List[Dict[str, Any]] = []
    failures: List[str] = []
    request_id = 0
    checked: set = set()
    reference_generator = None
    options = dict(secret=args.secret, default_workload=args.workload, device=device, epsilon=0.0,
                   table_reference_tokens=calib_tokens)
    worker = serve.PrefillWorker(engine, table, [address], **options)

    def submit(method: str, prompt: List[int], **kw: Any) -> Dict[str, Any]:
        nonlocal request_id
        r = worker.serve(serve.request(request_id, prompt, max_new_tokens=args.new_tokens,
                                       method="adaptive" if method == "kvserve" else method,
                                       quality_min=args.quality_min,
                                       slo_seconds=None if args.slo == float("inf") else args.slo, **kw))
        request_id += 1
        if not r["ok"]:
            failures.append(f"request {r['id']} ({method}): {r['error']}")
        return r

    def one(gbps: float, tokens: int, method: str, phase: str, prompt: List[int], round_: int) -> Dict[str, Any]:
        nonlocal reference_generator
        r = submit(method, prompt)
        row = {"id": r["id"], "method": method, "prompt_tokens": tokens, "gbps": gbps, "phase": phase,
               "round": round_, "ok": r["ok"], "error": r["error"], **r["timings"]}
        if method == "kvserve" and r["ok"]:
            spec = row["profile"]
            row["quality"] = table.quality(table.index_of(spec), args.workload) if spec != RAW else 1.0
            if row["quality"] < args.quality_min:
                failures.append(f"request {r['id']}: {spec} quality {row['quality']} < floor")
        point = (gbps, tokens, str(kvserve.Profile(row["profile"] or RAW)))
        if args.check and r["ok"] and kvserve.Profile(row["profile"]).is_lossless and point not in checked:
            checked.add(point)
            if reference_generator is None:
                from kvserve import generation  # noqa: PLC0415

                reference_generator = generation.Generator(model)
            row["matches_single_process"] = (pd.reference_tokens(model, prompt, args.new_tokens, reference_generator)
                                             == r["tokens"])
            # The reference's static cache and graph pool (8.7 GB at 64K tokens of an 8B model) and the
            # prefill process's unused cached blocks go back to the GPU the decode process shares.
            reference_generator.release()
            if not row["matches_single_process"]:
                failures.append(f"request {r['id']}: {row['profile']} tokens differ from a single-process run")
        rows.append(row)
        return row

    def build(partial: bool) -> Dict[str, Any]:
        report = _report(args, rates, sizes, fixed, table, layers, calib_tokens, started, rows, failures, partial)
        report.update({"transport_loopback_gbps": loopback_reference, "pool_rows": pool_rows, "memory": memory})
        return report

    sweep_methods = fixed + (["kvserve"] if "kvserve" in methods else [])
    try:
        # Unrecorded warm-up on the first link: every size with every profile
        # a request may use (plans, rings, kernels, allocations), raw first.
        worker.set_link_rate(kvserve.gbps_to_bytes_per_second(rates[0] if rates else 0.0))
        specs = [RAW] + [m for m in fixed if m != RAW] + [c.spec for c in table.profiles if c.spec not in fixed]
        for tokens in sorted(set(sizes) | {calib_tokens}, reverse=True):
            for spec in specs:
                submit(spec, [1] * tokens)
        table = measure_overheads(worker, table, calib_tokens, layers, submit, args)
        progress("per-request overheads: " + ", ".join(f"{c.spec} {c.overhead_seconds * 1e3:.1f} ms"
                                                       for c in table.profiles))
        worker.stop()
        worker = serve.PrefillWorker(engine, table, [address], **options)
        failures.clear()  # warm-up failures say nothing about the sweep
        for gbps in rates:
            worker.set_link_rate(kvserve.gbps_to_bytes_per_second(gbps))
            # The new link's first sample: a raw transfer of at most the calibration size
            # (a gigabyte at 8K tokens is plenty for the estimator; a 128K one would take
            # half a minute at 5 Gbps).
            submit(RAW, [1] * min(min(sizes), calib_tokens))
            for tokens in sizes:
                submit(args.warmup_method, [1] * tokens)
                point_start = time.monotonic()
                for round_ in range(args.requests):
                    prompt = [rng.randrange(1, vocab) for _ in range(tokens)]
                    k = round_ % len(sweep_methods)
                    for method in sweep_methods[k:] + sweep_methods[:k]:
                        one(gbps, tokens, method, "sweep", prompt, round_)
                progress(f"{gbps:g} Gbps, {tokens} tokens: {args.requests} rounds in "
                         f"{time.monotonic() - point_start:.1f} s ({time.time() - started:.0f} s since start)")
                if on_partial is not None:
                    on_partial(build(partial=True))
        if args.pool_tokens:
            worker.stop()
            # The pool phase runs decode processes of its own: this one's GPU memory goes back first.
            stop_decode_process(proc, decode_log, memory_file, memory, "decode", failures)
            proc = None
            pool_rows.extend(pool_phase(args, engine, table, device, options, rng, vocab, progress, tmp, memory,
                                        failures))
    finally:
        worker.stop()
        if device is not None:
            memory["prefill_connector"] = device.memory()
        memory["prefill_outside_torch_after"] = outside_torch_bytes(args.device)
        if proc is not None:
            stop_decode_process(proc, decode_log, memory_file, memory, "decode", failures)
        shutil.rmtree(tmp, ignore_errors=True)
    return build(partial=False)


def measure_overheads(worker: Any, table: Any, tokens: int, layers: int, submit: Callable[..., Dict[str, Any]],
                      args: argparse.Namespace) -> Any:
    """The table with every row's fixed per-request overhead t0 measured
    through the worker (unrecorded requests of ``tokens`` tokens, the
    second of two per profile): the KV time the bandit is told minus the
    streamed model's prediction at the worker's bandwidth estimate with the
    request's prefill as the source, clamped at 0."""
    rows = []
    for cost in table.profiles:
        if cost.spec == RAW:
            continue
        for _ in range(2):
            t = submit(cost.spec, [1] * tokens)["timings"]
        predicted = kvserve.predict_seconds(cost, t["kv_bytes"], worker.bandwidth_estimate, "streamed", layers,
                                            source_seconds=t["prefill_seconds"])
        rows.append(kvserve.ProfileCost(cost.spec, cost.compression_ratio, cost.encode_bytes_per_second,
                                        cost.decode_bytes_per_second, max(0.0, t["kv_seconds"] - predicted),
                                        dict(cost.quality)))
    return kvserve.ProfileTable.from_rows(rows, list(table.workloads))


def pool_phase(args: argparse.Namespace, engine: Any, table: Any, device: Any, options: Dict[str, Any],
               rng: random.Random, vocab: int, progress: Callable[[str], None], tmp: str, memory: Dict[str, Any],
               failures: List[str]) -> List[Dict[str, Any]]:
    """Prefix-pool hits against recompute. A pool server in this process
    (memory backend) sends over a link shaped to each ``--pool-gbps``; the
    prefill worker's pool is a client of it (chunks of 512 tokens, stored
    under the profile the controller picks for that link at the pool
    phase's first request), and so is the decode worker's, a process of its
    own per rate (``--pool``), which fetches a hit's chunks from the pool
    straight into its cache (its memory report in ``memory``,
    ``decode-pool-<rate>``). Per point and request, one prompt is stored
    (a miss), then served from the pool (``pool``: forced), recomputed
    (``recompute``: the pool not asked) and as kvserve's pool path chooses
    (``kvserve``). The references, in the same run: the same frames
    fetched with the pool client alone, and sent by kvserve's transport
    alone, one after another over one connection shaped to the same rate."""
    out: List[Dict[str, Any]] = []
    sizes = [int(x) for x in args.pool_tokens.split(",") if x]
    for gbps in [float(x) for x in args.pool_gbps.split(",") if x]:
        server = kvpool.serve(kvpool.memory(budget_bytes=64 << 30), "127.0.0.1:0", secret=args.secret,
                              shape_gbps=gbps)
        client = kvpool.remote(server.address, secret=args.secret)
        name = f"decode-pool-{gbps:g}"
        memory_file = os.path.join(tmp, name + "-memory.json")
        try:
            proc, address, log_path = start_decode_process(args, tmp, memory_file, pool=server.address, name=name)
        except BaseException:
            server.stop()
            raise
        worker = serve.PrefillWorker(engine, table, [address], pool=client, pool_chunk_tokens=512,
                                     model_id=args.model, **options)
        request_id = 1 << 40
        try:
            for tokens in sizes:
                probe = worker.serve(serve.request(request_id, [1] * tokens, max_new_tokens=1,
                                                   quality_min=args.quality_min))
                spec = probe["timings"]["profile"] or RAW
                request_id += 1
                for i in range(args.pool_requests):
                    prompt = [rng.randrange(1, vocab) for _ in range(tokens)]
                    for source in ("store", "pool", "recompute", "kvserve"):
                        method = "adaptive" if source == "kvserve" else spec
                        r = worker.serve(serve.request(request_id, prompt, max_new_tokens=args.new_tokens,
                                                       method=method, quality_min=args.quality_min,
                                                       use_pool=source != "recompute"))
                        request_id += 1
                        row = {"source": source, "gbps": gbps, "prompt_tokens": tokens, "stored_profile": spec,
                               "path": "decode-fetch",
                               "ok": r["ok"], "error": r["error"], **r["timings"]}
                        out.append(row)
                        if source == "pool" and not row["prefix_hit"]:
                            with open(log_path) as f:
                                tail = f.read()[-1500:]
                            failures.append(f"pool over {gbps:g} Gbps, {tokens} tokens: the forced hit recomputed "
                                            f"(its fetch took {row['pool_fetch_seconds']:.3f} s): {row['hit_error']}; "
                                            f"decode log: {tail}")
                    # The references: the chunk frames the hits fetched, fetched again with the
                    # pool client alone, and sent by kvserve's transport alone over one connection
                    # shaped like the pool's (bytes over the sender's busy seconds, one after another).
                    hashes = [kvpool.prefix_hash(prompt[:512 * (k + 1)]) for k in range((tokens - 1) // 512)]
                    start = time.monotonic()
                    frames = [f for f in (client.get(args.model, h, spec) for h in hashes) if f]
                    seconds = time.monotonic() - start
                    nbytes = sum(len(f) for f in frames)
                    out.append({"source": "pool-client", "gbps": gbps, "prompt_tokens": tokens, "frame_bytes": nbytes,
                                "pool_fetch_seconds": seconds, "ok": nbytes > 0})
                    busy = nbytes * 8 / 1e9 / transport_frames_gbps(frames, args.secret, shape_gbps=gbps)
                    out.append({"source": "transport", "reference": "transport-shaped", "gbps": gbps,
                                "prompt_tokens": tokens, "frame_bytes": nbytes, "pool_fetch_seconds": busy,
                                "ok": nbytes > 0})
                    del frames
                progress(f"pool over {gbps:g} Gbps, {tokens} tokens: {args.pool_requests} requests per source")
        finally:
            worker.stop()
            stop_decode_process(proc, log_path, memory_file, memory, name, failures)
            server.stop()
    return out


def _report(args: argparse.Namespace, rates: List[float], sizes: List[int], fixed: List[str], table: Any, layers: int,
            calib_tokens: int, started: float, rows: List[Dict[str, Any]], failures: List[str],
            partial: bool) -> Dict[str, Any]:
    points = []
    for gbps in rates:
        for tokens in sizes:
            point: Dict[str, Any] = {"gbps": gbps, "tokens": tokens, "methods": {}}
            for method in fixed + ["kvserve"]:
                sel = [r for r in rows if r["phase"] == "sweep" and r["gbps"] == gbps and r["prompt_tokens"] == tokens
                       and r["method"] == method and r["ok"]]
                if sel:
                    point["methods"][method] = summarize(sel)
            statics = {m: s for m, s in point["methods"].items() if m != "kvserve"}
            if statics:
                best = min(statics, key=lambda m: statics[m]["jct_mean"])
                point["best_static"] = best
                point["methods"]["best-static"] = dict(statics[best], profile_of=best)
            if point["methods"]:
                points.append(point)
    return {
        "command": "bench/pd_sweep.py " + " ".join(sys.argv[1:]), "machine": _machine(args.device),
        "model": args.model, "layers": layers, "calibration_tokens": calib_tokens, "quality_min": args.quality_min,
        "workload": args.workload, "table": args.table, "seconds": time.time() - started,
        "controller_table": [{"spec": c.spec, "compression_ratio": c.compression_ratio,
                              "encode_bytes_per_second": c.encode_bytes_per_second,
                              "decode_bytes_per_second": c.decode_bytes_per_second,
                              "overhead_seconds": c.overhead_seconds,
                              "quality": table.quality(i, args.workload)} for i, c in enumerate(table.profiles)],
        "points": points, "failures": failures, "rows": rows, "partial": partial,
    }


def checks(report: Dict[str, Any]) -> Dict[str, Any]:
    """Issue 41's criteria on a report's numbers (several runs' points merged)."""
    out: Dict[str, Any] = {"failures": list(report.get("failures", []))}
    vs_static, speedup = [], []
    layers = report["layers"]
    for p in report["points"]:
        m = p["methods"]
        if "kvserve" in m and "best-static" in m:
            vs_static.append({"gbps": p["gbps"], "tokens": p["tokens"],
                              "ratio": m["kvserve"]["jct_mean"] / m["best-static"]["jct_mean"]})
        if "kvserve" in m and RAW in m:
            speedup.append(_speedup_vs_model(report, p, layers))
    out["kvserve_vs_best_static"] = vs_static
    out["speedup_vs_model"] = speedup
    memory = report.get("memory_runs", [report.get("memory", {})])
    peaks = []
    for mem in memory:
        for side in ["prefill_connector", "decode"] + [k for k in mem if k.startswith("decode-pool-")]:
            # A side without a device connector (a CPU run) reports no peak,
            # only its batch counters, if anything.
            if "peak_transfer_bytes" in (mem.get(side) or {}):
                peaks.append(mem[side]["peak_transfer_bytes"])
    out["peak_transfer_bytes"] = max(peaks) if peaks else None
    budget = (report.get("memory") or {}).get("budget_bytes", 64 << 20)
    pool = _pool_checks(report.get("pool_rows", []))
    out["pool"] = pool
    out["ok"] = (not out["failures"] and all(v["ratio"] <= 1.05 for v in vs_static) and
                 all(v["ratio"] >= 0.9 for v in speedup if v["ratio"] == v["ratio"]) and
                 (out["peak_transfer_bytes"] or 0) <= budget and all(p["ok"] for p in pool))
    return out


def _speedup_vs_model(report: Dict[str, Any], point: Dict[str, Any], layers: int) -> Dict[str, Any]:
    """kvserve's measured JCT speedup over raw beside the latency model's:
    if the model is right, raw's JCT is kvserve's minus the KV time the
    model predicts for kvserve's choices plus the one it predicts for raw,
    both with the streamed model at the bandwidth each decision saw, the
    request's own prefill as the source and its frame's compression ratio
    (the workers decide before the prefill runs, so their own predictions
    have no source; this check asks the model about what happened)."""
    rows = [r for r in report["rows"] if r["phase"] == "sweep" and r["gbps"] == point["gbps"]
            and r["prompt_tokens"] == point["tokens"] and r["method"] == "kvserve" and r["ok"]]
    costs = {c["spec"]: c for c in report["controller_table"]}

    def predicted_kv(spec: str, r: Dict[str, Any]) -> float:
        c = costs.get(spec) or {"compression_ratio": 1.0, "encode_bytes_per_second": float("inf"),
                                "decode_bytes_per_second": float("inf"), "overhead_seconds": 0.0}
        cr = r["kv_bytes"] / r["frame_bytes"] if spec != RAW and r["frame_bytes"] > 0 else c["compression_ratio"]
        cost = kvserve.ProfileCost(spec, cr, c["encode_bytes_per_second"], c["decode_bytes_per_second"],
                                   c["overhead_seconds"])
        return kvserve.predict_seconds(cost, r["kv_bytes"], r["bandwidth_estimate"], "streamed", layers,
                                       source_seconds=r["prefill_seconds"])

    raw_kv = statistics.fmean(predicted_kv(RAW, r) for r in rows)
    chosen_kv = statistics.fmean(predicted_kv(r["profile"] or RAW, r) for r in rows)
    kv_jct = point["methods"]["kvserve"]["jct_mean"]
    predicted = (kv_jct - chosen_kv + raw_kv) / kv_jct
    measured = point["methods"][RAW]["jct_mean"] / kv_jct
    return {"gbps": point["gbps"], "tokens": point["tokens"], "measured": measured, "predicted": predicted,
            "ratio": measured / predicted if predicted > 0 else float("nan")}


def _pool_checks(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per pool point: fetch goodput against kvserve's transport alone over
    a link shaped like the pool's (and against the pool client fetching the
    same frames alone), and whether kvserve's pool-or-recompute took the
    faster of the two. Reports written before the transport reference was
    measured have "transport" rows that were the pool client alone."""
    def rate(sel: List[Dict[str, Any]]) -> float:
        return statistics.fmean(r["frame_bytes"] / r["pool_fetch_seconds"] for r in sel) if sel else float("nan")

    out = []
    for key in sorted({(r["gbps"], r["prompt_tokens"]) for r in rows}):
        sel = [r for r in rows if (r["gbps"], r["prompt_tokens"]) == key and r["ok"]]
        by = {s: [r for r in sel if r["source"] == s] for s in ("pool", "recompute", "kvserve")}
        if not all(by.values()):
            continue
        shaped = [r for r in sel if r["source"] == "transport" and r.get("reference") == "transport-shaped"]
        client = [r for r in sel if r["source"] == "pool-client"
                  or (r["source"] == "transport" and "reference" not in r)]
        fetch = statistics.fmean(r["frame_bytes"] / r["pool_fetch_seconds"] for r in by["pool"]
                                 if r["prefix_hit"] and r["pool_fetch_seconds"] > 0) if any(
            r["prefix_hit"] for r in by["pool"]) else 0.0
        alone = rate(shaped)
        ttft = {s: statistics.fmean(r["ttft_seconds"] for r in by[s]) for s in ("pool", "recompute", "kvserve")}
        faster = "pool" if ttft["pool"] < ttft["recompute"] else "recompute"
        chosen = ["pool" if r["prefix_hit"] else "recompute" for r in by["kvserve"]]
        out.append({"gbps": key[0], "tokens": key[1], "fetch_gbps": fetch * 8 / 1e9, "transport_gbps": alone * 8 / 1e9,
                    "pool_client_gbps": rate(client) * 8 / 1e9,
                    "fetch_ratio": fetch / alone if shaped and alone else float("nan"), "ttft": ttft,
                    "faster": faster, "chosen": chosen,
                    "ok": bool(shaped) and fetch >= 0.9 * alone and all(c == faster for c in chosen)})
    return out


def _machine(device: str) -> Dict[str, Any]:
    info = {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "load_average": os.getloadavg(), "device": device}
    try:
        import torch  # noqa: PLC0415

        if device.startswith("cuda") and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    except ImportError:
        pass
    return info


def merge(old: Dict[str, Any], new: Dict[str, Any]) -> Dict[str, Any]:
    """``new`` with the points, rows, pool rows and memory of ``old`` (an
    earlier device call's) that it does not measure again."""
    have = {(p["gbps"], p["tokens"]) for p in new["points"]}
    merged = dict(new)
    merged["points"] = [p for p in old["points"] if (p["gbps"], p["tokens"]) not in have] + new["points"]
    merged["rows"] = [r for r in old["rows"] if (r["gbps"], r["prompt_tokens"]) not in have] + new["rows"]
    pool_have = {(r["gbps"], r["prompt_tokens"]) for r in new.get("pool_rows", [])}
    merged["pool_rows"] = [r for r in old.get("pool_rows", []) if (r["gbps"], r["prompt_tokens"]) not in pool_have] \
        + new.get("pool_rows", [])
    merged["commands"] = old.get("commands", [old["command"]]) + [new["command"]]
    merged["machines"] = old.get("machines", [old["machine"]]) + [new["machine"]]
    merged["memory_runs"] = old.get("memory_runs", [old.get("memory", {})]) + [new.get("memory", {})]
    merged["failures"] = old.get("failures", []) + new.get("failures", [])
    merged["seconds"] = old["seconds"] + new["seconds"]
    merged["points"].sort(key=lambda p: (-(p["gbps"] or 1e9), p["tokens"]))
    return merged


def markdown(report: Dict[str, Any]) -> str:
    """The report as markdown (docs/e2e-gpu.md)."""
    m = report["machine"]
    c = report["checks"]
    commands = report.get("commands", [report["command"]])
    machines = report.get("machines", [m] * len(commands))
    calls = "; ".join(f"`{x}` (on {mm.get('gpu', mm['device'])}, {mm['cores']} cores)"
                      for x, mm in zip(commands, machines))
    lines = ["# Prefill/decode on the GPU machine: JCT by method, prompt size and link rate", "",
             "Generated by `bench/pd_sweep.py` (do not edit by hand) from the device call(s) "
             + calls + f", {report['seconds']:.0f} s in all. Model `{report['model']}` ({report['layers']} "
             f"layers); both workers are the library's (kvserve/serve.h) around "
             "`kvserve.integration.transformers.TransformersEngine`, the decode worker in its own process on the "
             f"same GPU; quality floor {report['quality_min']} on workload `{report['workload']}` of "
             f"`{report['table']}`; codec speeds re-measured on {report['calibration_tokens']} tokens of this "
             "model's KV.", ""]
    if report.get("partial"):
        lines += ["**Partial report: the sweep had not finished when this was written.**", ""]
    lines += ["The controller's candidates (CR and codec speeds measured with the GPU codec on this model's KV; "
              "t0 measured through the workers; quality on the floor's workload):", "",
              "| profile | CR | encode GB/s | decode GB/s | t0 ms | quality |", "|---|---:|---:|---:|---:|---:|"]
    for row in report.get("controller_table", []):
        lines.append(f"| `{row['spec']}` | {row['compression_ratio']:.2f} | {row['encode_bytes_per_second'] / 1e9:.1f} | "
                     f"{row['decode_bytes_per_second'] / 1e9:.1f} | {row.get('overhead_seconds', 0.0) * 1e3:.1f} | "
                     f"{row['quality']:.3f} |")
    lines += ["", PAPER_FIGURES, ""]
    if report.get("transport_loopback_gbps"):
        lines += [f"kvserve's TCP transport alone over this machine's loopback, in the same run: "
                  f"{report['transport_loopback_gbps']:.2f} Gbps.", ""]
    mem_runs = report.get("memory_runs", [report.get("memory", {})])
    budget = (report.get("memory") or {}).get("budget_bytes", 64 << 20)
    lines += [f"Device memory (budget {budget >> 20} MiB per transfer): the most one transfer's ring held was "
              f"{(c['peak_transfer_bytes'] or 0) / 2**20:.1f} MiB (the device connectors' own accounting, both "
              "processes, every call)." + _outside_torch_text(mem_runs), ""]
    lines += ["Columns: means over the point's requests. prefill: the forward pass (each layer is encoded and sent "
              "while the next ones run); KV: the movement time the bandit is told (encode start to the decode "
              "side's acknowledgement, less waiting for the prefill); encode / decode: GPU codec time; codec share: "
              "(encode + decode) / JCT; TTFT: to the decode worker's first token.", "",
              "| Gbps | tokens | method | profiles | JCT mean s | p50 | p99 | TTFT mean s | prefill s | KV s | "
              "encode s | decode s | codec share |",
              "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in report["points"]:
        for name, s in p["methods"].items():
            label = f"best-static ({s['profile_of']})" if name == "best-static" else name
            profiles = ", ".join(f"{k} ×{v}" for k, v in s["profiles"].items())
            rate = "loopback" if p["gbps"] == 0 else f"{p['gbps']:g}"
            lines.append(f"| {rate} | {p['tokens']} | {label} | {profiles} | {s['jct_mean']:.3f} | {s['jct_p50']:.3f} | "
                         f"{s['jct_p99']:.3f} | {s['ttft_mean']:.3f} | {s['prefill_seconds']:.3f} | "
                         f"{s['kv_seconds']:.3f} | {s['encode_seconds']:.3f} | {s['decode_kv_seconds']:.3f} | "
                         f"{s['codec_share']:.2f} |")
    if c["pool"]:
        # Reports without the shaped-transport reference came from the code that fetched every chunk
        # whole before forwarding any.
        rows_ = report.get("pool_rows", [])
        relayed = any(r.get("reference") == "transport-shaped" for r in rows_)
        direct = any(r.get("path") == "decode-fetch" for r in rows_)
        how = ("the decode worker (a pool client in its own process) fetches each chunk frame from the pool "
               "itself, record by record" if direct else
               "the prefill worker relays each chunk frame record by record from the pool to the decode worker"
               if relayed else "the prefill worker fetches all the chunk frames whole, then forwards them to the "
               "decode worker")
        lines += ["", f"Prefix pool (a pool server over a shaped link, 512-token chunks; {how}; the decode worker "
                  "decodes each window into its cache as it arrives; recompute: the prompt prefilled and "
                  f"sent): fetch goodput (frame bytes over the {'relay' if relayed and not direct else 'fetch'}'s "
                  "seconds) against "
                  "kvserve's transport alone sending the same frames one after another over one connection "
                  "shaped to the same rate (one token bucket, as the pool's link), and against the pool client fetching them alone, both in the same run; "
                  "mean TTFT of each source, and what kvserve's pool path chose per request (— : not measured in "
                  "that run):", "",
                  "| pool Gbps | tokens | fetch Gbps | transport alone Gbps | ratio | pool client alone Gbps | "
                  "TTFT pool s | TTFT recompute s | TTFT kvserve s | faster | kvserve chose |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]

        def num(v: float) -> str:
            return "—" if v != v else f"{v:.2f}"  # NaN: not measured

        for p in c["pool"]:
            lines.append(f"| {p['gbps']:g} | {p['tokens']} | {p['fetch_gbps']:.2f} | {num(p['transport_gbps'])} | "
                         f"{num(p['fetch_ratio'])} | {num(p.get('pool_client_gbps', float('nan')))} | "
                         f"{p['ttft']['pool']:.3f} | {p['ttft']['recompute']:.3f} | "
                         f"{p['ttft']['kvserve']:.3f} | {p['faster']} | {', '.join(p['chosen'])} |")
    lines += ["", "Checks on these numbers: kvserve / best static mean JCT "
              + ", ".join(f"{v['ratio']:.3f} ({v['gbps']:g} Gbps, {v['tokens']})" for v in c["kvserve_vs_best_static"])
              + "; kvserve's JCT speedup over raw measured / predicted by the latency model for its choices "
              + ", ".join(f"{v['measured']:.2f} / {v['predicted']:.2f} ({v['gbps']:g} Gbps, {v['tokens']})"
                          for v in c["speedup_vs_model"])
              + (("; pool points that meet both criteria (fetch ≥ 0.9 × the transport alone, the faster source "
                  "chosen): " + f"{sum(p['ok'] for p in c['pool'])} of {len(c['pool'])}") if c.get("pool") else "")
              + f"; failures: {len(c['failures'])}" + ("".join(f"\n- {f}" for f in c["failures"][:20]))
              + f"\n\nAll of issue 41's criteria on these points: {'met' if c['ok'] else 'not met'}.", ""]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.render_only:
        if not args.out_json or not args.out_md:
            print("pd_sweep: --render-only needs --out-json (the report to read) and --out-md", file=sys.stderr)
            return 2
        with open(args.out_json) as f:
            report = json.load(f)
        report["checks"] = checks(report)  # this version's checks, written back beside the numbers
        profiling._write_atomically(args.out_json, json.dumps(report, indent=1))
        profiling._write_atomically(args.out_md, markdown(report))
        return 0
    if not args.table:
        print("pd_sweep: --table is required (the controller's profile table)", file=sys.stderr)
        return 2
    old = None
    if args.append and args.out_json and os.path.exists(args.out_json):
        with open(args.out_json) as f:
            old = json.load(f)

    def write(report: Dict[str, Any]) -> None:
        if old is not None:
            report = merge(old, report)
        report["checks"] = checks(report)
        if args.out_json:
            profiling._write_atomically(args.out_json, json.dumps(report, indent=1))
        if args.out_md:
            profiling._write_atomically(args.out_md, markdown(report))
        return report

    report = write(run(args, on_partial=write))
    if not args.out_md:
        print(markdown(report))
    return 1 if args.check and report["checks"]["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
