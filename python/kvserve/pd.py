"""Prefill/decode disaggregation in Python over kvserve's own transport.

A :class:`PrefillWorker` runs a causal LM's prefill with a forward hook on
every decoder layer: as soon as layer ``l`` finishes, its KV is handed to a
sender thread that encodes it (``Encoder.encode_layer``) and streams its
chunk records over a :class:`kvserve.transport.Connection` while the next
layers run. A :class:`DecodeWorker` decodes each record into its cache as
it arrives (``transport.receive_kv``), then generates greedily from that
cache (:mod:`kvserve.generation`). The profile per request is fixed
(``"none"``, ``"kivi-2"``, ...) or chosen by a :class:`kvserve.Controller`
from the bandwidth the connection measured, the request's SLO, its quality
floor and the prefill's predicted time, which the streamed latency model
overlaps the movement with (``method="kvserve"``); the controller's bandit
then learns from the measured KV time after the prefill.

Models follow the transformers calling convention (``model(input_ids=...,
past_key_values=cache, use_cache=True)`` returning ``.logits`` and
``.past_key_values``; decoder layers at ``model.model.layers``; a cache
object updated in place, as ``DynamicCache``). :class:`TinyCausalLM` is a
seeded toy of that shape for CPU runs and tests (its timings say nothing
about serving). For a model on a CUDA device the GPU codec
(:mod:`kvserve.cuda`) encodes in the hooks and decodes on the receiver:
pack profiles layer by layer (each layer's records are sent as soon as they
are copied out), rANS profiles layer by layer into one device frame that is
sent when the last layer is encoded (its record sizes exist only then);
profiles the GPU codec lacks (zstd, lz4) use the CPU codec on a host copy.

Wire protocol on one connection (message types from
``transport.FIRST_USER_TYPE``): REQUEST (JSON: id, prompt length,
max_new_tokens, profile) before the prefill starts; the frame (transfer id
= request id), streamed during prefill; FIRST (JSON: the prefill's next
token, prefill seconds) once the prefill ended; the decode side answers
RESULT (JSON: tokens and its timings). STOP ends the decode side's loop.

Run both sides in one command: ``python -m kvserve.pd --help``.
"""
from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import os
import queue
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import kvserve
from kvserve import generation, hf, transport

MSG_REQUEST = transport.FIRST_USER_TYPE
MSG_FIRST = transport.FIRST_USER_TYPE + 1
MSG_RESULT = transport.FIRST_USER_TYPE + 2
MSG_STOP = transport.FIRST_USER_TYPE + 3
MSG_ERROR = transport.FIRST_USER_TYPE + 4
MSG_LANES = transport.FIRST_USER_TYPE + 5  # prefill -> decode: {"lanes": n, "token": t}, n connections follow
MSG_LANE = transport.FIRST_USER_TYPE + 6   # first message of each such lane: {"token": t}

_DTYPES = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16"}
# Entropy stages the CUDA codec runs (zstd and lz4 frames use the CPU codec).
GPU_CODECS = hf.GPU_CODECS
RAW_SPEC = "none"  # the raw profile's spec (table index 0)


def _torch():
    import torch  # noqa: PLC0415  (torch is optional for the rest of the package)

    return torch


# ---------------------------------------------------------------------------------------------
# Models


def decoder_layers(model: Any) -> Sequence[Any]:
    """The decoder layer modules of a transformers causal LM (``model.model.layers``)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise TypeError(f"{type(model).__name__}: no model.model.layers to hook (a transformers "
                        "decoder-only LM, or TinyCausalLM, is expected)")
    return layers


def new_cache(model: Any) -> Any:
    """An empty cache the model updates in place: the model's own
    ``new_cache()`` when it has one, else transformers' ``DynamicCache``."""
    if hasattr(model, "new_cache"):
        return model.new_cache()
    from transformers import DynamicCache  # noqa: PLC0415

    return DynamicCache()


class ListCache:
    """The part of transformers' cache interface TinyCausalLM uses:
    ``update(k, v, layer)`` appends along the token axis and returns the
    layer's whole K and V; ``key_cache`` / ``value_cache`` hold them."""

    def __init__(self) -> None:
        self.key_cache: List[Any] = []
        self.value_cache: List[Any] = []

    def update(self, k: Any, v: Any, layer: int):
        torch = _torch()
        if layer == len(self.key_cache):
            self.key_cache.append(k)
            self.value_cache.append(v)
        else:
            self.key_cache[layer] = torch.cat([self.key_cache[layer], k], dim=2)
            self.value_cache[layer] = torch.cat([self.value_cache[layer], v], dim=2)
        return self.key_cache[layer], self.value_cache[layer]

    def get_seq_length(self) -> int:
        return int(self.key_cache[0].shape[2]) if self.key_cache else 0


def _tiny_classes():
    torch = _torch()

    class Layer(torch.nn.Module):
        def __init__(self, index: int, width: int, heads: int, head_dim: int, g: Any) -> None:
            super().__init__()
            self.index, self.heads, self.head_dim = index, heads, head_dim
            self.sharpness = 8.0  # peaked attention: outputs depend on individual past tokens
            self.w = torch.nn.Parameter(torch.randn(3, width, width, generator=g) / width ** 0.5)

        def forward(self, x: Any, cache: Any) -> Any:
            n, h, d = x.shape[0], self.heads, self.head_dim
            q, k, v = ((x @ self.w[i]).view(n, h, d).transpose(0, 1) for i in range(3))
            k, v = cache.update(k[None], v[None], self.index)
            k, v = k[0], v[0]
            total = k.shape[1]
            pos = torch.arange(total - n, total, device=x.device)[:, None]
            bias = torch.where(torch.arange(total, device=x.device)[None, :] <= pos, 0.0, float("-inf")).to(q.dtype)
            att = torch.softmax(q @ k.transpose(1, 2) * (self.sharpness / d ** 0.5) + bias, dim=-1)
            # No residual, RMS-normalised: every generated token depends on
            # the KV it attended to, and logits stay in a range where it shows.
            y = (att @ v).transpose(0, 1).reshape(n, h * d)
            return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)

    class Inner(torch.nn.Module):
        def __init__(self, layers: Any) -> None:
            super().__init__()
            self.layers = layers

    class Model(torch.nn.Module):
        def __init__(self, vocab: int = 96, heads: int = 2, head_dim: int = 32, layers: int = 4,
                     seed: int = 0) -> None:
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            width = heads * head_dim
            self.emb = torch.nn.Parameter(torch.randn(vocab, width, generator=g))
            self.model = Inner(torch.nn.ModuleList(
                [Layer(i, width, heads, head_dim, g) for i in range(layers)]))
            self.config = type("Config", (), {"num_hidden_layers": layers, "vocab_size": vocab,
                                              "name_or_path": f"tiny-seed{seed}"})()

        def new_cache(self) -> ListCache:
            return ListCache()

        def forward(self, input_ids: Any, past_key_values: Any = None, use_cache: bool = True,
                    **_: Any) -> Any:
            cache = past_key_values if past_key_values is not None else ListCache()
            x = self.emb[input_ids[0]]
            for layer in self.model.layers:
                x = layer(x, cache)
            logits = x @ self.emb.T / self.emb.shape[1] ** 0.5
            return type("Out", (), {"logits": logits[None], "past_key_values": cache})()

    return Model


