"""Greedy generation from a KV cache, for the PD decode worker and the
single-process reference it is checked against.

A decode step of a transformers model run eagerly launches hundreds of
small kernels from Python. For the 8B model on an H200 the PD sweep of
commit 12c9d97 measured 36-71 ms a step (5th-95th percentile of its
1,092 steps, ``step_seconds`` in docs/results/e2e-gpu.json at that
commit); the same steps replayed from a CUDA graph took 10.7-11.5 ms at
2K tokens in the run of faa07ee (cuDNN attention), and 16.3-16.7 ms with
SDPA's math backend in the run of 46a1ec2 (docs/results/e2e-gpu.json).
Serving engines replay each decode step from a CUDA graph;
:class:`Generator` does the same for a transformers model on a CUDA
device: the request's KV is copied into a static cache of a fixed
capacity (prompt plus new tokens rounded up to a multiple of
``granularity``; one cache and one captured step per capacity, the
``keep`` most recently used kept for later requests), and each step is
one graph replay that runs the model on the last token, takes the argmax
and feeds it to the next replay. The step brings its own position ids,
its own write slot (the cache's ``update`` writes at the step's
position) and its own 4-D additive attention mask (transformers uses a
4-D mask as given): 0 over the positions written so far, the dtype's
minimum elsewhere, so what earlier requests left past this one's
positions is never attended to. (With a mask, transformers' SDPA path
repeats the KV heads for grouped-query attention, a copy of the cache
per layer and step; a tight capacity keeps that small.)

With that mask SDPA picks cuDNN's attention on an H200 (torch 2.11; its
kernels in the probe's list), which does not repeat bit for bit: 6 replays of one
captured step on the same cache gave 2-3 different greedy token sequences
of the 8B random-weight model at 2K and 8K tokens, first differing at step
0-10 (random weights make many bf16 logits tie). Under torch's
deterministic mode (``torch.use_deterministic_algorithms``, what
:func:`kvserve.pd.deterministic` and ``--check`` turn on) a
:class:`Generator` captures its step with SDPA's math backend instead:
bit-equal logits in every replay at 2K, 8K and 32K tokens, at 17.3, 32.1
and 90.2 ms a step against cuDNN's 12.6, 17.8 and 38.9 ms
(``bench/generation_determinism.py``, output in
docs/results/generation-determinism-h200.json).

Anything else (a CPU model, a model with its own cache such as
:func:`kvserve.pd.TinyCausalLM`, ``graphs=False``) runs the steps eagerly
on a ``DynamicCache``. The two paths compute with different kernels, so
tokens are comparable only between runs of the same path: a decode worker
and its single-process reference both use a :class:`Generator`.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import OrderedDict
from typing import Any, List, Optional, Sequence, Tuple

Pair = Tuple[Any, Any]


def _torch() -> Any:
    import torch  # noqa: PLC0415

    return torch


def _new_cache(model: Any) -> Any:
    """An empty cache for an eager run: the model's own ``new_cache()``
    (:func:`kvserve.pd.TinyCausalLM`) or a transformers ``DynamicCache``."""
    if hasattr(model, "new_cache"):
        return model.new_cache()
    from transformers import DynamicCache  # noqa: PLC0415

    return DynamicCache()


def _as_4d(t: Any) -> Any:
    """``(1, kv_heads, tokens, head_dim)`` from a 3-D or 4-D tensor."""
    return t if t.dim() == 4 else t[None]


def _pieces(t: Any) -> Sequence[Any]:
    """A layer's K or V as its pieces along tokens: a list or tuple of
    tensors (e.g. one per prefix-pool chunk) as it is, a tensor as one."""
    return t if isinstance(t, (list, tuple)) else [t]


def _tokens(t: Any) -> int:
    return sum(int(p.shape[-2]) for p in _pieces(t))


def _whole(t: Any) -> Any:
    """The pieces of ``t`` as one tensor along tokens."""
    pieces = _pieces(t)
    return pieces[0] if len(pieces) == 1 else _torch().cat([_as_4d(p) for p in pieces], dim=2)


def _slot_cache(model: Any, capacity: int, pos: Any) -> Any:
    """A transformers ``StaticCache`` whose ``update`` writes the step's
    K/V at the device position ``pos`` (per layer, ``(1, kv_heads,
    capacity, head_dim)`` buffers allocated by the first update) and
    returns the whole buffers. The write slot and the positions are this
    module's, not the library's: how transformers derives a position from a
    static cache (``cache_position``, or counting the slots that hold
    non-zero keys) differs between versions, and a count would see what
    earlier requests left."""
    from transformers import StaticCache  # noqa: PLC0415

    torch = _torch()

    class SlotCache(StaticCache):  # type: ignore[misc, valid-type]
        def update(self, key_states: Any, value_states: Any, layer_idx: int,
                   cache_kwargs: Any = None) -> Tuple[Any, Any]:
            if self.slots[layer_idx] is None:
                shape = (1, key_states.shape[1], capacity, key_states.shape[3])
                self.slots[layer_idx] = (
                    torch.zeros(shape, dtype=key_states.dtype, device=key_states.device),
                    torch.zeros(shape, dtype=value_states.dtype, device=value_states.device))
            k, v = self.slots[layer_idx]
            k.index_copy_(2, pos, key_states)
            v.index_copy_(2, pos, value_states)
            return k, v

        def get_seq_length(self, layer_idx: int = 0) -> int:
            return 0  # positions come from the step's own position_ids and mask

    cache = SlotCache(config=model.config, max_cache_len=capacity)
    layers = getattr(cache, "layers", None)
    cache.slots = [None] * (len(layers) if layers else model.config.num_hidden_layers)
    return cache


def _math_attention() -> Any:
    """A context in which SDPA runs its math backend (batched matmuls and a
    softmax, which repeat bit for bit; a no-op context on a torch without
    ``torch.nn.attention``): for the masked decode step SDPA otherwise
    picks a kernel whose results vary between replays (see the module
    docstring)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415
    except ImportError:
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])


