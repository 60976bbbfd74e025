"""Profile your own model: the Bayesian profiler with your evaluation.

    import kvserve
    result = kvserve.profile("configs/strategy_space.json", evaluate=my_eval, kv=kv,
                             quality_min=0.97, budget=40, db="profile.sqlite",
                             model="my-model", workload="chat", sample_set="dev-200",
                             out="chat_table.json")

``evaluate(profile)`` is your function: it receives a :class:`kvserve.Profile`
and returns its quality relative to uncompressed (1.0 = indistinguishable),
as a float or a ``(quality, ci_half_width, samples)`` tuple. Run your engine
and your eval set in it -- :class:`kvserve.task_eval.TaskEvaluator` is a
worked example with transformers.

What is measured where:

* Quality: only by ``evaluate``, at most ``budget`` times, on the profiles
  the Bayesian engine (include/kvserve/profiler.h, paper Alg. 1) picks.
* Compression ratio and codec throughput: by kvserve, once per profile of
  the space, by encoding and decoding ``kv`` (your KV cache). A CPU tensor
  is measured with the CPU codec (one thread, fastest of ``repeats`` runs);
  a CUDA tensor with the CUDA codec on its device when this build has it
  (a CPU-only build copies it to host memory and uses the CPU codec; the
  result says which in ``codec_device``).
* Every evaluation and every codec measurement is stored in ``db`` (SQLite),
  keyed by ``model``, ``workload``, ``sample_set``, the profile spec and
  the evaluator name (quality) or a digest of ``kv`` (codec metrics). A
  second call with the same keys re-evaluates nothing: an interrupted run
  (Ctrl-C, a crash in ``evaluate``) resumes where it stopped.

The Pareto table (``out``) has the format of ``ProfileTable`` /
``kvserve policy TABLE`` / the serving workers' ``--table``.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import hashlib
import json
import math
import numbers
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _kvserve, cuda

Evaluate = Callable[[Any], Any]
SpaceLike = Union[str, "os.PathLike[str]", Sequence[Any], Dict[str, Any], Any]

_HEAD_SCORE_QUANTIZERS = ("mixhq", "duo")


class NoFeasibleProfileError(LookupError):
    """No evaluated profile reached ``quality_min``, so there is no table to
    write. ``.result`` is the :class:`ProfileResult` (the trace is kept, and
    so is every row of the database)."""

    def __init__(self, message: str, result: "ProfileResult") -> None:
        super().__init__(message)
        self.result = result


@dataclasses.dataclass
class Evaluation:
    """One evaluation of the trace, in search order."""

    spec: str
    quality: float
    ci_half_width: float
    samples: int
    feasible: bool
    compression_ratio: float
    encode_bytes_per_second: float
    decode_bytes_per_second: float
    from_db: bool              # answered by the results database, evaluate() not called
    seconds: Optional[float]   # wall time of the evaluate() call (None when from_db)
    # The floor of the search that made this row: quality_min, or one of more_floors. ``feasible``
    # is relative to it (and, with holdout= and floor_on="lower", to the lower end of the interval).
    floor: Optional[float] = None

    @property
    def profile(self) -> Any:
        return _kvserve.Profile.parse(self.spec)


@dataclasses.dataclass
class ProfileResult:
    """What :func:`profile` found."""

    rows: List[Evaluation]         # every search's rows (quality_min's, then each stricter floor's)
    # The max-CR evaluation whose search figure meets quality_min (None when none does); with
    # more_floors it may be a stricter search's row (its `feasible` is relative to its own floor).
    best: Optional[Evaluation]
    stop_reason: str               # of the quality_min search: "budget", "space exhausted", "early stop: ..."
    evaluated: int                 # evaluate() calls made by this run
    reused: int                    # evaluations answered by the database (over all searches)
    codec_measured: int            # profiles whose codec metrics this run measured
    codec_from_db: int
    codec_device: str              # "cpu" or "cuda:<n>"
    codec_cpu_profiles: List[str]  # with a CUDA kv: profiles the CUDA codec lacks, measured on the CPU
    space_size: int
    table_json: Optional[str]      # the labelled Pareto table, None when nothing is feasible
    out: Optional[str] = None      # where the table was written
    # With holdout=: each row scored again, in the order scored ({spec, quality, ci_half_width,
    # samples, search_quality, figure, pareto, kept}; pareto: a row of the search's Pareto table,
    # else a feasible row of the walk; kept: a row of the final table).
    holdout_rows: List[Dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def table(self) -> Any:
        """The Pareto table as a :class:`kvserve.ProfileTable` (None when
        nothing is feasible)."""
        return None if self.table_json is None else _kvserve.ProfileTable.from_json(self.table_json)

    def to_dict(self) -> Dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("table_json")
        return out


def _space(space: SpaceLike) -> Any:
    if isinstance(space, _kvserve.StrategySpace):
        return space
    if isinstance(space, dict):
        return _kvserve.StrategySpace.from_json(json.dumps(space))
    if isinstance(space, (str, os.PathLike)):
        text = os.fspath(space)
        if text.lstrip().startswith("{"):
            return _kvserve.StrategySpace.from_json(text)
        if not os.path.exists(text):
            raise FileNotFoundError(f"space: {text!r} is neither a strategy-space JSON file nor JSON text")
        return _kvserve.StrategySpace.load(text)
    if isinstance(space, (list, tuple)):
        profiles = []
        for item in space:
            if isinstance(item, _kvserve.Profile):
                profiles.append(item)
            elif isinstance(item, str):
                preset = {p.name: p.spec for p in _kvserve.presets()}.get(item, item)
                profiles.append(_kvserve.Profile.parse(preset))
            else:
                raise TypeError(f"space: list items must be Profile objects or spec strings, "
                                f"got {type(item).__name__}")
        if not profiles:
            raise ValueError("space: the list of profiles is empty")
        return _kvserve.StrategySpace.from_profiles(profiles)
    raise TypeError(f"space: expected a path, JSON text, a dict or a list of profile specs, "
                    f"got {type(space).__name__}")


def _head_scores(scores: Any) -> Any:
    if scores is None or isinstance(scores, _kvserve.HeadScores):
        return scores
    if isinstance(scores, (str, os.PathLike)):
        return _kvserve.HeadScores.load(os.fspath(scores))
    return _kvserve.HeadScores(scores)


def _tensors(kv: Any) -> List[Any]:
    if isinstance(kv, (list, tuple)):
        return [t for pair in kv for t in pair]
    return [kv]


def _kv_digest(kv: Any) -> str:
    """A digest of the KV's shape, dtype and bytes (the codec metrics' key)."""
    h = hashlib.blake2b(digest_size=12)
    for t in _tensors(kv):
        h.update(f"{tuple(t.shape)}:{t.dtype};".encode())
        if hasattr(t, "detach"):  # torch (CPU or CUDA): the raw bytes, whatever the dtype
            import torch  # noqa: PLC0415

            flat = t.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy()
        else:
            import numpy  # noqa: PLC0415

            flat = numpy.ascontiguousarray(t).reshape(-1).view(numpy.uint8)
        h.update(memoryview(flat))
    return h.hexdigest()


def _cuda_meter(kv: Any, head_scores: Any, repeats: int, cpu_specs: List[str]) -> Callable[[Any], tuple]:
    """Codec metrics of a CUDA KV cache with the CUDA encoder and decoder:
    CR over every frame byte, throughputs over the logical bytes, the
    fastest of ``repeats`` synchronised runs after a checked warm-up.
    Profiles the CUDA codec does not run (zstd, lz4) are measured with the
    CPU codec on a host copy; their specs are appended to ``cpu_specs``."""
    import torch  # noqa: PLC0415

    shape, dtype = cuda.kv_shape(kv)
    layers, heads, tokens, dim = shape
    logical = layers * 2 * heads * tokens * dim * {"f32": 4, "f16": 2, "bf16": 2}[dtype]

    host: List[Any] = []

    def measure(profile: Any) -> tuple:
        try:
            enc = cuda.CudaEncoder(profile, kv, head_scores=head_scores)
        except _kvserve.KvserveNotSupportedError:
            if not host:
                host.append([(k.cpu(), v.cpu()) for k, v in kv] if isinstance(kv, (list, tuple)) else kv.cpu())
            cpu_specs.append(str(profile))
            m = _kvserve.measure_codec(profile, host[0], None, head_scores, repeats)
            return (m["compression_ratio"], m["encode_bytes_per_second"], m["decode_bytes_per_second"])
        frame = enc.encode(kv, check=True)
        dec = cuda.CudaDecoder(frame)
        out = dec.decode(frame, check=True)
        t_enc = t_dec = math.inf
        for _ in range(repeats):
            torch.cuda.synchronize()
            start = time.perf_counter()
            frame = enc.encode(kv, frame)
            torch.cuda.synchronize()
            t_enc = min(t_enc, time.perf_counter() - start)
            start = time.perf_counter()
            dec.decode(frame, out)
            torch.cuda.synchronize()
            t_dec = min(t_dec, time.perf_counter() - start)
        enc.check()
        dec.check()
        return (logical / len(frame), logical / t_enc, logical / t_dec)

    return measure


class _ProgressLine:
    """The live progress line on stderr: rewritten in place on a terminal,
    one line per evaluation otherwise."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.monotonic()
        self.width = 0

    def note(self, text: str) -> None:
        self.end()
        print(f"kvserve.profile: {text}", file=self.stream, flush=True)

    def __call__(self, p: Dict[str, Any]) -> None:
        line = (f"kvserve.profile: iter {p['iteration']:>3}/{p['budget']}  q={p['quality']:.4f} "
                f"{'feasible  ' if p['feasible'] else 'infeasible'}  best feasible CR "
                f"{p['best_feasible_cr']:.2f}  from db {p['reused']}  remaining {p['remaining']}  "
                f"{time.monotonic() - self.start:.1f} s  {p['spec']}")
        if self.tty:
            pad = max(0, self.width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def end(self) -> None:
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _estimate(value: Any, spec: str) -> Tuple[float, float, int]:
    """(quality, ci_half_width, samples) of what a holdout function returned:
    TypeError for something else than a number or a 1-3 tuple, ValueError for
    a non-finite quality or a negative or non-finite half-width (as the
    search's evaluate() is checked)."""
    if isinstance(value, tuple):
        if not 1 <= len(value) <= 3:
            raise TypeError(f"holdout({spec}): expected a number or a 1-3 tuple, got {len(value)} items")
        q = float(value[0])
        hw = float(value[1]) if len(value) > 1 else 0.0
        n = int(value[2]) if len(value) > 2 else 1
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        q, hw, n = float(value), 0.0, 1
    else:
        raise TypeError(f"holdout({spec}): expected a number or a 1-3 tuple, got {type(value).__name__}")
    if not math.isfinite(q):
        raise ValueError(f"holdout({spec}) returned a non-finite quality")
    if not (math.isfinite(hw) and hw >= 0):
        raise ValueError(f"holdout({spec}) returned a ci_half_width that is negative or not finite")
    return q, hw, n


def _search_floors(quality_min: float, more_floors: Any) -> List[float]:
    """``quality_min``, then the floors of ``more_floors`` above it in
    ascending order without repeats (the CLI's ``SearchFloors``); floors at or
    below ``quality_min`` are ignored. TypeError when ``more_floors`` is not a
    collection of numbers, ValueError for a floor that is not finite."""
    if isinstance(more_floors, (str, bytes)) or not isinstance(more_floors, collections.abc.Iterable):
        raise TypeError(f"more_floors: expected a sequence of quality floors, got {type(more_floors).__name__}")
    stricter = set()
    for floor in more_floors:
        if isinstance(floor, bool) or not isinstance(floor, numbers.Real):
            raise TypeError(f"more_floors: expected numbers, got {type(floor).__name__} {floor!r}")
        if not math.isfinite(floor):
            raise ValueError(f"more_floors: {floor!r} is not a finite quality floor")
        if floor > quality_min:
            stricter.add(float(floor))
    return [quality_min] + sorted(stricter)


_CODEC_KEYS = ("compression_ratio", "encode_bytes_per_second", "decode_bytes_per_second", "overhead_seconds")


def _hold_out(table_json: str, entries: List[Dict[str, Any]], holdout: Evaluate, workload: str,
              floors: List[float], floor_on: str, line: Any) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """The CLI's ``HoldOutTable`` over a labelled search table and the
    search's ``entries`` (``_pareto_table`` dicts at the search figures):
    scores with ``holdout`` every row of the table and, in descending CR, the
    other entries meeting ``floors[0]`` (CR > 1) while some floor of
    ``floors`` that a row's search figure meets has no scored row meeting it
    held out. Returns the table -- the Pareto set of the held-out figures
    (``floor_on``: the interval's lower end or the point estimate) at
    ``floors[0]``, each row with ``quality_search``, ``quality_holdout``,
    ``quality_low`` and ``quality_high`` -- or None when no scored row meets
    ``floors[0]``, and the scored rows in the order scored."""
    doc = json.loads(table_json)
    lower = floor_on == "lower"
    quality_min = floors[0]
    walk: List[Dict[str, Any]] = []
    seen = set()
    for row in doc["profiles"]:
        if row["spec"] == "none":  # raw: quality 1 by definition
            continue
        seen.add(row["spec"])
        walk.append({"spec": row["spec"], "codec": {k: row.get(k, 0.0) for k in _CODEC_KEYS},
                     "search": row["quality"][workload], "pareto": True})
    for e in entries:
        q = e["quality"].get(workload)
        if q is None or q < quality_min or not e["codec"]["compression_ratio"] > 1 or e["spec"] in seen:
            continue
        seen.add(e["spec"])
        walk.append({"spec": e["spec"], "codec": e["codec"], "search": q, "pareto": False})
    walk.sort(key=lambda w: -w["codec"]["compression_ratio"])  # stable: at equal CR, Pareto rows first
    met = [False] * len(floors)
    scored: List[Dict[str, Any]] = []
    held_entries: List[Dict[str, Any]] = []
    extras: Dict[str, Dict[str, Any]] = {}
    for w in walk:
        # Below a row that holds at each floor it meets: only the Pareto rows.
        if not (w["pareto"] or any(not m and w["search"] >= f for m, f in zip(met, floors))):
            continue
        spec = w["spec"]
        q, hw, n = _estimate(holdout(_kvserve.Profile.parse(spec)), spec)
        figure = q - hw if lower else q
        met = [m or figure >= f for m, f in zip(met, floors)]
        extras[spec] = {"quality_search": {workload: w["search"]}, "quality_holdout": {workload: q},
                        "quality_low": {workload: q - hw}, "quality_high": {workload: q + hw}}
        scored.append({"spec": spec, "quality": q, "ci_half_width": hw, "samples": n,
                       "search_quality": w["search"], "figure": figure, "pareto": w["pareto"], "kept": False})
        held_entries.append({"spec": spec, "quality": {workload: figure}, "codec": w["codec"]})
        if line:
            line.note(f"held out{'' if w['pareto'] else ' (feasible, not Pareto)'}: {spec} CR "
                      f"{w['codec']['compression_ratio']:.2f} {q:.4f} ± {hw:.4f} (search {w['search']:.4f})"
                      + ("" if figure >= quality_min else "  below the floor"))
    held = _kvserve._pareto_table(held_entries, workload, quality_min)
    if held is None:
        return None, scored
    profiles = json.loads(held)["profiles"]
    for row in profiles:
        row.update(extras[row["spec"]])
    kept = {row["spec"] for row in profiles}
    for s in scored:
        s["kept"] = s["spec"] in kept
    doc["profiles"] = profiles
    name = getattr(holdout, "name", None) or getattr(holdout, "__qualname__", type(holdout).__qualname__)
    figure_name = "lower end of the 95% interval" if lower else "point estimate"
    doc["quality_kind"] = (f"{doc['quality_kind']}; quality = the {figure_name} on held-out samples ({name}); "
                           f"quality_search: the search's own ({figure_name}), quality_holdout: the held-out "
                           f"point estimate, quality_low / quality_high: its interval")
    return json.dumps(doc, indent=2) + "\n", scored


def profile(space: SpaceLike, evaluate: Evaluate, *, kv: Any, quality_min: float = 0.97,
            budget: int = 80, db: Optional[str] = None, model: str = "model",
            workload: str = "default", sample_set: str = "default", evaluator: Optional[str] = None,
            quality_kind: Optional[str] = None, out: Optional[str] = None, head_scores: Any = None,
            dtype: Optional[str] = None, seed: int = 1, searcher: str = "bayes", repeats: int = 1,
            progress: Union[bool, Callable[[Dict[str, Any]], None]] = True,
            holdout: Optional[Evaluate] = None, floor_on: str = "lower",
            more_floors: Sequence[float] = ()) -> ProfileResult:
    """Searches ``space`` for the profiles with the highest compression ratio
    whose ``evaluate`` quality is at least ``quality_min``, with at most
    ``budget`` calls of ``evaluate`` per search, and returns a
    :class:`ProfileResult`. With ``holdout`` and ``more_floors`` this is
    ``kvserve profile``'s task mode with Python evaluators: the same search
    rule (``floor_on``), held-out walk and stricter floors.

    Args:
        space: a strategy-space JSON file (configs/strategy_space.json), its
            JSON text or dict, a :class:`kvserve.StrategySpace`, or a list of
            profile specs / preset names / :class:`kvserve.Profile`.
        evaluate: ``evaluate(profile) -> quality`` or ``-> (quality,
            ci_half_width, samples)``; called with the GIL held from the
            calling thread. An exception it raises stops the search and is
            raised from here unchanged (finished evaluations stay in ``db``).
        kv: the KV cache CR and codec speed are measured on, in any layout
            :func:`kvserve.encode` takes (a 5-D ``(layers, 2, kv_heads,
            tokens, head_dim)`` array/tensor or per-layer ``(K, V)`` pairs);
            a CUDA tensor is measured with the CUDA codec.
        quality_min: the quality floor (feasible iff quality >= it; with
            ``holdout`` and ``floor_on="lower"``, iff the lower end of the
            95% interval, ``quality - ci_half_width``, is).
        budget: the most ``evaluate`` calls of each search (>= 1); database
            answers count.
        db: SQLite results database path (created if missing); None: a
            private in-memory one (nothing resumes), or with stricter
            ``more_floors`` a temporary file deleted before returning.
        model, workload, sample_set: the scope of the database keys -- name
            what ``evaluate`` measures (a changed model or eval set needs a
            new name). ``workload`` is also the table's workload name.
        evaluator: the evaluator's name in the keys (default
            ``evaluate.name`` if it has one, else ``"python:" + its
            qualified name``).
        quality_kind: what the quality numbers are, written into the table
            (default ``evaluate.quality_kind`` or a generic label).
        out: write the labelled Pareto table here (JSON). Raises
            :class:`NoFeasibleProfileError` if nothing is feasible.
        head_scores: HeadScores, a JSON path or a ``(layers, kv_heads)``
            array; without them mixhq and duo profiles are left out.
        dtype: element type of 16-bit integer ``kv`` buffers ("bf16").
        seed: search seed; searcher: "bayes", "random" or "exhaustive";
        repeats: codec timing runs per profile (the fastest counts).
        progress: True prints a live line on stderr per evaluation, False
            nothing, or a callable receiving each progress dict.
        holdout: a second evaluate function on samples the search never
            scored (e.g. ``TaskEvaluator(..., holdout_of=<search samples>)``).
            With it and ``floor_on="lower"`` the search itself counts a
            profile feasible only when the lower end of its interval meets
            the floor (the database and ``rows`` keep the full estimates).
            The rows scored again with ``holdout``: every row of the
            search's Pareto table and, in descending CR, the searches' other
            feasible rows (search figure >= ``quality_min``, CR > 1) down to
            the first whose held-out figure meets the floor -- at each floor
            of ``quality_min`` and ``more_floors``, so a Pareto row that
            fails out of sample gives way to the highest-CR search-feasible
            profile that holds. The table is then the Pareto set of the
            held-out figures at ``quality_min`` -- by default the lower end
            of the held-out interval (``floor_on="point"``: the point
            estimate) -- and each row keeps ``quality_search`` (the search's
            figure), ``quality_holdout``, ``quality_low`` and
            ``quality_high``. ``result.holdout_rows`` lists every scored
            row. Held-out calls are not stored in ``db``.
        floor_on: "lower" or "point" (see ``holdout``).
        more_floors: stricter floors: after the search at ``quality_min``,
            the same search (seed, budget, searcher, space) runs again at
            each floor above ``quality_min`` (ascending; repeats and floors
            at or below ``quality_min`` are ignored) through the same
            database, so what an earlier search evaluated costs nothing.
            The table is the Pareto set of every search's rows at
            ``quality_min``, so it serves each stricter floor at least as
            well as a search at that floor alone; ``result.rows`` holds
            every search's rows, each with the ``floor`` of its search. Not
            run when nothing meets ``quality_min``.

    Raises ValueError (KvserveInvalidArgumentError) for an empty space, a
    bad ``kv``, ``budget < 1``, an unknown searcher or a non-finite
    ``quality_min`` or ``more_floors`` entry; TypeError for an ``evaluate``
    that is not callable or returns something else than a number or a 1-3
    tuple, and for a ``more_floors`` that is not a sequence of numbers.
    """
    if not callable(evaluate):
        raise TypeError(f"evaluate: expected a callable evaluate(profile), got {type(evaluate).__name__}")
    if holdout is not None and not callable(holdout):
        raise TypeError(f"holdout: expected a callable holdout(profile), got {type(holdout).__name__}")
    if floor_on not in ("lower", "point"):
        raise ValueError(f"floor_on: {floor_on!r} is not 'lower' or 'point'")
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral):
        raise TypeError(f"budget: expected an int, got {type(budget).__name__}")
    budget = int(budget)
    if budget < 1:
        raise ValueError(f"budget: must be >= 1 evaluation, got {budget}")
    quality_min = float(quality_min)
    floors = _search_floors(quality_min, more_floors)
    lower_ends = holdout is not None and floor_on == "lower"
    if kv is None:
        raise ValueError("kv: required (the KV cache CR and codec speed are measured on)")
    space_obj = _space(space)
    scores = _head_scores(head_scores)
    line = _ProgressLine() if progress is True else None
    report = line if line is not None else (progress if callable(progress) else None)
    if scores is None:
        kept = [p for p in space_obj.profiles if p.quantizer not in _HEAD_SCORE_QUANTIZERS]
        if len(kept) < len(space_obj) and kept:
            if line:
                line.note(f"no head_scores: {len(space_obj) - len(kept)} mixhq/duo profiles left out")
            space_obj = _kvserve.StrategySpace.from_profiles(kept)
        elif not kept and len(space_obj):
            raise ValueError("space: every profile is mixhq or duo, which need head_scores")
    if len(space_obj) == 0:
        raise ValueError("space: no profiles to search")
    name = evaluator or getattr(evaluate, "name", None) or \
        "python:" + getattr(evaluate, "__qualname__", type(evaluate).__qualname__)
    measure = None
    codec_device = "cpu"
    cpu_specs: List[str] = []
    if cuda.is_cuda(kv):
        if cuda.available():
            codec_device = f"cuda:{cuda.device_of(kv)}"
            measure = _cuda_meter(kv, scores, repeats, cpu_specs)
        else:  # a CPU-only build: the CPU codec on a host copy
            kv = [(k.cpu(), v.cpu()) for k, v in kv] if isinstance(kv, (list, tuple)) else kv.cpu()
            if line:
                line.note("CUDA kv but a CPU-only build: codec metrics measured with the CPU codec")
    codec_set = f"codec:{codec_device}:repeats={repeats}:kv={_kv_digest(kv)}"
    scratch = tempfile.TemporaryDirectory(prefix="kvserve-profile-") if not db and len(floors) > 1 else None
    db_path = os.fspath(db) if db else (os.path.join(scratch.name, "results.sqlite") if scratch else ":memory:")
    rule = " (lower end of the 95% interval)" if lower_ends else ""
    if line:
        line.note(f"{len(space_obj)} profiles, quality{rule} >= {quality_min}"
                  + (f" (then {', '.join(map(str, floors[1:]))})" if len(floors) > 1 else "")
                  + f", budget {budget}, evaluator {name}, db {db_path if db or not scratch else 'a temporary file'}")
    searches: List[Tuple[float, Dict[str, Any]]] = []
    try:
        for floor in floors:
            if searches and searches[0][1]["best"] < 0:
                if line:
                    line.note(f"nothing meets quality >= {quality_min}: the stricter floors are not searched")
                break
            if searches and line:
                line.note(f"stricter floor: the same search at quality{rule} >= {floor} (budget {budget}, "
                          f"seed {seed}; what an earlier search evaluated comes from the database)")
            raw = _kvserve._profile_search(space_obj, evaluate, None if measure else kv, dtype, measure, scores,
                                           db_path, model, workload, sample_set, codec_set, name, floor, budget,
                                           int(seed), searcher, int(repeats), report, line.note if line else None,
                                           lower_ends)
            searches.append((floor, raw))
            if line and len(floors) > 1:
                line.note(f"quality >= {floor}: stopped: {raw['stop_reason']}; {len(raw['rows'])} evaluations "
                          f"({raw['reused']} from the db), {sum(r['feasible'] for r in raw['rows'])} feasible")
    finally:
        if line:
            line.end()
        if scratch is not None:
            scratch.cleanup()
    rows: List[Evaluation] = []
    figures: List[float] = []  # what each row's search checked against its floor
    entries: List[Dict[str, Any]] = []  # one per spec, first seen, at its search figure: the table's candidates
    seen = set()
    for floor, raw in searches:
        for r in raw["rows"]:
            rows.append(Evaluation(spec=r["spec"], quality=r["quality"], ci_half_width=r["ci_half_width"],
                                   samples=r["samples"], feasible=r["feasible"],
                                   compression_ratio=r["codec"]["compression_ratio"],
                                   encode_bytes_per_second=r["codec"]["encode_bytes_per_second"],
                                   decode_bytes_per_second=r["codec"]["decode_bytes_per_second"],
                                   from_db=r["from_db"], seconds=r["seconds"], floor=floor))
            figures.append(r["search_quality"])
            if r["spec"] not in seen:
                seen.add(r["spec"])
                entries.append({"spec": r["spec"], "quality": {workload: r["search_quality"]}, "codec": r["codec"]})
    first = searches[0][1]
    best = first["best"]
    for i, (row, figure) in enumerate(zip(rows, figures)):  # a stricter search may find more CR at quality_min
        if best >= 0 and figure >= quality_min and row.compression_ratio > rows[best].compression_ratio:
            best = i
    table_json = None
    searched = _kvserve._pareto_table(entries, workload, quality_min) if best >= 0 else None
    if searched is not None:
        doc = json.loads(searched)
        kind = quality_kind or getattr(evaluate, "quality_kind", None) or \
            f"user evaluator {name}: quality relative to uncompressed"
        then = (f" (then again at {', '.join(map(str, floors[1:]))}, budget {budget} each)"
                if len(searches) > 1 else "")
        labelled = {
            "format": doc["format"], "version": doc["version"], "quality_kind": kind,
            "comment": (f"kvserve.profile (Python): {searcher} search, quality{rule} >= {quality_min}{then}, "
                        f"budget {budget}, seed {seed}; {len(entries)} evaluations by {name}; model {model}, "
                        f"sample set {sample_set}. CR and codec throughputs: {codec_device} codec"
                        f"{', 1 thread' if codec_device == 'cpu' else ''}, fastest of {repeats}, "
                        f"on the caller's KV"
                        f"{f' ({len(cpu_specs)} profiles the CUDA codec lacks: CPU codec)' if cpu_specs else ''}."),
            "workloads": doc["workloads"], "profiles": doc["profiles"],
        }
        table_json = json.dumps(labelled, indent=2) + "\n"
    holdout_rows: List[Dict[str, Any]] = []
    if holdout is not None and table_json is not None:
        if line:
            line.note(f"held-out scoring of {len(json.loads(table_json)['profiles'])} Pareto rows (and higher-CR "
                      f"feasible rows until one holds); the table's quality: the held-out "
                      f"{'lower end of the 95% interval' if floor_on == 'lower' else 'point estimate'}")
        table_json, holdout_rows = _hold_out(table_json, entries, holdout, workload, floors, floor_on, line)
    result = ProfileResult(
        rows=rows, best=rows[best] if best >= 0 else None, stop_reason=first["stop_reason"],
        evaluated=sum(not r.from_db for r in rows), reused=sum(raw["reused"] for _, raw in searches),
        codec_measured=sum(raw["codec_measured"] for _, raw in searches), codec_from_db=first["codec_from_db"],
        codec_device=codec_device, codec_cpu_profiles=cpu_specs, space_size=len(space_obj),
        table_json=table_json, holdout_rows=holdout_rows)
    if line:
        best_row = result.best
        line.note(f"stopped: {result.stop_reason}; {len(rows)} evaluations ({result.reused} from the db); "
                  + (f"best feasible {best_row.spec} (CR {best_row.compression_ratio:.3f}, "
                     f"q {best_row.quality:.4f})" if best_row else "nothing feasible"))
    if out is not None:
        if table_json is None:
            why = (f"no evaluated profile reached quality_min {quality_min}" if result.best is None else
                   f"no scored row meets quality_min {quality_min} on the held-out evaluator "
                   f"({floor_on}: " + ", ".join(f"{r['spec']} {r['figure']:.4f}" for r in holdout_rows) + ")"
                   if holdout_rows else
                   f"no feasible profile compresses (CR > 1): {first['table_error']}")
            raise NoFeasibleProfileError(f"{why} ({len(rows)} evaluations); {out} not written", result)
        _write_atomically(os.fspath(out), table_json)
        result.out = os.fspath(out)
    return result