def TinyCausalLM(vocab: int = 96, heads: int = 2, head_dim: int = 32, layers: int = 4,
                 seed: int = 0) -> Any:
    """A seeded toy decoder-only LM with the transformers structure (decoder
    layers at ``model.model.layers``, a cache updated in place): real
    attention over the KV it is given, so generated tokens depend on every
    KV byte. For CPU runs and tests; not a language model."""
    return _tiny_classes()(vocab, heads, head_dim, layers, seed).eval()


def load_model(name: str, device: str = "cpu", seed: int = 0) -> Any:
    """``"tiny"``: :func:`TinyCausalLM`. ``"llama-8b-random"``: the
    Llama-3.1-8B architecture (32 layers, 8 KV heads, head_dim 128) with
    seeded random weights in bf16, for timing only (its KV sizes and
    prefill times are real, its tokens are not). Anything else: a
    transformers checkpoint directory or hub name (e.g.
    ``models/kvs-qwen2-9m``)."""
    torch = _torch()
    if name == "tiny":
        return TinyCausalLM(seed=seed).to(device)
    from transformers import AutoModelForCausalLM  # noqa: PLC0415

    if name == "llama-8b-random":
        from transformers import LlamaConfig  # noqa: PLC0415

        config = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                             num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                             max_position_embeddings=131072, rope_theta=500000.0)
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
        return model.eval()
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    return AutoModelForCausalLM.from_pretrained(name, torch_dtype=dtype).to(device).eval()


def last_logits_only(model: Any) -> Dict[str, Any]:
    """Forward kwargs that make a transformers model compute logits for the
    last position only (``logits_to_keep=1``) when its forward takes them:
    a 32K-token prefill of a 128K-vocabulary model otherwise materialises
    8 GB of logits nobody reads. Empty for other models."""
    return {"logits_to_keep": 1} if _takes_logits_to_keep(type(model)) else {}


@functools.lru_cache(maxsize=None)
def _takes_logits_to_keep(cls: type) -> bool:
    """Whether ``cls.forward`` takes ``logits_to_keep`` (once per class)."""
    try:
        return "logits_to_keep" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False


def kv_digest(layers: Sequence[Tuple[Any, Any]]) -> int:
    """A cheap digest of a cache's bytes (per-layer ``(K, V)`` tensors of
    any 2-byte or 4-byte dtype, any device): the wrapped int64 sum of every
    element's bits, position-weighted by layer and kind. Equal caches give
    equal digests; a differing element almost surely changes it."""
    torch = _torch()
    total = 0
    for l, pair in enumerate(layers):
        for kind, t in enumerate(pair):
            bits = t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)
            total = (total + (2 * l + kind + 1) * int(bits.sum(dtype=torch.int64))) % (1 << 63)
    return total


def reference_tokens(model: Any, prompt_ids: Sequence[int], max_new_tokens: int,
                     digest: Optional[List[int]] = None, generator: Any = None) -> List[int]:
    """Greedy tokens of a single-process run (no KV movement): what the
    decode worker must produce through a lossless profile. The steps after
    the prefill's token run through ``generator`` (a
    :class:`kvserve.generation.Generator` of ``model``; a new one when None),
    as the decode worker's do. ``digest`` (a list) receives the
    :func:`kv_digest` of the prompt's KV."""
    torch = _torch()
    device = next(model.parameters()).device
    generator = generator if generator is not None else generation.Generator(model)
    with torch.no_grad():
        cache = new_cache(model)
        out = model(input_ids=torch.tensor([list(prompt_ids)], device=device), past_key_values=cache,
                    use_cache=True, **last_logits_only(model))
        layers = hf.cache_layers(cache)
        if digest is not None:
            digest.append(kv_digest(layers))
        first = int(out.logits[0, -1].argmax())
    return [first] + generator.generate(layers, first, max_new_tokens - 1)


# ---------------------------------------------------------------------------------------------
# Prefill side


@dataclass
class RequestResult:
    """One request through prefill, KV movement and decode. Seconds from the
    request's start on the prefill side unless named otherwise."""

    id: int
    prompt_tokens: int
    method: str
    profile: str
    tokens: List[int]
    kv_bytes: int                 # the KV in the wire dtype
    frame_bytes: int              # what was sent
    prefill_seconds: float        # the forward pass (hooks hand layers off; they do not wait)
    encode_seconds: float         # encoder time on the sender thread (overlaps the prefill)
    kv_seconds: float             # prefill end to the decode side's acknowledgement
    kv_movement_seconds: float    # layer 0's encode start to the acknowledgement
    transfer_busy_seconds: float  # sender: blocked writing + drain to the ack
    decode_kv_seconds: float      # decode side: frame begin to end (decoding as records arrive)
    decode_seconds: float         # decode side: the decoder's own time (GPU, per layer: shortest layer x layers)
    generate_seconds: float       # decode side: the generation steps
    ttft_seconds: float           # to the decode worker's first own token
    jct_seconds: float            # to the RESULT with every token
    predicted_kv_seconds: float = 0.0  # the controller's prediction (kvserve method), else 0
    observed_kv_seconds: float = 0.0   # what the bandit is told for kvserve: kv_seconds
    kv_digest: Optional[int] = None    # kv_digest of the KV the decode side received (run(digest=True))
    gpu_codec: bool = False       # encoded on the GPU (else the CPU codec, layer by layer)
    decode_gpu_codec: bool = False  # decoded on the GPU
    decision: Dict[str, Any] = field(default_factory=dict)
    step_seconds: List[float] = field(default_factory=list)  # decode side: each generation step
    decode_span_seconds: float = 0.0  # decode side: the decode calls' summed spans (waits for the GPU included)


class _LayerSender(threading.Thread):
    """Encodes layers handed over by the forward hooks and streams their
    records; the prefill never waits for it (an unbounded queue of views of
    the cache, which the prefill does not overwrite)."""

    def __init__(self, sender: Any, transfer_id: int, encoder: Any, layers: int) -> None:
        super().__init__(daemon=True)
        self.sender, self.transfer_id, self.encoder, self.layers = sender, transfer_id, encoder, layers
        self.queue: "queue.Queue[Any]" = queue.Queue()
        self.encode_seconds = 0.0
        self.kv_bytes = 0
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            for expected in range(self.layers):
                item = self.queue.get()
                if item is None:
                    raise RuntimeError("prefill ended before every layer was produced")
                layer, k, v = item
                if layer != expected:
                    raise RuntimeError(f"layer {layer} produced out of order (expected {expected})")
                k, v = k[0].detach(), v[0].detach()
                if k.device.type != "cpu":
                    k, v = k.cpu(), v.cpu()
                start = time.monotonic()
                if layer == 0:
                    dtype = _DTYPES[str(k.dtype)]
                    shape = (self.layers, k.shape[0], k.shape[1], k.shape[2])
                    self.kv_bytes = 2 * self.layers * k.numel() * k.element_size()
                    head = self.encoder.begin(shape, dtype)
                    self.encode_seconds += time.monotonic() - start
                    self.sender.write(self.transfer_id, head)
                    start = time.monotonic()
                records = self.encoder.encode_layer(layer, (k, v))
                if layer == self.layers - 1:
                    records += self.encoder.finish()
                self.encode_seconds += time.monotonic() - start
                self.sender.write(self.transfer_id, records)
        except BaseException as e:  # reported by the prefill thread
            self.error = e


