"""The prefill/decode benchmark: a sweep of prompt sizes, link rates and
methods through :mod:`kvserve.pd`, with a report.

    python -m kvserve.bench.pd --model llama-8b-random --device cuda \\
        --prompt-tokens 2048,8192,32768 --gbps 1,5,25,0 \\
        --table configs/profiles/kvs-qwen2-9m-unified.json --workload unified \\
        --out-json docs/results/e2e-gpu.json --out-md docs/e2e-gpu.md

A decode worker runs in its own process (``python -m kvserve.pd --role
decode``, same device); this process is the prefill worker. Per link rate
the prefill side dials a connection shaped to that rate (0: unshaped,
whatever the loopback sustains -- measured and reported), sends
unrecorded warm-up requests (on the first rate every prompt size with
every profile a request may use, raw first: the estimator's first sample;
then two short requests per candidate profile that measure its fixed
per-request overhead t0 -- put the fastest rate first), then per prompt size
one unrecorded ``--warmup-method`` request and ``--requests`` rounds: in a
round every method serves the same prompt, in an order rotated per round
(paired and interleaved, so drift falls on every method alike). Methods: fixed
profiles (``none`` is raw), ``best-static`` (per point, the fixed method
with the lowest mean JCT, picked after the fact) and ``kvserve`` (the
controller per request, from the measured bandwidth, ``--slo`` and
``--quality-min``, with the table's profile speeds re-measured by this
machine's codec on this model's KV). After the sweep, a link-change run
sends kvserve requests while the link drops from the first to the second
rate of ``--change-gbps``.

Everything in the report is measured in this run; the prediction column
is the controller's latency model for the choices it made.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import kvserve
from kvserve import generation, hf, pd, profiling, transport
from kvserve.bench.loopback import transport_loopback_gbps

RAW = pd.RAW_SPEC
# What the paper reports for the same experiment (its §7.2 and artifact), for the report.
PAPER_FIGURES = ("The paper, for comparison (vLLM, A100/H100-class GPUs, its own profiles): up to 9.13× JCT "
                 "speedup in PD-separated serving (HotpotQA) and up to 3.15× on bandwidth-constrained prefill "
                 "hardware (§7.2); in its artifact, Llama-8B at 5 Gbps goes from 9520 ms to 1695 ms (5.6×), "
                 "and the gain shrinks to about 1.07× at 100 Gbps.")


def start_decode_process(model: str, device: str, secret: str, seed: int,
                         timeout: float = 600.0, deterministic: bool = False) -> tuple:
    """Starts ``python -m kvserve.pd --role decode`` and returns (process,
    address) once it listens. Raises RuntimeError with its stderr when it
    exits first or does not listen within ``timeout`` s (model loading
    included)."""
    tmp = tempfile.mkdtemp(prefix="kvserve-pd-")
    address_file = os.path.join(tmp, "address")
    log = open(os.path.join(tmp, "decode.log"), "w+")
    cmd = [sys.executable, "-m", "kvserve.pd", "--role", "decode", "--model", model, "--device", device,
           "--address", "127.0.0.1:0", "--address-file", address_file, "--seed", str(seed)]
    if secret:
        cmd += ["--secret", secret]
    if deterministic:
        cmd += ["--deterministic"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while not os.path.exists(address_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log.seek(0)
            raise RuntimeError("decode worker did not start: " + log.read()[-4000:])
        time.sleep(0.05)
    with open(address_file) as f:
        return proc, f.read().strip()


def calibrate(table: Any, kv: Any, dtype: str, head_scores: Any = None, *, repeats: int = 3,
              cpu_tokens: int = 512) -> Any:
    """The table with every row's CR and codec speeds measured again on
    ``kv`` by the codec the workers will run for that row, qualities kept:
    for a CUDA ``kv``, the GPU codec for the profiles it runs (pack, rans;
    fastest of ``repeats`` synchronised runs) and the CPU codec (one
    thread, as the workers run it) on a host copy of the first
    ``cpu_tokens`` tokens for the rest (zstd, lz4: their CPU speed on a
    multi-GB cache would take minutes to measure, and bytes per second do
    not depend on the token count); for a CPU ``kv``, the CPU codec on all
    of it. Rows the codec refuses here (e.g. head scores missing) are
    dropped. A GPU row whose frame exists only once every layer is
    encoded (rANS: ``CudaEncoder.frame_size_is_static`` false) gets
    ``streamed=False``, so the latency model sends and decodes its frame
    whole after the prefill."""
    gpu_meter = None
    host = kv
    if kvserve.cuda.is_cuda(kv):
        gpu_meter = profiling._cuda_meter(kv, head_scores, repeats, [])
        host = kv[:, :, :, :cpu_tokens].cpu().contiguous()
    rows = []
    for cost in table.profiles:
        if cost.spec == RAW:
            continue
        profile = kvserve.Profile(cost.spec)
        streamed = True
        try:
            if gpu_meter is not None and profile.codec in pd.GPU_CODECS:
                cr, enc, dec = gpu_meter(profile)
                streamed = kvserve.CudaEncoder(cost.spec, kv, head_scores=head_scores).frame_size_is_static
            else:
                m = kvserve.measure_codec(profile, host, dtype, head_scores)
                cr, enc, dec = (m["compression_ratio"], m["encode_bytes_per_second"],
                                m["decode_bytes_per_second"])
        except kvserve.KvserveError:
            continue
        rows.append(kvserve.ProfileCost(cost.spec, cr, enc, dec, 0.0, dict(cost.quality), streamed=streamed))
    return kvserve.ProfileTable.from_rows(rows, list(table.workloads))


def measure_overheads(worker: Any, table: Any, tokens: int, estimator: Any, layers: int,
                      first_id: int) -> Any:
    """The table with every row's fixed per-request overhead ``t0``
    measured through ``worker`` (unrecorded requests of ``tokens`` tokens,
    the second of two per profile): the KV time the bandit will be told
    (prefill end to the acknowledgement, ``kv_seconds``) minus the
    streamed latency model's prediction at the estimator's bandwidth with
    that request's prefill as the source, clamped at 0. It is what the
    model leaves out: per-layer hook, event and queue latencies, the Python
    around each record. Measure where the transfer is short (a small
    prompt) so the bandwidth estimate's error does not end up in t0."""
    rows, request_id = [], first_id
    for cost in table.profiles:
        if cost.spec == RAW:
            continue
        for _ in range(2):
            r = worker.run(request_id, [1] * tokens, 2, method=cost.spec)
            request_id += 1
        predicted = kvserve.predict_seconds(cost, r.kv_bytes, estimator.estimate(worker.connection.peer_id),
                                            "streamed", layers, source_seconds=r.prefill_seconds)
        rows.append(kvserve.ProfileCost(cost.spec, cost.compression_ratio, cost.encode_bytes_per_second,
                                        cost.decode_bytes_per_second, max(0.0, r.kv_seconds - predicted),
                                        dict(cost.quality), streamed=cost.streamed))
    return kvserve.ProfileTable.from_rows(rows, list(table.workloads))