def _capture(step: Any, before: Any, device: Any, attention: Any) -> Tuple[Any, Any]:
    """``step()`` (a decode step on static tensors) run twice on a side
    stream as a warm-up (the cache's allocation, kernel choices), then
    captured as a CUDA graph; ``before()`` runs ahead of each (e.g. parking
    the write position). Returns (graph, the captured step's output)."""
    torch = _torch()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.no_grad(), torch.cuda.stream(side), attention():
        for _ in range(2):
            before()
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    before()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), attention(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = step()
    torch.cuda.current_stream(device).synchronize()
    return graph, out


def _device_has(device: Any, need_bytes: float) -> bool:
    """Whether CUDA ``device`` has ``need_bytes`` free, counting memory
    torch's allocator holds unused."""
    torch = _torch()
    free, _ = torch.cuda.mem_get_info(device)
    idle = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return free + idle >= need_bytes


def _slots_bytes(slots: Sequence[Any]) -> int:
    """Bytes of a static cache's K/V buffers (``None`` slots not yet allocated)."""
    return sum(t.numel() * t.element_size() for slot in slots if slot is not None for t in slot)


class _GraphStep:
    """One cache of ``capacity`` tokens and a decode step captured on it:
    input token and position live in device tensors the replay advances
    itself; the step passes its own position ids and 4-D mask."""

    def __init__(self, model: Any, capacity: int, math_attention: bool) -> None:
        torch = _torch()
        self.model, self.capacity = model, capacity
        param = next(model.parameters())
        device = param.device
        self.ids = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.pos = torch.zeros((1,), dtype=torch.long, device=device)
        self.cache = _slot_cache(model, capacity, self.pos)
        self.masked = torch.finfo(param.dtype).min
        self.mask = torch.full((1, 1, 1, capacity), self.masked, dtype=param.dtype, device=device)
        # The warm-up and the capture write only the last slot.
        attention = _math_attention if math_attention else contextlib.nullcontext
        self.graph, self.next = _capture(self._step, lambda: self.pos.fill_(capacity - 1), device, attention)
        if any(slot is None for slot in self.cache.slots):
            raise RuntimeError("the model's forward did not update every layer of the cache")

    @property
    def cache_bytes(self) -> int:
        """Bytes of this step's K/V buffers."""
        return _slots_bytes(self.cache.slots)

    def _step(self) -> Any:
        self.mask.index_fill_(3, self.pos, 0.0)  # this step's own position joins the attended ones
        out = self.model(input_ids=self.ids, attention_mask=self.mask, position_ids=self.pos.view(1, 1),
                         past_key_values=self.cache, cache_position=self.pos, use_cache=True)
        token = out.logits[0, -1].argmax()
        self.ids.copy_(token.view(1, 1))
        self.pos.add_(1)
        return token

    def load(self, layers: Sequence[Pair]) -> int:
        """Copies ``layers`` (per layer ``(K, V)``, each ``(kv_heads,
        tokens, head_dim)`` or with a leading batch of 1) to the front of
        the cache; returns the token count."""
        slots = self.cache.slots
        if len(slots) != len(layers):
            raise ValueError(f"{len(layers)} layers of KV for a model of {len(slots)}")
        tokens = _tokens(layers[0][0])
        for (k, v), (sk, sv) in zip(layers, slots):
            for src, dst in ((k, sk), (v, sv)):
                at = 0
                for piece in _pieces(src):  # chunk by chunk: no whole copy of the KV on the way
                    n = int(piece.shape[-2])
                    dst[:, :, at:at + n].copy_(_as_4d(piece))
                    at += n
        self.mask[..., :tokens].zero_()
        self.mask[..., tokens:].fill_(self.masked)
        return tokens

    def run(self, tokens: int, last: int, steps: int, step_seconds: List[float]) -> List[int]:
        self.ids.fill_(last)
        self.pos.fill_(tokens)
        out = []
        for _ in range(steps):
            start = time.monotonic()
            self.graph.replay()
            out.append(int(self.next))
            step_seconds.append(time.monotonic() - start)
        return out


class Generator:
    """Greedy decode steps of ``model`` from a given KV cache (see the
    module docstring). ``graphs``: replay CUDA graphs (default: when the
    model is a transformers model on a CUDA device). Not thread-safe; the
    ``keep`` most recent captured steps and their caches stay allocated for
    reuse (each ``capacity x`` the KV of one token, e.g. 4.4 GB for 33K
    tokens of an 8B Llama, plus its graph's activations).
    ``math_attention``: capture the step with SDPA's math backend, which
    repeats bit for bit (default: when torch's deterministic algorithms
    are enabled at construction); else SDPA's own choice, faster and not
    repeatable (see the module docstring)."""

    def __init__(self, model: Any, *, graphs: Optional[bool] = None, granularity: int = 1024,
                 keep: int = 4, math_attention: Optional[bool] = None) -> None:
        if granularity < 1 or keep < 1:
            raise ValueError("granularity and keep must be >= 1")
        self.model = model
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        if graphs is None:
            graphs = self.device.type == "cuda" and not hasattr(model, "new_cache")
        self.graphs = bool(graphs)
        self.granularity, self.keep = granularity, keep
        if math_attention is None:
            math_attention = _torch().are_deterministic_algorithms_enabled()
        self.math_attention = bool(math_attention)
        self._steps: "OrderedDict[int, _GraphStep]" = OrderedDict()  # least recently used first
        self.step_seconds: List[float] = []  # the last call's, one per step
        self.load_seconds = 0.0              # the last call's copy of the KV into the cache

    def capacity_for(self, tokens: int) -> int:
        """The static cache capacity a sequence of ``tokens`` tokens uses."""
        return max(1, -(-tokens // self.granularity)) * self.granularity

    @property
    def capacities(self) -> List[int]:
        """The capacities with a captured step, least recently used first."""
        return list(self._steps)

    def _room_for(self, capacity: int) -> bool:
        """Whether the device has room for a step of ``capacity`` tokens
        (its cache and about as much again for the graph's activations)
        beside the kept ones, counting memory torch's allocator holds
        unused; always on the CPU."""
        if self.device.type != "cuda" or not self._steps:
            return True
        last = next(reversed(self._steps.values()))
        return _device_has(self.device, 2 * last.cache_bytes * capacity / last.capacity)

    def release(self) -> None:
        """Drops every kept step (its cache and graph pool) and, on a GPU,
        returns the memory torch's allocator holds unused to the device,
        where another process may need it; the next call captures anew."""
        self._steps.clear()
        if self.device.type == "cuda":
            _torch().cuda.empty_cache()

    def _step_for(self, tokens: int) -> Optional[_GraphStep]:
        """The captured step for ``tokens``; None (and eager steps from now
        on, said once on stderr) when this model cannot be captured."""
        capacity = self.capacity_for(tokens)
        if capacity in self._steps:
            self._steps.move_to_end(capacity)
        else:
            while len(self._steps) >= self.keep or (self._steps and not self._room_for(capacity)):
                self._steps.popitem(last=False)  # its cache and graph pool go with it
                if self.device.type == "cuda":
                    _torch().cuda.empty_cache()
            try:
                self._steps[capacity] = _GraphStep(self.model, capacity, self.math_attention)
            except Exception as e:  # noqa: BLE001 -- any capture failure: run eagerly, say why
                print(f"kvserve.generation: CUDA graph capture failed ({type(e).__name__}: {e}); "
                      "decode steps run eagerly", file=sys.stderr, flush=True)
                self.graphs = False
                return None
        return self._steps[capacity]

    def generate(self, layers: Sequence[Pair], last: int, steps: int) -> List[int]:
        """``steps`` greedy tokens after ``last`` (the token that follows
        the cached ones, which the cache does not hold yet) from ``layers``:
        per model layer ``(K, V)``, ``(kv_heads, tokens, head_dim)`` or with
        a leading batch of 1, on any device and dtype (copied), or each a
        list of such pieces along tokens (copied one by one). Sets
        :attr:`step_seconds` and :attr:`load_seconds`."""
        torch = _torch()
        self.step_seconds = []
        start = time.monotonic()
        if steps <= 0:
            self.load_seconds = 0.0
            return []
        cached = _tokens(layers[0][0])
        step = self._step_for(cached + steps) if self.graphs else None
        if step is not None:
            with torch.no_grad():
                tokens = step.load(layers)
                self.load_seconds = time.monotonic() - start
                return step.run(tokens, last, steps, self.step_seconds)
        with torch.no_grad():
            cache = _new_cache(self.model)
            for l, (k, v) in enumerate(layers):
                cache.update(_as_4d(_whole(k)).to(device=self.device, dtype=self.dtype),
                             _as_4d(_whole(v)).to(device=self.device, dtype=self.dtype), l)
            self.load_seconds = time.monotonic() - start
            out = []
            for _ in range(steps):
                t = time.monotonic()
                o = self.model(input_ids=torch.tensor([[last]], device=self.device), past_key_values=cache,
                               use_cache=True)
                cache = o.past_key_values
                last = int(o.logits[0, -1].argmax())
                out.append(last)
                self.step_seconds.append(time.monotonic() - t)
        return out