class _GpuLayerStream:
    """The GPU codec in the forward hooks (pack profiles: every layer's
    records have a fixed place in the frame). In the hook, on the model's
    stream and so after the layer's own kernels: ``encode_layer`` and an
    asynchronous copy of that layer's records into pinned host memory, then
    an event; a sender thread waits for each event and sends the bytes. The
    prefill waits for nothing but kernel launches."""

    def __init__(self, sender: Any, transfer_id: int, encoder: Any, host: Any, layers: int) -> None:
        import torch  # noqa: PLC0415

        self.torch, self.sender, self.transfer_id = torch, sender, transfer_id
        self.encoder, self.host, self.layers = encoder, host, layers
        self.host_bytes = host.numpy()
        self.queue: "queue.Queue[Any]" = queue.Queue()
        self.timing: List[Any] = []  # (start, end) CUDA events around each encode call
        self.error: Optional[BaseException] = None
        self.frame = None
        self.raw = None
        self.kv_bytes = 0
        self.thread = threading.Thread(target=self._send, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _copy_out(self, offset: int, size: int) -> None:
        torch = self.torch
        self.host[offset:offset + size].copy_(self.raw[offset:offset + size], non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        self.queue.put((ready, offset, size))

    def on_layer(self, layer: int, k: Any, v: Any) -> None:
        """Called from the forward hook of decoder layer ``layer``."""
        torch = self.torch
        static = self.streamed
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        if layer == 0:
            self.kv_bytes = 2 * self.layers * k[0].numel() * k.element_size()
            self.frame = self.encoder.begin()
            if static:
                self.raw = torch.from_dlpack(self.frame)
        self.encoder.encode_layer(layer, (k[0], v[0]))
        if layer == self.layers - 1:
            self.encoder.finish()
        end.record()
        self.timing.append((start, end))
        if not static:  # rANS: the whole frame goes once its size exists
            if layer == self.layers - 1:
                self.queue.put("frame")
            return
        if layer == 0:
            self._copy_out(0, self.encoder.header_bytes)
        offset, size = self.frame.layer_records(layer)
        self._copy_out(offset, size)

    def _send_frame(self) -> None:
        """rANS frames: reads the size (synchronises the model's stream up to
        the last encode), copies the frame to pinned memory and sends it."""
        size = len(self.frame)
        raw = self.torch.from_dlpack(self.frame)
        self.host[:size].copy_(raw[:size])
        self.sender.write(self.transfer_id, memoryview(self.host_bytes[:size]))

    def end(self) -> None:
        self.queue.put(None)

    def join(self) -> None:
        self.thread.join()

    @property
    def streamed(self) -> bool:
        """True when each layer's records leave as they are encoded (pack);
        a rANS frame leaves whole after its last layer."""
        return self.encoder.frame_size_is_static

    @property
    def encode_seconds(self) -> float:
        """GPU time of the encode kernels (valid after join)."""
        return sum(a.elapsed_time(b) for a, b in self.timing) / 1e3

    def _send(self) -> None:
        try:
            while True:
                item = self.queue.get()
                if item is None:
                    break
                if item == "frame":
                    self._send_frame()
                    continue
                ready, offset, size = item
                ready.synchronize()
                self.sender.write(self.transfer_id, memoryview(self.host_bytes[offset:offset + size]))
            self.encoder.check()  # non-finite input found by the kernels
        except BaseException as e:  # reported by the prefill thread
            self.error = e


class PrefillClock:
    """Predicts how long the prefill of a prompt takes from the prefills
    this worker ran: the median of the last ``keep`` of that exact length;
    for a length not seen yet, the nearest seen length's scaled by the
    token ratio (a prefill is at least linear in its tokens); 0 before any
    (nothing assumed to overlap). It is the ``source_seconds`` the
    controller's streamed model overlaps KV movement with."""

    def __init__(self, keep: int = 5) -> None:
        self.keep = keep
        self._seen: Dict[int, List[float]] = {}

    def observe(self, tokens: int, seconds: float) -> None:
        """Records one prefill of ``tokens`` tokens that took ``seconds``."""
        if tokens > 0 and seconds > 0 and math.isfinite(seconds):
            self._seen.setdefault(tokens, []).append(seconds)
            del self._seen[tokens][:-self.keep]

    def predict(self, tokens: int) -> float:
        """Seconds a prefill of ``tokens`` tokens is expected to take."""
        if not self._seen or tokens <= 0:
            return 0.0
        nearest = min(self._seen, key=lambda t: (abs(math.log(t / tokens)), t))
        return statistics.median(self._seen[nearest]) * tokens / nearest


def pool_or_recompute(frame_bytes: float, kv_bytes: float, bandwidth: float,
                      decode_bytes_per_second: float, recompute_seconds: float,
                      overhead_seconds: float = 0.0) -> Tuple[str, float, float]:
    """Whether the decode worker should fetch a prefix-pool hit or prefill
    the prompt itself: the latency model's pool time (``frame_bytes`` over
    the pool link at ``bandwidth`` bytes/s, then the frame's decode:
    ``overhead_seconds`` plus ``kv_bytes`` at ``decode_bytes_per_second``)
    against ``recompute_seconds`` (e.g. :meth:`PrefillClock.predict` of
    the prompt). Returns ``("pool" or "recompute", predicted pool seconds,
    recompute_seconds)``. Until the pool link has been measured
    (``bandwidth <= 0``) or a prefill has been seen (``recompute_seconds <=
    0``) it answers "pool", so that the fetch gets measured. The C++ serve
    path's prefill worker makes the same comparison for its pool hits
    (src/serve/pool_path.cc; there a recompute also moves the KV)."""
    if decode_bytes_per_second <= 0:
        raise ValueError(f"decode_bytes_per_second must be > 0, not {decode_bytes_per_second}")
    if bandwidth <= 0 or recompute_seconds <= 0:
        return "pool", math.inf, recompute_seconds
    pool = frame_bytes / bandwidth + overhead_seconds + kv_bytes / decode_bytes_per_second
    return ("recompute" if recompute_seconds < pool else "pool"), pool, recompute_seconds


class PrefillWorker:
    """The prefill side: one connection to a decode worker.

    ``controller``: a :class:`kvserve.Controller` for ``method="kvserve"``
    (its estimator should be the ``estimator`` the connection feeds).
    ``threads``: encoder threads (1, as ``kvserve.measure_codec`` calibrates
    profile speeds; 0 = every core). ``lanes``: more connections to the same
    decode worker that frames are striped over (:meth:`open_lanes` sets them
    up). ``table_tokens``: the prompt length the controller table's
    compression ratios were measured at; each decision uses every profile's
    frame size for the request's own length (:class:`kvserve.FrameSizeModel`:
    exact for pack, learned from the frames sent for entropy codecs). Not
    thread-safe: one request at a time.
    """

    def __init__(self, model: Any, connection: Any, *, controller: Any = None,
                 workload: Any = 0, head_scores: Any = None, threads: int = 1,
                 gpu_codec: bool = True, table_tokens: int = 1024) -> None:
        self.model, self.connection, self.controller = model, connection, controller
        self.workload, self.head_scores, self.threads = workload, head_scores, threads
        self.layers = len(decoder_layers(model))
        self.encoders: Dict[str, Any] = {}
        self.gpu_encoders: Dict[Any, Any] = {}
        self._host: Any = None  # pinned frame bytes on their way to the connection
        self.gpu_codec = gpu_codec
        self._kv_bytes_per_token: Optional[int] = None
        self._kv_layout: Optional[Tuple[int, int, str]] = None  # kv_heads, head_dim, wire dtype
        self.lanes: List[Any] = []
        self.prefill_clock = PrefillClock()
        self.table_tokens = table_tokens
        self._frame_sizes: Optional[Tuple[Any, Any, Dict[str, int]]] = None  # (controller, model, spec -> index)

    def open_lanes(self, dial: Callable[[], Any], count: int) -> None:
        """Opens ``count`` lanes to the decode worker: tells it on the
        connection (MSG_LANES, with a random token), then dials each with
        ``dial()`` (a function returning a new connection to the decode
        worker's address) and sends the token as its first message. Frames
        are then striped over the connection and the lanes. Closes lanes
        opened before."""
        for c in self.lanes:
            c.close()
        self.lanes = []
        if count <= 0:
            return
        token = os.urandom(16).hex()
        self.connection.send(MSG_LANES, json.dumps({"lanes": count, "token": token}).encode())
        for _ in range(count):
            lane = dial()
            lane.send(MSG_LANE, json.dumps({"token": token}).encode())
            self.lanes.append(lane)

    def uses_gpu_codec(self, spec: str) -> bool:
        """True when requests of ``spec`` are encoded on the GPU: the model
        is on a CUDA device, this build has the CUDA codec, ``gpu_codec`` is
        on and the GPU codec runs the profile's entropy stage (pack, rans)."""
        device = next(self.model.parameters()).device
        return (self.gpu_codec and device.type == "cuda" and kvserve.cuda_available()
                and kvserve.Profile(spec).codec in GPU_CODECS)

    def _gpu_stream(self, sender: Any, transfer_id: int, spec: str, k: Any) -> _GpuLayerStream:
        torch = _torch()
        shape = (self.layers, k.shape[1], k.shape[2], k.shape[3])
        key = (spec, shape, str(k.dtype), k.device.index)
        if key not in self.gpu_encoders:
            self.gpu_encoders[key] = kvserve.CudaEncoder(spec, shape=shape, dtype=_DTYPES[str(k.dtype)],
                                                         device=k.device.index or 0,
                                                         head_scores=self.head_scores)
        enc = self.gpu_encoders[key]
        # One pinned buffer for every profile and shape (one request at a
        # time): pinning GBs costs about a second, once per worker, not once
        # per profile and prompt size.
        if self._host is None or self._host.numel() < enc.max_frame_bytes:
            self._host = None
            self._host = torch.empty(enc.max_frame_bytes, dtype=torch.uint8).pin_memory()
        return _GpuLayerStream(sender, transfer_id, enc, self._host[:enc.max_frame_bytes], self.layers)

    def _encoder(self, spec: str) -> Any:
        if spec not in self.encoders:
            self.encoders[spec] = kvserve.Encoder(spec, self.threads, self.head_scores)
        return self.encoders[spec]

    def kv_bytes_for(self, prompt_tokens: int) -> int:
        """The wire KV bytes of a prompt (from one layer's shape, as the
        cache will hold it), for the controller's decision. The per-token
        size comes from one 1-token forward pass, made once per worker."""
        if self._kv_bytes_per_token is None:
            torch = _torch()
            device = next(self.model.parameters()).device
            with torch.no_grad():
                cache = new_cache(self.model)
                self.model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device),
                           past_key_values=cache, use_cache=True)
            k, _ = hf.cache_layers(cache)[0]
            self._kv_bytes_per_token = 2 * self.layers * k.shape[1] * k.shape[3] * k.element_size()
            self._kv_layout = (int(k.shape[1]), int(k.shape[3]), _DTYPES[str(k.dtype)])
        return prompt_tokens * self._kv_bytes_per_token

    def frame_sizes(self, prompt_tokens: int) -> List[float]:
        """Every profile of the controller's table's frame bytes for a
        prompt of ``prompt_tokens`` tokens (raw's entry 0: its ratio), what
        the decision uses (``Controller.choose(frame_bytes=...)``)."""
        return self._frame_model()[1].sizes(prompt_tokens)

    def _frame_model(self) -> Tuple[Any, Any, Dict[str, int]]:
        """The FrameSizeModel of the current controller's table (made again
        when the controller changes)."""
        if self._frame_sizes is None or self._frame_sizes[0] is not self.controller:
            self.kv_bytes_for(1)
            assert self._kv_layout is not None
            heads, head_dim, dtype = self._kv_layout
            table = self.controller.table
            model = kvserve.FrameSizeModel(table, (self.layers, heads, self.table_tokens, head_dim), dtype,
                                           self.head_scores, self.table_tokens)
            index = {str(kvserve.Profile(c.spec)): i for i, c in enumerate(table.profiles) if i > 0}
            self._frame_sizes = (self.controller, model, index)
        return self._frame_sizes

    def _observe_frame(self, spec: str, prompt_tokens: int, frame_bytes: int) -> None:
        """Teaches the frame size model the size of a frame just sent (any
        method whose profile is in the controller's table)."""
        if self.controller is None or spec == RAW_SPEC or frame_bytes <= 0:
            return
        _, model, index = self._frame_model()
        i = index.get(str(kvserve.Profile(spec)))
        if i is not None:
            model.observe(i, prompt_tokens, frame_bytes)

    def run(self, request_id: int, prompt_ids: Sequence[int], max_new_tokens: int, *,
            method: str = "none", slo_seconds: float = float("inf"), quality_min: float = 0.0,
            peer: Optional[str] = None, kv_bytes: Optional[int] = None,
            digest: bool = False) -> RequestResult:
        """Runs one request: decide, send REQUEST, prefill with layer
        streaming, send FIRST, wait for RESULT. ``method``: a profile spec or
        preset (``"none"`` sends raw records), or ``"kvserve"`` (the
        controller decides; needs ``controller``). ``digest``: the decode
        side reports the :func:`kv_digest` of the KV it received
        (``RequestResult.kv_digest``; one pass over the cache)."""
        torch = _torch()
        decision: Dict[str, Any] = {}
        predicted = 0.0
        d = None
        start = time.monotonic()
        if method == "kvserve":
            if self.controller is None:
                raise ValueError("method 'kvserve' needs a controller")
            kv_bytes = kv_bytes if kv_bytes is not None else self.kv_bytes_for(len(prompt_ids))
            source = self.prefill_clock.predict(len(prompt_ids))
            d = self.controller.choose(self.workload, kv_bytes=kv_bytes,
                                       peer=peer or self.connection.peer_id,
                                       slo_seconds=slo_seconds, quality_min=quality_min, source_seconds=source,
                                       frame_bytes=self.frame_sizes(len(prompt_ids)))
            # "recompute" (nothing meets the SLO) is not served by this module: raw instead.
            spec = d.spec if d.action == "send" else "none"
            decision = {"action": d.action, "spec": spec, "explored": d.explored, "feasible": d.feasible,
                        "decide_seconds": time.monotonic() - start, "source_seconds": source}
            if self.controller.estimator is not None:  # the bandwidth the decision saw, bytes/s
                decision["bandwidth"] = self.controller.estimator.estimate(peer or self.connection.peer_id)
            predicted = d.predicted_seconds
        else:
            spec = method
        self.connection.send(MSG_REQUEST, json.dumps({
            "id": request_id, "prompt_tokens": len(prompt_ids), "max_new_tokens": max_new_tokens,
            "profile": spec, "digest": digest}).encode())
        sender = transport.FrameSender(self.connection, self.lanes or None)
        gpu = self.uses_gpu_codec(spec)
        streamer: Any = None if gpu else _LayerSender(sender, request_id, self._encoder(spec), self.layers)
        if streamer is not None:
            streamer.start()
        cache = new_cache(self.model)
        state: Dict[str, Any] = {"streamer": streamer}

        def on_layer(layer: int, k: Any, v: Any) -> None:
            if layer == 0:
                state["kv_start"] = time.monotonic()  # KV movement starts with layer 0's encode
            if gpu:
                if layer == 0:
                    state["streamer"] = self._gpu_stream(sender, request_id, spec, k)
                    state["streamer"].start()
                state["streamer"].on_layer(layer, k, v)
            else:
                streamer.queue.put((layer, k, v))

        hooks = [layer.register_forward_hook(self._hook(l, cache, on_layer))
                 for l, layer in enumerate(decoder_layers(self.model))]
        device = next(self.model.parameters()).device
        try:
            with torch.no_grad():
                out = self.model(input_ids=torch.tensor([list(prompt_ids)], device=device),
                                 past_key_values=cache, use_cache=True, **last_logits_only(self.model))
            first = int(out.logits[0, -1].argmax())
        finally:
            for h in hooks:
                h.remove()
            streamer = state["streamer"]
            if streamer is None:
                raise RuntimeError("the forward pass ran no hooked decoder layer")
            if gpu:
                streamer.end()
            else:
                streamer.queue.put(None)  # unblocks a streamer that lacks layers
        prefill_end = time.monotonic()
        streamer.join()
        if streamer.error is not None:
            sender.abort(f"prefill side failed: {streamer.error}")
            raise streamer.error
        stats = sender.finish()
        kv_done = time.monotonic()
        self.connection.send(MSG_FIRST, json.dumps({
            "id": request_id, "first_token": first, "prefill_seconds": prefill_end - start}).encode())
        reply = self._await_result(request_id)
        end = time.monotonic()
        kv_seconds = kv_done - prefill_end
        kv_movement = kv_done - state.get("kv_start", prefill_end)
        self.prefill_clock.observe(len(prompt_ids), prefill_end - start)
        self._observe_frame(spec, len(prompt_ids), int(stats.frame_bytes))
        # The bandit is told what the prediction was for (the streamed model
        # with the prefill as its source): the movement left after the
        # prefill, which is what the request waited for.
        observed = max(kv_seconds, 1e-6)
        if d is not None:
            self.controller.observe(d, observed)
        return RequestResult(
            id=request_id, prompt_tokens=len(prompt_ids), method=method, profile=spec, gpu_codec=gpu,
            tokens=[first] + list(reply["tokens"]), kv_bytes=streamer.kv_bytes,
            frame_bytes=int(stats.frame_bytes), prefill_seconds=prefill_end - start,
            encode_seconds=streamer.encode_seconds, kv_seconds=kv_seconds,
            kv_movement_seconds=kv_movement,
            transfer_busy_seconds=stats.busy_seconds, decode_kv_seconds=reply["kv_seconds"],
            decode_seconds=reply["decode_seconds"], decode_gpu_codec=reply.get("gpu_codec", False),
            generate_seconds=reply["generate_seconds"],
            ttft_seconds=(kv_done - start) + reply["first_step_seconds"], jct_seconds=end - start,
            predicted_kv_seconds=predicted, observed_kv_seconds=observed, decision=decision,
            kv_digest=reply.get("kv_digest"), step_seconds=reply.get("step_seconds", []),
            decode_span_seconds=reply.get("decode_span_seconds", reply["decode_seconds"]))

    @staticmethod
    def _hook(layer: int, cache: Any, on_layer: Callable[[int, Any, Any], None]) -> Callable[..., None]:
        def hook(_module: Any, _args: Any, _output: Any) -> None:
            k, v = hf.cache_layers(cache)[layer]
            on_layer(layer, k, v)

        return hook

    def run_pool(self, request_id: int, prompt_ids: Sequence[int], max_new_tokens: int, *,
                 source: str, pool_address: str = "", model_id: str = "", profile: str = "none"
                 ) -> Dict[str, Any]:
        """A prefix-pool request served by the decode worker alone:
        ``source="pool"`` makes it fetch the KV of ``prompt_ids[:-1]`` from
        the pool server at ``pool_address`` (stored under ``model_id``,
        :func:`kvserve.pool.prefix_hash` of those tokens and ``profile``),
        decode it into its cache and generate; ``"recompute"`` makes it
        prefill the prompt itself. Returns the decode side's reply (tokens,
        ``hit``, fetch / decode / prefill / generate seconds, ``ttft_seconds``)
        with ``jct_seconds`` measured here."""
        if source not in ("pool", "recompute"):
            raise ValueError(f"source: 'pool' or 'recompute', not {source!r}")
        start = time.monotonic()
        self.connection.send(MSG_REQUEST, json.dumps({
            "id": request_id, "source": source, "prompt": [int(t) for t in prompt_ids],
            "max_new_tokens": max_new_tokens, "pool": pool_address, "model_id": model_id,
            "profile": profile}).encode())
        reply = self._await_result(request_id)
        reply["jct_seconds"] = time.monotonic() - start
        return reply

    def _await_result(self, request_id: int) -> Dict[str, Any]:
        """The decode side's RESULT for ``request_id`` (its JSON). An ERROR
        reply raises KvserveError with its text; anything else is
        corruption."""
        kind, _, payload = self.connection.receive(timeout=600)
        reply = json.loads(payload)
        if kind == MSG_ERROR:
            raise kvserve.KvserveError(f"decode side: {reply.get('error')}")
        if kind != MSG_RESULT or reply.get("id") != request_id:
            raise kvserve.KvserveCorruptionError(f"expected RESULT for request {request_id}, got type {kind}")
        return reply

    def stop(self) -> None:
        """Tells the decode worker to end its loop."""
        self.connection.send(MSG_STOP, b"")


