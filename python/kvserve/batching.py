"""Continuous batching of greedy decode steps, for the decode worker's
engine under concurrent requests.

The library's decode worker serves each prefill connection on a thread of
its own and calls the engine's ``generate`` from each; one request at a
time (:class:`kvserve.generation.Generator` behind a lock) leaves the GPU
reading the model's weights once per token of *one* request. A
:class:`BatchDecoder` runs the decode steps of every admitted request
together: each step reads the weights once for all of them.

Requests are grouped by the capacity their sequence needs (prompt plus new
tokens, rounded up to ``granularity`` times a power of two). Each group
(a *bucket*) has a static cache of ``rows x capacity`` tokens (rows: as
many as fit in the bucket's share of ``cache_budget_bytes``, the budget of
all buckets together, which is that budget over ``keep``; at most
``max_batch``, at least one): one long prompt's bucket never takes the whole
budget, so a short request is admitted beside busy long ones instead of
waiting for them to empty. On a GPU a bucket's step is captured once as a CUDA graph, as
:class:`kvserve.generation.Generator` does for one request. A request is
admitted into a free row of its bucket as soon as one is free (its KV
copied into the row; the row's 4-D additive mask opens exactly its own
positions), steps with the others until it has its tokens, and leaves; the
next waiting request takes the row at once (continuous batching). Each
loop of the scheduler thread runs one step of every bucket with requests.

Why not transformers' own continuous batching (``generate_batch`` and its
paged cache): it takes prompts and runs their prefill itself; it has no
way in for a request whose KV arrives from elsewhere, decoded from a
frame, which is what a disaggregated decode worker serves.

Rows are independent: a row's step reads only its own cache positions and
its own token, so a request's tokens do not depend on which others share
its steps (the tests check that against the same decoder run one request
at a time).
"""
from __future__ import annotations

import collections
import contextlib
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from .generation import Pair, _as_4d, _capture, _device_has, _math_attention, _pieces, _slots_bytes, _tokens


def _torch() -> Any:
    import torch  # noqa: PLC0415

    return torch


def _row_cache(model: Any, rows: Any, capacity: int, pos: Any) -> Any:
    """A cache whose ``update`` writes each row's step K/V at that row's
    device position ``pos[row]`` and returns the whole ``(rows, kv_heads,
    capacity, head_dim)`` buffers (allocated by the first update): a
    transformers ``StaticCache`` for a transformers model, a plain object
    for a model with its own cache (``new_cache()``, e.g. TinyCausalLM)."""
    torch = _torch()

    def update(self: Any, key_states: Any, value_states: Any, layer_idx: int, cache_kwargs: Any = None) -> Any:
        if self.slots[layer_idx] is None:
            shape = (int(rows.shape[0]), key_states.shape[1], capacity, key_states.shape[3])
            self.slots[layer_idx] = (
                torch.zeros(shape, dtype=key_states.dtype, device=key_states.device),
                torch.zeros(shape, dtype=value_states.dtype, device=value_states.device))
        k, v = self.slots[layer_idx]
        k[rows, :, pos] = key_states[:, :, 0]
        v[rows, :, pos] = value_states[:, :, 0]
        return k, v

    if hasattr(model, "new_cache"):
        layers = len(model.model.layers)
        cache = type("RowCache", (), {"update": update})()
    else:
        from transformers import StaticCache  # noqa: PLC0415

        cls = type("RowCache", (StaticCache,), {"update": update, "get_seq_length": lambda self, layer_idx=0: 0})
        cache = cls(config=model.config, max_cache_len=capacity)
        layers = len(getattr(cache, "layers", None) or []) or model.config.num_hidden_layers
    cache.slots = [None] * layers
    return cache