def with_baselines(table: Any, methods: Sequence[str], quality_dir: str) -> Any:
    """``table`` plus a row for every fixed method of ``methods`` it lacks
    (raw aside), so that the controller may choose what the sweep compares
    it with. Their qualities are the relative qualities ``kvserve quality``
    recorded in ``quality_dir/<workload>.json`` (docs/results/quality, as
    scripts/quality_report.sh writes it) for each of the table's
    workloads; a workload without a file (a mix such as ``unified``) gets
    the mean over the table's other workloads when all of those were
    found. A method with no recorded quality is not added. CR and speeds
    are placeholders here: :func:`calibrate` measures them."""
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


def prefill_kv(model: Any, tokens: int, seed: int) -> tuple:
    """(kv as a 5-D tensor on the model's device, dtype name) of one seeded
    prompt."""
    rng = random.Random(seed)
    vocab = int(getattr(model.config, "vocab_size", 96))
    kv = prompt_kv(model, [rng.randrange(1, vocab) for _ in range(tokens)])
    return kv, pd._DTYPES[str(kv.dtype)]


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in [0, 100])."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def summarize(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Mean / p50 / p99 of JCT and TTFT and mean stage times of `rows`."""
    jct = [r["jct_seconds"] for r in rows]
    ttft = [r["ttft_seconds"] for r in rows]
    out = {"requests": len(rows), "jct_mean": statistics.fmean(jct), "jct_p50": percentile(jct, 50),
           "jct_p99": percentile(jct, 99), "ttft_mean": statistics.fmean(ttft),
           "ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99)}
    for k in ("prefill_seconds", "encode_seconds", "kv_seconds", "transfer_busy_seconds",
              "decode_kv_seconds", "decode_seconds", "generate_seconds", "frame_bytes", "kv_bytes"):
        out[k] = statistics.fmean(r[k] for r in rows)
    out["codec_share"] = (statistics.fmean(r["encode_seconds"] + r["decode_seconds"] for r in rows)
                          / out["jct_mean"]) if out["jct_mean"] > 0 else 0.0
    profiles: Dict[str, int] = {}
    for r in rows:
        profiles[r["profile"]] = profiles.get(r["profile"], 0) + 1
    out["profiles"] = profiles
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kvserve.bench.pd", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="as kvserve.pd: tiny, llama-8b-random or a checkpoint")
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompt-tokens", default="256,1024", help="comma-separated prompt sizes")
    p.add_argument("--gbps", default="1,0", help="comma-separated link rates, Gbit/s; 0 = unshaped loopback")
    p.add_argument("--methods", default="none,kivi-2,cachegen,kvserve",
                   help="fixed profiles/presets and 'kvserve'; best-static is derived from the fixed ones")
    p.add_argument("--table", required=True, help="profile table for the controller (qualities per workload)")
    p.add_argument("--workload", default="0", help="workload of the table (name or index)")
    p.add_argument("--baseline-quality", default="",
                   help="directory of `kvserve quality` results (docs/results/quality): the fixed "
                        "methods the table lacks join the controller's candidates with the "
                        "qualities recorded there")
    p.add_argument("--quality-min", type=float, default=0.97)
    p.add_argument("--slo", type=float, default=float("inf"), help="KV time budget per request, s")
    p.add_argument("--requests", type=int, default=4,
                   help="rounds per point: in a round every method serves the same prompt, in rotated order")
    p.add_argument("--point-seconds", type=float, default=0.0,
                   help="stop a point's rounds once they took this long and --min-requests ran (0: off)")
    p.add_argument("--min-requests", type=int, default=2, help="rounds per point before --point-seconds applies")
    p.add_argument("--warmup-method", default="kivi-2",
                   help="profile of the unrecorded request sent before each point's rounds")
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--change-gbps", default="",
                   help="two rates 'A,B': after the sweep, kvserve requests on A, then on B (link change)")
    p.add_argument("--change-requests", type=int, default=6, help="requests per phase of the link change")
    p.add_argument("--pool-requests", type=int, default=0,
                   help="prefix-pool requests (the middle prompt size), each served from the pool, "
                        "by recompute and as kvserve chooses between the two; 0: no pool phase")
    p.add_argument("--pool-gbps", type=float, default=5.0, help="rate of the pool server's link, Gbit/s")
    p.add_argument("--calibration-tokens", type=int, default=0,
                   help="prompt size the codec speeds are measured on (0: the median prompt size)")
    p.add_argument("--lanes", type=int, default=1,
                   help="connections a frame is striped over (each shaped to 1/n of the link rate; one "
                        "TCP stream moves about one core's copy rate)")
    p.add_argument("--secret", default="kvserve-bench", help="connection secret (both processes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-json", help="write every request and the summary here")
    p.add_argument("--out-md", help="write the markdown report here")
    p.add_argument("--check", action="store_true",
                   help="compare the tokens of the first lossless request per point and profile with a "
                        "single-process run (exit 1 on a difference)")
    return p