# ---------------------------------------------------------------------------------------------
# Decode side


class _PinnedStaging:
    """Pinned host memory that received records land in (read there by the
    transport, or copied in) and are sent to the device from, reused across
    frames. Within a frame, bytes accumulate into segments (a layer's
    records, or the whole frame): :meth:`append` adds (or, for bytes
    received in place, only counts), :meth:`segment` returns the bytes appended since
    the previous segment as a pinned tensor view. A frame larger than the
    reservation moves to a bigger buffer, keeping the old one alive until
    :meth:`end` (its segments may still be in flight to the device); call
    :meth:`end` only once every copy from it has completed."""

    def __init__(self) -> None:
        self.buf: Any = None
        self.view: Any = None
        self.retired: List[Any] = []
        self.start = self.cursor = 0

    def _allocate(self, size: int) -> None:
        torch = _torch()
        if self.buf is not None:
            self.retired.append(self.buf)
        self.buf = torch.empty(size, dtype=torch.uint8).pin_memory()
        self.view = self.buf.numpy()

    def begin(self, expected_bytes: int) -> None:
        """Starts a frame expected to need about ``expected_bytes``."""
        if self.buf is None or self.buf.numel() < expected_bytes:
            self._allocate(expected_bytes)
        self.start = self.cursor = 0

    def free(self) -> Any:
        """The unused rest of the buffer (a writable numpy view): what
        :func:`kvserve.transport.receive_frame` may read records into
        directly, back to back from its start."""
        return self.view[self.cursor:]

    def append(self, data: memoryview) -> None:
        """Adds ``data``: a record the transport already read into
        :meth:`free`'s view at the cursor only advances the cursor; any
        other bytes are copied in."""
        import numpy  # noqa: PLC0415

        n = len(data)
        src = numpy.frombuffer(data, dtype=numpy.uint8)
        if n and self.cursor + n <= self.buf.numel() and src.ctypes.data == self.view.ctypes.data + self.cursor:
            self.cursor += n  # received in place
            return
        if self.cursor + n > self.buf.numel():
            pending = self.view[self.start:self.cursor].copy()
            self._allocate(max(2 * self.buf.numel(), len(pending) + n))
            self.view[:len(pending)] = pending
            self.start, self.cursor = 0, len(pending)
        self.view[self.cursor:self.cursor + n] = src
        self.cursor += n

    def segment(self) -> Any:
        out = self.buf[self.start:self.cursor]
        self.start = self.cursor
        return out

    def end(self) -> None:
        self.retired.clear()