class _Bucket:
    """``rows`` sequences of at most ``capacity`` tokens and their decode
    step (a CUDA graph when ``graphs``)."""

    def __init__(self, model: Any, rows: int, capacity: int, graphs: bool, math_attention: bool) -> None:
        torch = _torch()
        self.model, self.rows, self.capacity = model, rows, capacity
        param = next(model.parameters())
        device = param.device
        self.row_ids = torch.arange(rows, device=device)
        self.ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.pos = torch.full((rows,), capacity - 1, dtype=torch.long, device=device)  # parked
        self.active = torch.zeros((rows,), dtype=torch.long, device=device)
        self.cache = _row_cache(model, self.row_ids, capacity, self.pos)
        self.masked = torch.finfo(param.dtype).min
        self.mask = torch.full((rows, 1, 1, capacity), self.masked, dtype=param.dtype, device=device)
        self.zero = torch.zeros((), dtype=param.dtype, device=device)
        self.requests: List[Optional["_Request"]] = [None] * rows
        self.attention = _math_attention if math_attention else contextlib.nullcontext
        self.graph = None
        if not graphs:
            with torch.no_grad(), self.attention():
                self._step()  # allocates the cache (every row parked)
            return
        self.graph, self.next = _capture(self._step, lambda: None, device, self.attention)

    @property
    def cache_bytes(self) -> int:
        return _slots_bytes(self.cache.slots)

    def _step(self) -> Any:
        # Each row's own step position joins its attended ones (a device
        # zero: a host scalar would be a copy, which a capture refuses).
        self.mask[:, 0, 0].index_put_((self.row_ids, self.pos), self.zero)
        out = self.model(input_ids=self.ids, attention_mask=self.mask, position_ids=self.pos.view(-1, 1),
                         past_key_values=self.cache, cache_position=self.pos[:1], use_cache=True)
        tokens = out.logits[:, -1].argmax(-1)
        self.ids.copy_(tokens.view(-1, 1))
        self.pos.add_(self.active)  # parked rows stay where they are
        return tokens

    def step(self) -> List[int]:
        """One decode step of every row; the next token of each."""
        torch = _torch()
        if self.graph is not None:
            self.graph.replay()
            return self.next.tolist()
        with torch.no_grad(), self.attention():
            return self._step().tolist()

    def free_row(self) -> Optional[int]:
        for row, r in enumerate(self.requests):
            if r is None:
                return row
        return None

    def load(self, row: int, request: "_Request") -> None:
        """Copies the request's KV to the front of ``row`` and opens the
        row's mask over it; the row steps from the request's last token."""
        slots = self.cache.slots
        if len(slots) != len(request.layers):
            raise ValueError(f"{len(request.layers)} layers of KV for a model of {len(slots)}")
        n = request.tokens
        for (k, v), (sk, sv) in zip(request.layers, slots):
            for src, dst in ((k, sk), (v, sv)):
                at = 0
                for piece in _pieces(src):  # chunk by chunk: no whole copy of the KV on the way
                    m = int(piece.shape[-2])
                    dst[row:row + 1, :, at:at + m].copy_(_as_4d(piece))
                    at += m
        self.mask[row].fill_(self.masked)
        self.mask[row, ..., :n].zero_()
        self.pos[row] = n
        self.ids[row, 0] = request.last
        self.active[row] = 1
        self.requests[row] = request
        request.layers = []  # the row holds it now; the received KV can go

    def park(self, row: int) -> None:
        self.active[row] = 0
        self.pos[row] = self.capacity - 1
        self.requests[row] = None

    @property
    def busy(self) -> bool:
        return any(r is not None for r in self.requests)


class _Request:
    def __init__(self, layers: Sequence[Pair], last: int, steps: int) -> None:
        self.layers = list(layers)
        self.tokens = _tokens(layers[0][0]) if self.layers else 0
        self.last, self.steps = int(last), int(steps)
        self.out: List[int] = []
        self.submitted = time.monotonic()
        self.loaded_at = 0.0
        self.first_at = 0.0
        self.error: Optional[BaseException] = None
        self.done = threading.Event()


class BatchResult:
    """What :meth:`BatchDecoder.generate` returns: ``tokens``, and seconds
    from the call to the request's KV being in its row (``load_seconds``:
    the wait for a free row included) and to its first token
    (``first_token_seconds``)."""

    def __init__(self, tokens: List[int], load_seconds: float, first_token_seconds: float) -> None:
        self.tokens, self.load_seconds, self.first_token_seconds = tokens, load_seconds, first_token_seconds


class Pending:
    """A submitted request (:meth:`BatchDecoder.submit`)."""

    def __init__(self, request: _Request) -> None:
        self._request = request

    def result(self) -> BatchResult:
        """Waits for the request; its :class:`BatchResult`, or raises what
        failed it."""
        r = self._request
        r.done.wait()
        if r.error is not None:
            raise r.error
        if r.steps <= 0:
            return BatchResult([], 0.0, 0.0)
        return BatchResult(r.out, r.loaded_at - r.submitted, r.first_at - r.submitted)