def run(args: argparse.Namespace, progress=lambda s: print(s, file=sys.stderr, flush=True),
        on_partial: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """Runs the sweep described by ``args`` (see ``--help``); returns the
    report dict (``rows``, ``points``, ``checks``, ``machine``).
    ``on_partial(report)`` receives the report so far after every point
    (link rate and prompt size)."""
    if args.lanes < 1:
        raise SystemExit("--lanes must be >= 1")
    sizes = [int(x) for x in args.prompt_tokens.split(",") if x]
    rates = [float(x) for x in args.gbps.split(",") if x]
    methods = [m for m in args.methods.split(",") if m]
    fixed = [m for m in methods if m not in ("kvserve", "best-static")]
    workload: Any = int(args.workload) if args.workload.isdigit() else args.workload
    started = time.time()
    if args.check:
        pd.deterministic()  # token comparisons need it on both sides
    progress(f"loading {args.model} on {args.device}")
    model = pd.load_model(args.model, args.device, args.seed)
    pd.freeze_heap()
    layers = len(pd.decoder_layers(model))
    calib_tokens = args.calibration_tokens or sorted(sizes)[len(sizes) // 2]
    kv, dtype = prefill_kv(model, calib_tokens, args.seed + 7)
    table = kvserve.ProfileTable.load(args.table)
    if args.baseline_quality:
        table = with_baselines(table, fixed, args.baseline_quality)
    table = calibrate(table, kv, dtype)
    loopback_reference = transport_loopback_gbps(kvserve.encode(kv.cpu(), RAW), args.secret, lanes=args.lanes)
    progress(f"kvserve's TCP transport alone over loopback, {args.lanes} lane(s): {loopback_reference:.1f} Gbps")
    del kv
    progress(f"calibrated {len(table)} profiles on {calib_tokens} tokens of KV ({dtype}): "
             + ", ".join(f"{c.spec} CR {c.compression_ratio:.2f}" for c in table.profiles))
    proc, address = start_decode_process(args.model, args.device, args.secret, args.seed,
                                         deterministic=args.check)
    estimator = kvserve.BandwidthEstimator()
    controller = None  # built once the per-request overheads are measured
    rng = random.Random(args.seed)
    vocab = int(getattr(model.config, "vocab_size", 96))
    rows: List[Dict[str, Any]] = []
    pool_rows: List[Dict[str, Any]] = []
    request_id = 0
    failures: List[str] = []
    conn = None
    checked: set = set()
    # The single-process reference steps as the decode worker does (CUDA
    # graphs on a GPU), with its captured steps kept across points.
    reference_generator = generation.Generator(model)

    def one(worker: Any, gbps: float, tokens: int, method: str, phase: str,
            prompt: Optional[List[int]] = None, round_: int = 0) -> Dict[str, Any]:
        nonlocal request_id
        prompt = prompt if prompt is not None else [rng.randrange(1, vocab) for _ in range(tokens)]
        digest = (args.check and method != "kvserve" and kvserve.Profile(method).is_lossless
                  and (gbps, tokens, str(kvserve.Profile(method))) not in checked)
        r = worker.run(request_id, prompt, args.new_tokens, method=method, slo_seconds=args.slo,
                       quality_min=args.quality_min, peer="decode", digest=digest)
        request_id += 1
        row = asdict(r)
        row.update({"gbps": gbps, "phase": phase, "round": round_, "estimate_gbps": kvserve.bytes_per_second_to_gbps(estimator.estimate("decode"))})
        if method == "kvserve":
            row["quality"] = (table.quality(table.index_of(r.profile), workload)
                              if r.profile != RAW else 1.0)
            if row["quality"] < args.quality_min:
                failures.append(f"request {r.id}: {r.profile} quality {row['quality']} < floor")
        point = (gbps, tokens, str(kvserve.Profile(r.profile)))
        if args.check and kvserve.Profile(r.profile).is_lossless and point not in checked:
            checked.add(point)  # one single-process reference per point and lossless profile
            ref_digest: List[int] = []
            expected = pd.reference_tokens(model, prompt, args.new_tokens, ref_digest, reference_generator)
            ok = expected == r.tokens
            row["matches_single_process"] = ok
            if r.kv_digest is not None:
                row["kv_matches_single_process"] = r.kv_digest == ref_digest[0]
            if not ok:
                # What differs: the KV that arrived, the prefill's own first
                # token, or a single-process run against itself -- and then
                # whether its second prefill or its generation moved.
                again_digest: List[int] = []
                again = pd.reference_tokens(model, prompt, args.new_tokens, again_digest, reference_generator)
                row["mismatch"] = {
                    "expected": expected, "got": r.tokens,
                    "first_token_differs": expected[0] != r.tokens[0],
                    "kv_bits_equal": row.get("kv_matches_single_process"),
                    "single_process_repeatable": again == expected,
                    "repeat_prefill_kv_bits_equal": again_digest[0] == ref_digest[0],
                    "repeat_tokens": again}
                failures.append(f"request {r.id}: {r.profile} tokens differ from a single-process run "
                                f"({row['mismatch']})")
        rows.append(row)
        return row

    worker: Any = None

    def connect(gbps: float) -> Any:
        """A connection shaped to ``gbps``; one worker for every link, so
        its GPU encoders and pinned send buffer are made once."""
        nonlocal conn, worker
        if conn is not None:
            conn.close()
        # With lanes, each of the n connections is shaped to 1/n of the rate.
        share = gbps / args.lanes
        conn = transport.dial(transport.tcp(), address, secret=args.secret, local_id="prefill",
                              shape_gbps=share, estimator=estimator)
        if worker is None:
            worker = pd.PrefillWorker(model, conn, controller=controller, workload=workload,
                                      table_tokens=calib_tokens)
        worker.connection, worker.controller = conn, controller
        worker.open_lanes(lambda: transport.dial(transport.tcp(), address, secret=args.secret,
                                                 local_id="prefill", shape_gbps=share), args.lanes - 1)
        return worker

    def warm(worker: Any, tokens: int, specs: Sequence[str]) -> None:
        nonlocal request_id
        for spec in specs:
            worker.run(request_id, [1] * tokens, 2, method=spec)
            request_id += 1

    def build(partial: bool) -> Dict[str, Any]:
        sweep = _Sweep(args, rates, sizes, fixed, table, workload, layers, calib_tokens, started)
        report = _report(sweep, rows, failures, partial=partial)
        report["transport_loopback_gbps"] = loopback_reference
        report["lanes"] = args.lanes
        report["pool_rows"] = pool_rows
        return report

    sweep_methods = fixed + (["kvserve"] if "kvserve" in methods else [])
    try:
        for gbps in rates:
            worker = connect(gbps)
            if controller is None:
                # Unrecorded warm-up on the first link: every prompt size with
                # every profile a request may use (encoders, decoder plans,
                # allocations and kernels per shape), raw first (the link's
                # first sample).
                specs = [RAW] + [m for m in fixed if m != RAW] + [c.spec for c in table.profiles
                                                                  if c.spec not in fixed]
                for tokens in sorted(sizes, reverse=True):
                    warm(worker, tokens, specs)
                worker.kv_bytes_for(1)  # its one-time probe forward, outside kvserve's first request
                table = measure_overheads(worker, table, min(sizes), estimator, layers, request_id)
                request_id += 2 * len(table)
                progress("per-request overheads: " + ", ".join(
                    f"{c.spec} {c.overhead_seconds * 1e3:.1f} ms" for c in table.profiles))
                controller = kvserve.Controller(table, estimator=estimator, model="streamed", layers=layers)
                worker.controller = controller
            for tokens in sizes:
                # Unrecorded: the first request after a change of prompt size
                # pays for the allocator's reshuffle.
                warm(worker, tokens, [args.warmup_method])
                point_start = time.monotonic()
                for round_ in range(args.requests):
                    # Paired and interleaved: every method serves the same
                    # prompt in a round, in an order rotated per round, so
                    # drift and prompt effects fall on all methods alike.
                    prompt = [rng.randrange(1, vocab) for _ in range(tokens)]
                    k = round_ % len(sweep_methods)
                    for method in sweep_methods[k:] + sweep_methods[:k]:
                        row = one(worker, gbps, tokens, method, "sweep", prompt, round_)
                    if (args.point_seconds and round_ + 1 >= min(args.requests, args.min_requests)
                            and time.monotonic() - point_start > args.point_seconds):
                        break
                progress(f"{gbps:g} Gbps, {tokens} tokens: {round_ + 1} rounds in "
                         f"{time.monotonic() - point_start:.1f} s (last: {row['method']} as {row['profile']}; "
                         f"{time.time() - started:.0f} s since start)")
                if on_partial is not None:  # what a run stopped later keeps
                    on_partial(build(partial=True))
        if args.change_gbps:
            a, b = (float(x) for x in args.change_gbps.split(","))
            for phase, gbps in (("before", a), ("after", b)):
                worker = connect(gbps)
                for _ in range(args.change_requests):
                    one(worker, gbps, sizes[len(sizes) // 2], "kvserve", f"change-{phase}")
        if args.pool_requests:
            progress(f"prefix pool over {args.pool_gbps:g} Gbps vs recompute")
            pool_rows.extend(pool_phase(args, model, worker, controller, table, workload,
                                        sizes[len(sizes) // 2], rng, vocab, request_id))
            request_id += 3 * args.pool_requests
        worker.stop()
    finally:
        if conn is not None:
            conn.close()
        for lane in (worker.lanes if worker is not None else []):
            lane.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()

    return build(partial=False)


def prompt_kv(model: Any, ids: Sequence[int]) -> Any:
    """The 5-D KV (on the model's device) of a prefill of ``ids``."""
    import torch  # noqa: PLC0415

    device = next(model.parameters()).device
    with torch.no_grad():
        cache = pd.new_cache(model)
        model(input_ids=torch.tensor([list(ids)], device=device), past_key_values=cache, use_cache=True,
              **pd.last_logits_only(model))
    return torch.stack([torch.stack([k[0], v[0]]) for k, v in hf.cache_layers(cache)])


def pool_phase(args: argparse.Namespace, model: Any, worker: Any, controller: Any, controller_table: Any,
               workload: Any, tokens: int, rng: random.Random, vocab: int,
               first_id: int) -> List[Dict[str, Any]]:
    """Prefix-pool hits against recompute: a pool server in this process
    (memory backend) sends over a link shaped to ``--pool-gbps``; per
    request, the KV of the prompt's first ``tokens - 1`` tokens is encoded
    with the profile the controller picks for that link (stored unmeasured),
    then the decode worker serves the prompt three times: fetching the frame
    and decoding it into its cache (then the last token and generation),
    recomputing the whole prefill itself, and as kvserve chooses between the
    two (:func:`kvserve.pd.pool_or_recompute`, from the fetch goodput
    measured on the earlier pool requests, the profile's decode speed in the
    table and the prefill worker's prefill clock). Returns one row per
    request."""
    from kvserve import pool as kvpool  # noqa: PLC0415

    server = kvpool.serve(kvpool.memory(budget_bytes=64 << 30), "127.0.0.1:0", secret=args.secret,
                          shape_gbps=args.pool_gbps)
    try:
        store = kvpool.remote(server.address, secret=args.secret)
        kv_bytes = worker.kv_bytes_for(tokens - 1)
        d = controller.choose(workload, kv_bytes=kv_bytes,
                              bandwidth=kvserve.gbps_to_bytes_per_second(args.pool_gbps),
                              quality_min=args.quality_min, frame_bytes=worker.frame_sizes(tokens - 1))
        spec = str(kvserve.Profile(d.spec if d.action == "send" else RAW))
        row = controller_table.profiles[d.profile_index if d.action == "send" else 0]
        fetches = kvserve.BandwidthEstimator()  # the pool link's goodput, from the pool requests
        rows, request_id = [], first_id
        for _ in range(args.pool_requests):
            prompt = [rng.randrange(1, vocab) for _ in range(tokens)]
            frame = kvserve.encode(prompt_kv(model, prompt[:-1]).cpu(), spec)
            store.put(args.model, kvpool.prefix_hash(prompt[:-1]), spec, bytes(frame))
            for source in ("pool", "recompute", "kvserve"):
                extra: Dict[str, Any] = {}
                run_as = source
                if source == "kvserve":
                    bandwidth = fetches.estimate("pool") if fetches.sample_count("pool") else 0.0
                    run_as, pool_s, recompute_s = pd.pool_or_recompute(
                        len(frame), kv_bytes, bandwidth, row.decode_bytes_per_second,
                        worker.prefill_clock.predict(tokens), row.overhead_seconds)
                    extra = {"chosen": run_as, "predicted_pool_seconds": pool_s,
                             "predicted_recompute_seconds": recompute_s}
                r = worker.run_pool(request_id, prompt, args.new_tokens, source=run_as,
                                    pool_address=server.address, model_id=args.model, profile=spec)
                request_id += 1
                if r["hit"]:
                    fetches.observe("pool", r["frame_bytes"], r["fetch_seconds"])
                r.update({"source": source, "profile": spec, "prompt_tokens": tokens, "gbps": args.pool_gbps,
                          **extra})
                rows.append(r)
        return rows
    finally:
        server.stop()


@dataclass
class _Sweep:
    """What a sweep's report is built from besides its requests: the
    command line, the points, the fixed methods, the controller's table
    (calibrated), the model's layer count and when the run started."""

    args: argparse.Namespace
    rates: List[float]
    sizes: List[int]
    fixed: List[str]
    table: Any
    workload: Any
    layers: int
    calibration_tokens: int
    started: float


def _report(sweep: _Sweep, rows: List[Dict[str, Any]], failures: List[str],
            partial: bool = False) -> Dict[str, Any]:
    """The report of the requests in ``rows`` (``partial``: the sweep is
    still running; points without requests are left out)."""
    args, rates, sizes, fixed = sweep.args, sweep.rates, sweep.sizes, sweep.fixed
    table, workload = sweep.table, sweep.workload
    points = []
    for gbps in rates:
        for tokens in sizes:
            point = {"gbps": gbps, "tokens": tokens, "methods": {}}
            for method in fixed + ["kvserve"]:
                sel = [r for r in rows if r["phase"] == "sweep" and r["gbps"] == gbps and
                       r["prompt_tokens"] == tokens and r["method"] == method]
                if sel:
                    point["methods"][method] = summarize(sel)
                    if method == "kvserve":
                        point["kv_rows"] = sel
            statics = {m: s for m, s in point["methods"].items() if m != "kvserve"}
            if statics:
                best = min(statics, key=lambda m: statics[m]["jct_mean"])
                point["best_static"] = best
                point["methods"]["best-static"] = dict(statics[best], profile_of=best)
            if point["methods"]:
                points.append(point)
    checks = _checks(points, rates, failures, args, sweep.layers)
    for p in points:
        p.pop("kv_rows", None)  # every row is in report["rows"]
    loopback = [r for r in rows if r["gbps"] == 0 and r["profile"] == RAW and r["transfer_busy_seconds"] > 0]
    report = {
        "command": "python -m kvserve.bench.pd " + " ".join(sys.argv[1:]),
        "machine": _machine(args.device), "model": args.model, "layers": sweep.layers,
        "calibration_tokens": sweep.calibration_tokens, "quality_min": args.quality_min,
        "workload": args.workload, "table": args.table, "seconds": time.time() - sweep.started,
        "loopback_gbps": (statistics.fmean(kvserve.bytes_per_second_to_gbps(
            r["frame_bytes"] / r["transfer_busy_seconds"]) for r in loopback) if loopback else None),
        "controller_table": [{"spec": c.spec, "compression_ratio": c.compression_ratio,
                              "encode_bytes_per_second": c.encode_bytes_per_second,
                              "decode_bytes_per_second": c.decode_bytes_per_second,
                              "overhead_seconds": c.overhead_seconds,
                              "quality": table.quality(i, workload)} for i, c in enumerate(table.profiles)],
        "points": points, "checks": checks, "rows": rows, "partial": partial,
    }
    return report


def _checks(points: List[Dict[str, Any]], rates: List[float], failures: List[str],
            args: argparse.Namespace, layers: int) -> Dict[str, Any]:
    """The issue's criteria, evaluated on this run's numbers."""
    out: Dict[str, Any] = {"floor_and_token_failures": failures}
    vs_static, vs_raw = [], []
    top = max(rates, key=lambda g: float("inf") if g == 0 else g) if rates else None
    for p in points:
        m = p["methods"]
        if "kvserve" in m and "best-static" in m:
            vs_static.append({"gbps": p["gbps"], "tokens": p["tokens"],
                              "ratio": m["kvserve"]["jct_mean"] / m["best-static"]["jct_mean"]})
        if "kvserve" in m and RAW in m and p["gbps"] == top:
            vs_raw.append({"gbps": p["gbps"], "tokens": p["tokens"],
                           "ratio": m["kvserve"]["jct_mean"] / m[RAW]["jct_mean"]})
    out["kvserve_vs_best_static"] = vs_static
    out["kvserve_vs_raw_at_top_rate"] = vs_raw
    out["speedup_vs_model"] = [_speedup_vs_model(p, layers) for p in points if "kvserve" in p["methods"]
                               and RAW in p["methods"]]
    out["ok"] = (not failures and all(v["ratio"] <= 1.05 for v in vs_static) and
                 all(v["ratio"] <= 1.02 for v in vs_raw))
    return out


def _speedup_vs_model(point: Dict[str, Any], layers: int) -> Dict[str, Any]:
    """kvserve's measured JCT speedup over raw at a point beside what the latency model predicts
    for its choices: (T + raw's predicted KV time) / (T + the choice's), T = kvserve's mean JCT
    outside the KV time after the prefill, both predictions the controller's model (streamed, the
    prefill as the source) at the bandwidth each decision saw."""
    rows = point["kv_rows"]
    other = statistics.fmean(r["jct_seconds"] - r["kv_seconds"] for r in rows)
    raw = kvserve.ProfileCost(RAW, 1.0)
    raw_kv = statistics.fmean(
        kvserve.predict_seconds(raw, r["kv_bytes"], r["decision"]["bandwidth"], "streamed", layers,
                                source_seconds=r["decision"]["source_seconds"]) for r in rows)
    chosen_kv = statistics.fmean(r["predicted_kv_seconds"] for r in rows)
    predicted = (other + raw_kv) / (other + chosen_kv) if other + chosen_kv > 0 else float("nan")
    measured = point["methods"][RAW]["jct_mean"] / point["methods"]["kvserve"]["jct_mean"]
    return {"gbps": point["gbps"], "tokens": point["tokens"], "measured": measured,
            "predicted": predicted, "ratio": measured / predicted if predicted else float("nan")}


def _machine(device: str) -> Dict[str, Any]:
    info = {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "load_average": os.getloadavg(), "device": device}
    try:
        import torch  # noqa: PLC0415

        if device.startswith("cuda") and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    except ImportError:
        pass
    return info


def markdown(report: Dict[str, Any]) -> str:
    """The report as markdown (docs/e2e-gpu.md)."""
    m = report["machine"]
    lines = ["# Prefill/decode on the GPU machine: JCT by method, prompt size and link rate", "",
             f"Generated by `{report['command']}` (do not edit by hand) in {report['seconds']:.0f} s on "
             f"{m.get('gpu', m['device'])}, {m['cores']} cores (load average "
             f"{', '.join(f'{x:.2f}' for x in m['load_average'])} at the end). Model `{report['model']}` "
             f"({report['layers']} layers); quality floor {report['quality_min']} on workload "
             f"`{report['workload']}` of `{report['table']}`, codec speeds re-measured on "
             f"{report['calibration_tokens']} tokens of this model's KV.", ""]
    if report.get("partial"):
        lines += ["**Partial report: the sweep had not finished when this was written.**", ""]
    lines += ["The controller's candidates (CR and codec speeds measured on this machine for this model's KV; "
              "t0: the fixed per-request overhead measured through the workers on the first link; "
              "quality on the floor's workload from the table):", "",
              "| profile | CR | encode GB/s | decode GB/s | t0 ms | quality |", "|---|---:|---:|---:|---:|---:|"]
    for c in report.get("controller_table", []):
        lines.append(f"| `{c['spec']}` | {c['compression_ratio']:.2f} | {c['encode_bytes_per_second'] / 1e9:.1f} | "
                     f"{c['decode_bytes_per_second'] / 1e9:.1f} | {c.get('overhead_seconds', 0.0) * 1e3:.1f} | "
                     f"{c['quality']:.3f} |")
    lines += ["", PAPER_FIGURES, ""]
    if report["loopback_gbps"]:
        lines += [f"Unshaped loopback (rate 0) sustained {report['loopback_gbps']:.2f} Gbps through the workers "
                  "(raw frames, sender busy time: GPU copies, Python and the transport)"
                  + (f"; kvserve's TCP transport alone, in the same run, {report['transport_loopback_gbps']:.2f} "
                     "Gbps (one process, two threads, records read into one buffer)"
                     + (f"; frames striped over {report['lanes']} connections" if report.get("lanes", 1) > 1 else "")
                     if report.get("transport_loopback_gbps") else "") + ".", ""]
    lines += ["Columns: means over the point's requests. prefill: the forward pass (layers are encoded and "
              "sent from its hooks meanwhile); KV tail: prefill end to the decode side's acknowledgement; "
              "encode / decode: codec time on the sender thread / the decode worker; codec share: "
              "(encode + decode) / JCT. TTFT: to the decode worker's first own token.", "",
              "| Gbps | tokens | method | profiles | JCT mean s | p50 | p99 | TTFT mean s | prefill s | "
              "KV tail s | encode s | decode s | codec share |",
              "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in report["points"]:
        for name, s in p["methods"].items():
            label = f"best-static ({s['profile_of']})" if name == "best-static" else name
            profiles = ", ".join(f"{k} ×{v}" for k, v in s["profiles"].items())
            rate = "loopback" if p["gbps"] == 0 else f"{p['gbps']:g}"
            lines.append(f"| {rate} | {p['tokens']} | {label} | {profiles} | {s['jct_mean']:.3f} | "
                         f"{s['jct_p50']:.3f} | {s['jct_p99']:.3f} | {s['ttft_mean']:.3f} | "
                         f"{s['prefill_seconds']:.3f} | {s['kv_seconds']:.3f} | {s['encode_seconds']:.3f} | "
                         f"{s['decode_seconds']:.3f} | {s['codec_share']:.2f} |")
    pool_rows = report.get("pool_rows") or []
    if pool_rows:
        lines += ["", f"Prefix pool over a {pool_rows[0]['gbps']:g} Gbps link (frames fetched by the decode worker and "
                  "decoded into its cache; profile chosen by the controller for that link) vs recompute "
                  "(the decode worker prefills the prompt itself), and kvserve choosing between them per "
                  "request from its predictions (the fetch goodput measured on earlier pool requests, the "
                  "profile's decode speed, the prefill clock; pool until the link is measured). Means over "
                  "the requests:", "",
                  "| source | tokens | profile | hits | frame MB | fetch s | decode s | prefill s | TTFT s | JCT s |",
                  "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for source in ("pool", "recompute", "kvserve"):
            sel = [r for r in pool_rows if r["source"] == source]
            if not sel:
                continue

            def mean(key: str, sel: List[Dict[str, Any]] = sel) -> float:
                return statistics.fmean(float(r[key]) for r in sel)

            profile = f"`{sel[0]['profile']}`" if any(r["hit"] for r in sel) else "—"
            label = source
            if source == "kvserve":
                chosen = [r["chosen"] for r in sel]
                label = "kvserve (" + ", ".join(f"{c} ×{chosen.count(c)}" for c in ("pool", "recompute")
                                                if c in chosen) + ")"
            lines.append(f"| {label} | {sel[0]['prompt_tokens']} | {profile} | "
                         f"{sum(bool(r['hit']) for r in sel)}/{len(sel)} | {mean('frame_bytes') / 1e6:.1f} | "
                         f"{mean('fetch_seconds'):.3f} | {mean('decode_seconds'):.3f} | {mean('prefill_seconds'):.3f} | "
                         f"{mean('ttft_seconds'):.3f} | {mean('jct_seconds'):.3f} |")
    change = [r for r in report["rows"] if r["phase"].startswith("change")]
    if change:
        lines += ["", "Link change (kvserve):", "", "| request | phase | Gbps | estimate Gbps | profile | JCT s |",
                  "|---:|---|---:|---:|---|---:|"]
        for r in change:
            lines.append(f"| {r['id']} | {r['phase']} | {r['gbps']:g} | {r['estimate_gbps']:.2f} | "
                         f"{r['profile']} | {r['jct_seconds']:.3f} |")
    c = report["checks"]
    lines += ["", "Checks on this run: kvserve / best static mean JCT "
              + ", ".join(f"{v['ratio']:.3f} ({v['gbps']:g} Gbps, {v['tokens']})" for v in c["kvserve_vs_best_static"])
              + "; kvserve / raw at the top rate "
              + ", ".join(f"{v['ratio']:.3f} ({v['tokens']})" for v in c["kvserve_vs_raw_at_top_rate"])
              + "; kvserve's JCT speedup over raw measured / predicted by the latency model for its "
              "choices " + ", ".join(f"{v['measured']:.2f} / {v['predicted']:.2f} ({v['gbps']:g} Gbps, "
                                     f"{v['tokens']})" for v in c["speedup_vs_model"])
              + f"; floor or token failures: {len(c['floor_and_token_failures'])}.", ""]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)

    def write(report: Dict[str, Any]) -> None:
        if args.out_json:
            profiling._write_atomically(args.out_json, json.dumps(report, indent=1))
        if args.out_md:
            profiling._write_atomically(args.out_md, markdown(report))

    report = run(args, on_partial=write)
    write(report)
    if not args.out_md:
        print(markdown(report))
    # --check: a request below its floor or a lossless request with other
    # tokens fails the command; the JCT criteria are reported, not enforced.
    return 1 if args.check and report["checks"]["floor_and_token_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