class DecodeWorker:
    """The decode side: serves requests from one prefill connection until
    STOP (or the peer closes). Each frame is decoded record by record as it
    arrives (on the GPU for pack and rANS frames when the model is there,
    else by the CPU codec), and generation continues from the prefill's
    first token through :attr:`generator` (a
    :class:`kvserve.generation.Generator`: CUDA-graph steps on a GPU)."""

    def __init__(self, model: Any, connection: Any, threads: int = 1, gpu_codec: bool = True,
                 secret: str = "", listener: Any = None) -> None:
        self.model, self.connection, self.gpu_codec = model, connection, gpu_codec
        self.listener = listener  # where lanes are accepted (MSG_LANES); None: lanes refused
        self.lanes: List[Any] = []
        self.secret = secret  # also the pool servers' (prefix-pool requests)
        self._pools: Dict[str, Any] = {}
        self.threads = threads
        self.decoder = kvserve.Decoder(threads)
        self._staging = _PinnedStaging()
        self.served = 0
        self.stopped = False  # the peer sent STOP (not merely closed)
        self.generator = generation.Generator(model)
        self.step_seconds: List[float] = []  # the last generation's step times

    def serve(self) -> int:
        """Serves until STOP; returns the number of requests served.
        A request that fails is answered with ERROR (the loop goes on when
        the connection survived)."""
        while True:
            try:
                kind, _, payload = self.connection.receive(timeout=3600)
            except kvserve.KvserveUnavailableError:
                return self.served  # the prefill side closed
            if kind == MSG_STOP:
                self.stopped = True
                return self.served
            if kind == MSG_LANES:
                self._accept_lanes(json.loads(payload))
                continue
            if kind != MSG_REQUEST:
                raise kvserve.KvserveCorruptionError(f"decode worker: unexpected message type {kind}")
            request = json.loads(payload)
            try:
                self.connection.send(MSG_RESULT, json.dumps(self._one(request)).encode())
            except (kvserve.KvserveCorruptionError, kvserve.KvserveInvalidArgumentError,
                    kvserve.KvserveResourceExhaustedError) as e:
                self.connection.send(MSG_ERROR, json.dumps({"id": request["id"], "error": str(e)}).encode())
            self.served += 1

    def _accept_lanes(self, message: Dict[str, Any]) -> None:
        """Accepts the ``message["lanes"]`` connections the prefill side
        dials after MSG_LANES; each must open with MSG_LANE and the same
        token (else Corruption, and the lanes accepted so far are closed).
        Replaces (and closes) earlier lanes."""
        if self.listener is None:
            raise kvserve.KvserveInvalidArgumentError("decode worker: lanes offered but it has no listener")
        self.close_lanes()
        lanes = []
        try:
            for _ in range(int(message["lanes"])):
                lane = transport.accept(self.listener, timeout=30, secret=self.secret, local_id="decode")
                lanes.append(lane)
                kind, _, payload = lane.receive(timeout=30)
                if kind != MSG_LANE or json.loads(payload).get("token") != message["token"]:
                    raise kvserve.KvserveCorruptionError("decode worker: a lane did not present the token")
        except BaseException:
            for lane in lanes:
                lane.close()
            raise
        self.lanes = lanes

    def close_lanes(self) -> None:
        for lane in self.lanes:
            lane.close()
        self.lanes = []

    def _gpu_decodes(self) -> bool:
        """True when frames of the GPU codec's profiles are decoded on the
        GPU: the model is on a CUDA device, the build has the CUDA codec and
        ``gpu_codec`` is on."""
        return (self.gpu_codec and next(self.model.parameters()).device.type == "cuda"
                and kvserve.cuda_available())

    def _receive_maybe_on_gpu(self, timing: Dict[str, float]) -> Tuple[Any, bool]:
        """Receives one frame for a model on the GPU: pack frames are decoded
        on the GPU layer by layer as each layer's records are complete; rANS
        frames on the GPU once every record arrived (header and records
        reassemble the frame); other frames by the CPU codec as records
        arrive (then moved to the device). GPU-bound records are read from
        the socket straight into pinned staging memory (no host copy) and
        sent from there to the device asynchronously. Returns (kv, on_gpu)."""
        device = next(self.model.parameters()).device
        st: Dict[str, Any] = {"mode": "cpu", "seen": 0, "events": []}
        staging = self._staging

        def on_header(_tid: int, header: memoryview) -> Any:
            self.decoder.start(header)
            info = self.decoder.info
            st["per_layer"] = info.chunk_count // max(1, info.shape[0])
            if info.profile.codec in GPU_CODECS:
                st["mode"] = "layer" if info.profile.codec == "pack" else "frame"
                st["dec"] = kvserve.CudaDecoder(bytes(header), device=device.index or 0)
                st["out"] = st["dec"].empty_out()
                raw_bytes = st["out"].numel() * st["out"].element_size()
                staging.begin(len(header) + raw_bytes + raw_bytes // 16)
                if st["mode"] == "frame":
                    staging.append(header)
                return staging.free()  # records are read straight into pinned memory
            st["out"] = kvserve.empty_like_frame(info)
            return None

        def on_record(record: memoryview) -> None:
            if st["mode"] == "cpu":
                t = time.monotonic()
                self.decoder.decode_record(record, st["out"])
                st.setdefault("cpu_seconds", 0.0)
                st["cpu_seconds"] += time.monotonic() - t
                return
            staging.append(record)
            st["seen"] += 1
            if st["mode"] == "layer" and st["seen"] % st["per_layer"] == 0:
                layer = st["seen"] // st["per_layer"] - 1
                st["events"].append(self._decode_on_gpu(st, staging.segment(), device, layer))

        transport.receive_frame(self.connection, on_header, on_record, timeout=600, lanes=self.lanes or None)
        if st["mode"] == "frame":
            st["events"].append(self._decode_on_gpu(st, staging.segment(), device, None))
        if st["mode"] != "cpu":
            st["dec"].check()  # synchronises (the staging memory is free again); Corruption for a bad record
            staging.end()
            spans = [a.elapsed_time(b) / 1e3 for a, b, _ in st["events"]]
            # Layer by layer, a span also counts waits outside the decoder's
            # kernels (on a GPU shared with the prefill process, most likely
            # for the GPU while the prefill holds it); the shortest one (a
            # layer decoded once the prefill ended) times the layers is the
            # decoder's own time.
            timing["decode_seconds"] = min(spans) * len(spans) if st["mode"] == "layer" else sum(spans)
            timing["decode_span_seconds"] = sum(spans)
        else:
            timing["decode_seconds"] = st.get("cpu_seconds", 0.0)
        return st["out"], st["mode"] != "cpu"

    @staticmethod
    def _decode_on_gpu(st: Dict[str, Any], data: Any, device: Any, layer: Optional[int]) -> Tuple[Any, ...]:
        """Copies ``data`` (pinned: one layer's records, or the whole frame
        when ``layer`` is None) to the device and decodes it into
        ``st["out"]``, stream-ordered. Returns the timing events and the
        device copy (kept alive until the decode ran)."""
        torch = _torch()
        on_device = data.to(device, non_blocking=True)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        if layer is None:
            st["dec"].decode(on_device, st["out"])
        else:
            st["dec"].decode_layer(layer, on_device, st["out"])
        b.record()
        return a, b, on_device

    def _generate(self, layers: Sequence[Tuple[Any, Any]], last: int, max_new_tokens: int
                  ) -> Tuple[List[int], float, float]:
        """Greedy tokens after ``last`` from the KV ``layers`` (per layer
        ``(K, V)``), through :attr:`generator`: (tokens, first step s, all
        steps s, the copy into its cache included); ``max_new_tokens - 1``
        steps (``last`` is the first)."""
        start = time.monotonic()
        tokens = self.generator.generate(layers, last, max_new_tokens - 1)
        self.step_seconds = list(self.generator.step_seconds)
        first_step = self.generator.load_seconds + (self.step_seconds[0] if self.step_seconds else 0.0)
        return tokens, first_step, time.monotonic() - start

    def _layers_of(self, buffer: Any) -> List[Tuple[Any, Any]]:
        """The per-layer ``(K, V)`` of a 5-D KV ``buffer`` in the model's
        dtype (views when it already is)."""
        buffer = buffer.to(dtype=next(self.model.parameters()).dtype)
        return [(buffer[l, 0], buffer[l, 1]) for l in range(buffer.shape[0])]

    def _from_pool(self, request: Dict[str, Any]) -> Dict[str, Any]:
        """A prefix-pool request: the KV of ``prompt[:-1]`` is fetched from
        the pool at ``request["pool"]`` (key: model id, prefix hash of those
        tokens, profile) and decoded into the cache (on the GPU for pack and
        rANS frames when the model is there), then the last prompt token is
        run and generation continues. ``source: "recompute"``, a pool miss
        or a pool that cannot be reached (``pool_error`` in the reply)
        prefills the whole prompt here instead."""
        from . import pool as kvpool  # noqa: PLC0415

        torch = _torch()
        begin = time.monotonic()
        param = next(self.model.parameters())
        prompt = [int(t) for t in request["prompt"]]
        timing = {"fetch_seconds": 0.0, "decode_seconds": 0.0, "frame_bytes": 0, "gpu_codec": False}
        frame = None
        if request["source"] == "pool":
            address = request["pool"]
            if address not in self._pools:
                self._pools[address] = kvpool.remote(address, secret=self.secret, local_id="decode")
            try:
                frame = self._pools[address].get(request["model_id"], kvpool.prefix_hash(prompt[:-1]),
                                                 request["profile"])
            except kvserve.KvserveError as e:  # an unreachable pool is a miss: recompute
                timing["pool_error"] = str(e)
            timing["fetch_seconds"] = time.monotonic() - begin
        if frame is not None:
            # The KV of prompt[:-1] into the cache; the last prompt token is
            # the first generation step, whose argmax is the first token.
            timing["frame_bytes"] = len(frame)
            t = time.monotonic()
            with torch.no_grad():
                kv, _, timing["gpu_codec"] = hf.decode_frame(
                    frame, param.device if self._gpu_decodes() else None, threads=self.threads)
                layers = self._layers_of(kv)
            timing["decode_seconds"] = time.monotonic() - t
            t = time.monotonic()
            tokens = self.generator.generate(layers, prompt[-1], request["max_new_tokens"])
            steps = self.generator.step_seconds
            prefill = self.generator.load_seconds + steps[0]
            self.step_seconds = list(steps[1:])
            return {"id": request["id"], "tokens": tokens, "hit": True, "prefill_seconds": prefill,
                    "ttft_seconds": time.monotonic() - begin - sum(steps[1:]),
                    "first_step_seconds": steps[1] if len(steps) > 1 else 0.0,
                    "generate_seconds": time.monotonic() - t - prefill, **timing}
        with torch.no_grad():
            cache = new_cache(self.model)
            out = self.model(input_ids=torch.tensor([prompt], device=param.device), past_key_values=cache,
                             use_cache=True, **last_logits_only(self.model))
            first = int(out.logits[0, -1].argmax())
        kv_end = time.monotonic()
        tokens, first_step, generate = self._generate(hf.cache_layers(cache), first, request["max_new_tokens"])
        return {"id": request["id"], "tokens": [first] + tokens, "hit": False,
                "prefill_seconds": kv_end - begin - timing["fetch_seconds"],
                "ttft_seconds": kv_end - begin, "first_step_seconds": first_step,
                "generate_seconds": generate, **timing}

    def _one(self, request: Dict[str, Any]) -> Dict[str, Any]:
        if request.get("source") in ("pool", "recompute"):
            return self._from_pool(request)
        torch = _torch()
        begin = time.monotonic()
        timing: Dict[str, float] = {}
        if self._gpu_decodes():
            out, gpu = self._receive_maybe_on_gpu(timing)
        else:
            out, _ = transport.receive_kv(self.connection, decoder=self.decoder, timeout=600, timing=timing,
                                          lanes=self.lanes or None)
            gpu = False
        kv_end = time.monotonic()
        kind, _, payload = self.connection.receive(timeout=600)
        if kind != MSG_FIRST:
            raise kvserve.KvserveCorruptionError(f"expected FIRST, got message type {kind}")
        first = json.loads(payload)["first_token"]
        buffer = out if isinstance(out, torch.Tensor) else kvserve.as_torch(out, self.decoder.info.dtype)
        layers = self._layers_of(buffer)
        digest = kv_digest(layers) if request.get("digest") else None
        tokens, first_step, generate = self._generate(layers, first, request["max_new_tokens"])
        return {"id": request["id"], "tokens": tokens, "kv_seconds": kv_end - begin, "gpu_codec": gpu,
                "kv_digest": digest, "step_seconds": self.step_seconds,
                "decode_span_seconds": timing.get("decode_span_seconds", timing["decode_seconds"]),
                "decode_seconds": timing["decode_seconds"],
                "first_step_seconds": first_step, "generate_seconds": generate}


# ---------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kvserve.pd",
        description="Prefill/decode over kvserve's transport: a decode worker (thread of this "
                    "process, or --role decode elsewhere) and a prefill worker that streams each "
                    "layer's KV as the prefill produces it. Prints one JSON line per request.")
    p.add_argument("--model", default="tiny",
                   help="tiny (seeded toy, CPU), llama-8b-random (timing only) or a transformers "
                        "checkpoint (e.g. models/kvs-qwen2-9m)")
    p.add_argument("--device", default="cpu", help="torch device of the models (cpu, cuda, cuda:1)")
    p.add_argument("--role", choices=["both", "prefill", "decode"], default="both")
    p.add_argument("--address", default="127.0.0.1:0",
                   help="decode worker's listen address (role decode/both) or the one to dial (prefill)")
    p.add_argument("--address-file", help="role decode: write the bound address here once listening")
    p.add_argument("--secret", default="", help="shared secret of the connection (both sides)")
    p.add_argument("--methods", default="none,kivi-2",
                   help="comma-separated profiles or presets; 'kvserve' lets the controller choose "
                        "(needs --table)")
    p.add_argument("--table", help="profile table JSON for the controller (kvserve method)")
    p.add_argument("--workload", default="0", help="workload name or index in the table")
    p.add_argument("--slo", type=float, default=float("inf"), help="KV time budget per request, s")
    p.add_argument("--quality-min", type=float, default=0.0, help="quality floor per request")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--requests", type=int, default=3, help="requests per method")
    p.add_argument("--gbps", type=float, default=0.0, help="shape the prefill->decode link (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true",
                   help="compare the tokens of lossless methods with a single-process run; exit 1 "
                        "on a difference (implies --deterministic)")
    p.add_argument("--deterministic", action="store_true",
                   help="torch's deterministic algorithms (see deterministic()); both sides of a "
                        "token comparison need it")
    return p