class BatchDecoder:
    """Continuous batching of greedy decode steps of ``model`` (see the
    module docstring). Thread-safe: any number of threads call
    :meth:`generate` at once; one scheduler thread runs every step.

    ``max_batch``: rows per bucket at most; ``cache_budget_bytes``: the
    buckets' static caches together at most (a bucket's rows are cut to
    fit, one row always; a request waits while not even that fits beside
    the busy buckets);
    ``granularity``: the smallest capacity (capacities are it times powers
    of two); ``keep``: buckets kept for reuse (a GPU bucket is a cache
    and a captured graph; idle ones beyond it go), and the budget's shares
    (a bucket's rows fit ``cache_budget_bytes / keep``); ``graphs``: capture each bucket's step as a CUDA
    graph (default: a transformers model on a CUDA device);
    ``math_attention``: as :class:`kvserve.generation.Generator`;
    ``start``: start the scheduler now (else :meth:`start`)."""

    def __init__(self, model: Any, *, max_batch: int = 8, cache_budget_bytes: int = 8 << 30,
                 granularity: int = 1024, keep: int = 4, graphs: Optional[bool] = None,
                 math_attention: Optional[bool] = None, start: bool = True) -> None:
        if max_batch < 1 or granularity < 1 or keep < 0 or cache_budget_bytes < 1:
            raise ValueError("max_batch and granularity must be >= 1, keep >= 0, cache_budget_bytes > 0")
        torch = _torch()
        self.model = model
        param = next(model.parameters())
        self.device = param.device
        if graphs is None:
            graphs = self.device.type == "cuda" and not hasattr(model, "new_cache")
        self.graphs = bool(graphs)
        if math_attention is None:
            math_attention = torch.are_deterministic_algorithms_enabled()
        self.math_attention = bool(math_attention)
        self.max_batch, self.cache_budget_bytes = max_batch, cache_budget_bytes
        self.granularity, self.keep = granularity, keep
        self._buckets: "collections.OrderedDict[int, _Bucket]" = collections.OrderedDict()
        self._waiting: Dict[int, Deque[_Request]] = collections.defaultdict(collections.deque)
        self._cv = threading.Condition()
        self._stop = False
        self._bytes_per_token = 0
        # What the scheduler did: steps run, rows that stepped summed over
        # them, the most rows in one step, the most buckets stepped in one
        # loop, seconds spent stepping, requests completed.
        self.stats = {"steps": 0, "row_steps": 0, "most_rows": 0, "most_buckets": 0, "step_seconds": 0.0,
                      "requests": 0}
        self._thread: Optional[threading.Thread] = None
        if start:
            self.start()

    def start(self) -> None:
        """Starts the scheduler thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kvserve-batch-decoder", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stops the scheduler; requests still waiting fail with RuntimeError."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()

    def waiting(self) -> int:
        """Requests submitted and not yet in a row."""
        with self._cv:
            return sum(len(q) for q in self._waiting.values())

    def capacity_for(self, tokens: int) -> int:
        """The bucket capacity of a sequence of ``tokens`` tokens."""
        capacity = self.granularity
        while capacity < tokens:
            capacity *= 2
        return capacity

    def rows_for(self, capacity: int) -> int:
        """Rows of the bucket of ``capacity``: as many as its share of the
        budget (``cache_budget_bytes`` over ``keep``) holds, at most
        ``max_batch``, at least one (known once a request has shown the
        KV's bytes per token; ``max_batch`` before)."""
        if not self._bytes_per_token:
            return self.max_batch
        share = self.cache_budget_bytes // max(1, self.keep)
        return max(1, min(self.max_batch, share // (capacity * self._bytes_per_token)))

    def generate(self, layers: Sequence[Pair], last: int, steps: int) -> BatchResult:
        """``steps`` greedy tokens after ``last`` from ``layers`` (per model
        layer ``(K, V)``, ``(kv_heads, tokens, head_dim)`` or with a
        leading batch of 1, on the model's device, or each a list of such
        pieces along tokens), stepped with whatever other requests are
        admitted. Blocks until done (the GIL released while it waits);
        raises what failed the request (RuntimeError once closed)."""
        return self.submit(layers, last, steps).result()

    def submit(self, layers: Sequence[Pair], last: int, steps: int) -> "Pending":
        """:meth:`generate` without waiting: the request joins the queue of
        its bucket now; ``.result()`` waits for it."""
        request = _Request(layers, last, steps)
        if steps <= 0:
            request.done.set()
            return Pending(request)
        k = _as_4d(_pieces(layers[0][0])[0])
        with self._cv:
            if self._stop:
                raise RuntimeError("the batch decoder is closed")
            if not self._bytes_per_token:
                self._bytes_per_token = 2 * len(layers) * int(k.shape[1]) * int(k.shape[3]) * \
                    next(self.model.parameters()).element_size()
            self._waiting[self.capacity_for(request.tokens + steps)].append(request)
            self._cv.notify_all()
        return Pending(request)

    # -- the scheduler thread --------------------------------------------

    def _room_for(self, capacity: int, rows: int) -> bool:
        """Whether the device has room for a bucket (its cache and as much
        again for the step's activations); always on the CPU."""
        return self.device.type != "cuda" or _device_has(self.device, 2 * self._cache_bytes(rows, capacity))

    def _cache_bytes(self, rows: int, capacity: int) -> int:
        return rows * capacity * self._bytes_per_token

    def _drop(self, capacity: int) -> None:
        del self._buckets[capacity]
        if self.device.type == "cuda":
            _torch().cuda.empty_cache()

    def _bucket(self, capacity: int) -> Optional[_Bucket]:
        """The bucket of ``capacity``, made when there is none: idle buckets
        (least recently used first) go while more than ``keep`` exist or
        while the buckets' caches together would exceed
        ``cache_budget_bytes`` or the device lacks room; the new one gets
        the rows that then fit (at least one). None when not even one row
        fits beside the busy buckets (the request waits for them)."""
        bucket = self._buckets.get(capacity)
        if bucket is not None:
            self._buckets.move_to_end(capacity)
            return bucket
        rows = self.rows_for(capacity)

        def used() -> int:
            return sum(self._cache_bytes(b.rows, b.capacity) for b in self._buckets.values())

        for cap in list(self._buckets):
            over = len(self._buckets) >= max(1, self.keep) or \
                used() + self._cache_bytes(rows, capacity) > self.cache_budget_bytes or \
                not self._room_for(capacity, rows)
            if over and not self._buckets[cap].busy:
                self._drop(cap)
        if self._buckets:
            left = self.cache_budget_bytes - used()
            rows = min(rows, left // self._cache_bytes(1, capacity))
            if rows < 1 or not self._room_for(capacity, rows):
                return None  # wait for a busy bucket to empty
        try:
            bucket = _Bucket(self.model, rows, capacity, self.graphs, self.math_attention)
        except _torch().cuda.OutOfMemoryError:
            if not self._buckets:
                raise
            _torch().cuda.empty_cache()
            return None  # wait for a busy bucket to empty
        self._buckets[capacity] = bucket
        return bucket

    def _admit(self) -> None:
        with self._cv:
            waiting = {cap: q for cap, q in self._waiting.items() if q}
        for capacity, queue in waiting.items():
            while True:
                with self._cv:
                    if not queue:
                        break
                try:
                    bucket = self._bucket(capacity)
                except Exception as e:  # noqa: BLE001 -- fail the waiting requests, keep serving
                    with self._cv:
                        while queue:
                            self._fail(queue.popleft(), e)
                    break
                if bucket is None:
                    break
                row = bucket.free_row()
                if row is None:
                    break
                with self._cv:
                    request = queue.popleft()
                try:
                    bucket.load(row, request)
                    request.loaded_at = time.monotonic()
                except Exception as e:  # noqa: BLE001
                    bucket.park(row)
                    self._fail(request, e)

    @staticmethod
    def _fail(request: _Request, error: BaseException) -> None:
        request.error = error
        request.done.set()

    def _run(self) -> None:
        torch = _torch()
        while True:
            with self._cv:
                while not self._stop and not any(self._waiting.values()) and \
                        not any(b.busy for b in self._buckets.values()):
                    self._cv.wait()
                if self._stop:
                    for queue in self._waiting.values():
                        while queue:
                            self._fail(queue.popleft(), RuntimeError("the batch decoder is closed"))
                    for bucket in self._buckets.values():
                        for row, r in enumerate(bucket.requests):
                            if r is not None:
                                self._fail(r, RuntimeError("the batch decoder is closed"))
                                bucket.park(row)
                    return
            with torch.no_grad():
                self._admit()
                busy = [b for b in self._buckets.values() if b.busy]
                self.stats["most_buckets"] = max(self.stats["most_buckets"], len(busy))
                for bucket in busy:
                    self._step(bucket)

    def _step(self, bucket: _Bucket) -> None:
        start = time.monotonic()
        try:
            tokens = bucket.step()
        except Exception as e:  # noqa: BLE001 -- the bucket's requests fail; the bucket goes
            for row, r in enumerate(bucket.requests):
                if r is not None:
                    bucket.park(row)
                    self._fail(r, e)
            self._buckets.pop(bucket.capacity, None)
            return
        now = time.monotonic()
        rows = 0
        for row, r in enumerate(bucket.requests):
            if r is None:
                continue
            rows += 1
            if not r.out:
                r.first_at = now
            r.out.append(int(tokens[row]))
            if len(r.out) >= r.steps:
                bucket.park(row)
                self.stats["requests"] += 1
                r.done.set()
        self.stats["steps"] += 1
        self.stats["row_steps"] += rows
        self.stats["most_rows"] = max(self.stats["most_rows"], rows)
        self.stats["step_seconds"] += now - start