def deterministic() -> None:
    """Makes this process's torch kernels deterministic (cuBLAS workspace
    config, ``torch.use_deterministic_algorithms``): with random-weight
    models many logits nearly tie, and a GPU single-process run does not
    even repeat its own greedy tokens otherwise. Call before the first CUDA
    matmul."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    _torch().use_deterministic_algorithms(True, warn_only=True)


def freeze_heap() -> None:
    """Moves every object alive now (the model, the imported libraries)
    out of the garbage collector's generations (``gc.freeze``), so that the
    collections a request's allocations trigger do not scan them (a full
    collection otherwise walks every object torch and transformers hold,
    at a moment no request chooses). Call once the model is loaded."""
    import gc  # noqa: PLC0415

    gc.collect()
    gc.freeze()


def serve_decode(model: Any, listener: Any, secret: str = "", threads: int = 1,
                 accept_timeout: float = 3600.0) -> int:
    """Serves prefill connections one after another (a prefill side redials
    to change its link) until one sends STOP; returns the requests served.
    One worker serves them all, so its pinned staging memory, decoder and
    pool clients outlive a redial."""
    worker: Optional[DecodeWorker] = None
    while True:
        conn = transport.accept(listener, timeout=accept_timeout, secret=secret, local_id="decode")
        if worker is None:
            worker = DecodeWorker(model, conn, threads, secret=secret, listener=listener)
        worker.connection = conn
        try:
            worker.serve()
        finally:
            worker.close_lanes()
            conn.close()
        if worker.stopped:
            return worker.served


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    torch = _torch()
    import random  # noqa: PLC0415

    if args.deterministic or args.check:
        deterministic()

    model = load_model(args.model, args.device, args.seed)
    freeze_heap()
    if args.role == "decode":
        listener = transport.tcp().listen(args.address)
        print(f"decode worker listening on {listener.address}", file=sys.stderr, flush=True)
        if args.address_file:
            with open(args.address_file + ".tmp", "w") as f:
                f.write(listener.address)
            os.replace(args.address_file + ".tmp", args.address_file)
        serve_decode(model, listener, args.secret)
        return 0
    decode_thread = None
    address = args.address
    if args.role == "both":
        listener = transport.tcp().listen(args.address)
        address = listener.address
        decode_model = load_model(args.model, args.device, args.seed)
        decode_thread = threading.Thread(target=serve_decode, args=(decode_model, listener, args.secret),
                                         daemon=True)
        decode_thread.start()
    estimator = kvserve.BandwidthEstimator()
    conn = transport.dial(transport.tcp(), address, secret=args.secret, local_id="prefill",
                          shape_gbps=args.gbps, estimator=estimator)
    controller = None
    methods = [m for m in args.methods.split(",") if m]
    if "kvserve" in methods:
        if not args.table:
            raise SystemExit("--methods kvserve needs --table")
        table = kvserve.ProfileTable.load(args.table)
        controller = kvserve.Controller(table, estimator=estimator, model="streamed",
                                        layers=len(decoder_layers(model)))
    workload: Any = int(args.workload) if args.workload.isdigit() else args.workload
    worker = PrefillWorker(model, conn, controller=controller, workload=workload)
    vocab = int(getattr(model.config, "vocab_size", 96))
    rng = random.Random(args.seed)
    failures = 0
    request_id = 0
    for method in methods:
        for _ in range(args.requests):
            prompt = [rng.randrange(1, vocab) for _ in range(args.prompt_tokens)]
            result = worker.run(request_id, prompt, args.new_tokens, method=method, slo_seconds=args.slo,
                                quality_min=args.quality_min)
            row = asdict(result)
            if args.check and kvserve.Profile(result.profile).is_lossless:
                expected = reference_tokens(model, prompt, args.new_tokens)
                row["matches_single_process"] = expected == result.tokens
                failures += expected != result.tokens
            print(json.dumps(row), flush=True)
            request_id += 1
    worker.stop()
    conn.close()
    if decode_thread is not None:
        decode_thread.join(60)
    del torch
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
