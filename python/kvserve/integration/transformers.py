"""A transformers causal LM as kvserve's serving engine.

The library's prefill and decode workers (:mod:`kvserve.serve`) run every
request: the protocol, the controller's choice, the transfers and retries,
the prefix pool. An engine only computes. :class:`TransformersEngine` does
that for a transformers-style model (decoder layers at
``model.model.layers``, a cache updated in place, ``model(input_ids=...,
past_key_values=cache, use_cache=True)``), on a CUDA device or the CPU:

* ``prefill(prompt, on_layer)``: one forward pass with a hook on every
  decoder layer; the hook of layer ``l`` only hands that layer's K and V to
  ``on_layer`` (the library encodes and sends them on its own threads, on
  the GPU for a model there, while the next layers run); returns the last
  token's logits;
* ``allocate_kv(shape, dtype)``: where a received frame is decoded (a
  ``(layers, 2, kv_heads, tokens, head_dim)`` tensor on the model's
  device);
* ``generate(...)``: greedy tokens from the received KV through a
  :class:`kvserve.generation.Generator` (CUDA-graph steps on a GPU).

:class:`TinyCausalLM` is a seeded toy of that shape for CPU runs and tests,
and :func:`load_model` loads the models the benchmarks use.
"""
from __future__ import annotations

import functools
import inspect
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import generation, hf

_DTYPES = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16"}


def _torch() -> Any:
    import torch  # noqa: PLC0415  (torch is optional for the rest of the package)

    return torch


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


def last_logits_only(model: Any) -> Dict[str, Any]:
    """Forward kwargs that make a transformers model compute logits for the
    last position only (``logits_to_keep=1``) when its forward takes them:
    a 32K-token prefill of a 128K-vocabulary model otherwise materialises
    8 GB of logits nobody reads. Empty for other models."""
    return {"logits_to_keep": 1} if _takes_logits_to_keep(type(model)) else {}


@functools.lru_cache(maxsize=None)
def _takes_logits_to_keep(cls: type) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False


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

        def forward(self, x: Any, cache: Any, mask: Any = None) -> Any:
            # x: (batch, n, width); mask: a 4-D additive mask (batch, 1, n,
            # cached tokens) as transformers takes it, or None for causal.
            b, n, h, d = x.shape[0], x.shape[1], self.heads, self.head_dim
            q, k, v = ((x @ self.w[i]).view(b, n, h, d).transpose(1, 2) for i in range(3))
            k, v = cache.update(k, v, self.index)
            total = k.shape[2]
            if mask is None:
                pos = torch.arange(total - n, total, device=x.device)[:, None]
                mask = torch.where(torch.arange(total, device=x.device)[None, :] <= pos, 0.0,
                                   float("-inf")).to(q.dtype)
            att = torch.softmax(q @ k.transpose(-1, -2) * (self.sharpness / d ** 0.5) + mask, dim=-1)
            # No residual, RMS-normalised: every generated token depends on
            # the KV it attended to, and logits stay in a range where it shows.
            y = (att @ v).transpose(1, 2).reshape(b, n, h * d)
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
                    attention_mask: Any = None, **_: Any) -> Any:
            # input_ids: (batch, n); a 4-D attention_mask is used as given
            # (additive), anything else means causal over the whole cache.
            cache = past_key_values if past_key_values is not None else ListCache()
            mask = attention_mask if attention_mask is not None and attention_mask.dim() == 4 else None
            x = self.emb[input_ids]
            for layer in self.model.layers:
                x = layer(x, cache, mask)
            logits = x @ self.emb.T / self.emb.shape[1] ** 0.5
            return type("Out", (), {"logits": logits, "past_key_values": cache})()

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


def _first_token(last_logits: Sequence[float]) -> int:
    """The greedy token of ``last_logits``: the lowest id on ties, as the
    library's sampler."""
    import numpy  # noqa: PLC0415

    return int(numpy.asarray(last_logits).argmax())


def deterministic() -> None:
    """Makes this process's torch kernels deterministic (cuBLAS workspace
    config, ``torch.use_deterministic_algorithms``): with random-weight
    models many logits nearly tie, and a GPU single-process run does not
    even repeat its own greedy tokens otherwise. Call before the first CUDA
    matmul, in every process whose tokens are compared."""
    import os  # noqa: PLC0415

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    _torch().use_deterministic_algorithms(True, warn_only=True)


def freeze_heap() -> None:
    """Moves every object alive now (the model, the imported libraries) out
    of the garbage collector's generations (``gc.freeze``), so that the
    collections a request's allocations trigger do not scan them. Call once
    the model is loaded."""
    import gc  # noqa: PLC0415

    gc.collect()
    gc.freeze()


class TransformersEngine:
    """``model`` (see the module docstring) as kvserve's serving engine.
    ``name``: how it is reported (default: the model's ``name_or_path``).
    ``generator``: the :class:`kvserve.generation.Generator` the decode side
    steps with (default: a new one; CUDA graphs on a GPU). ``batch``: a
    :class:`kvserve.batching.BatchDecoder` of the model: the decode steps of
    concurrent requests then run together (continuous batching) instead of
    one request at a time through ``generator``. The library calls it from
    its worker threads; forward passes (and, without ``batch``, generation)
    take a lock (one at a time)."""

    def __init__(self, model: Any, *, name: Optional[str] = None, generator: Any = None,
                 batch: Any = None) -> None:
        torch = _torch()
        self.model = model
        self.batch = batch
        param = next(model.parameters())
        self.device = param.device
        self.layers = len(decoder_layers(model))
        self.generator = generator if generator is not None else generation.Generator(model)
        self._lock = threading.Lock()
        # The KV's geometry and dtype, from one 1-token forward pass.
        with torch.no_grad():
            cache = new_cache(model)
            model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=self.device), past_key_values=cache,
                  use_cache=True)
        k, _ = hf.cache_layers(cache)[0]
        self.kv_heads, self.head_dim = int(k.shape[-3]), int(k.shape[-1])
        self.kv_dtype = k.dtype
        config = getattr(model, "config", None)
        self.vocab_size = int(getattr(config, "vocab_size", 0))
        self.name = name or str(getattr(config, "name_or_path", "") or type(model).__name__)
        cuda = self.device.type == "cuda"
        self.stream = int(torch.cuda.current_stream(self.device).cuda_stream) if cuda else 0

    def info(self) -> Dict[str, Any]:
        """What the library needs to know (see kvserve/engine.h EngineInfo)."""
        return {"name": self.name, "layers": self.layers, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                "vocab_size": self.vocab_size, "kv_dtype": _DTYPES[str(self.kv_dtype)],
                "device": (self.device.index or 0) if self.device.type == "cuda" else -1, "stream": self.stream}

    def kv_bytes(self, tokens: int) -> int:
        """Bytes of the KV of ``tokens`` tokens."""
        return tokens * 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype.itemsize

    def prefill(self, prompt: Sequence[int], on_layer: Any) -> Any:
        """Runs the prompt; the forward hook of decoder layer ``l`` calls
        ``on_layer(l, K, V)`` with that layer's cache tensors as soon as
        they are queued (the library reads them from its own threads and
        keeps them alive until the request is done). Returns the last
        token's logits as a float32 numpy array."""
        torch = _torch()
        with self._lock, torch.no_grad():
            cache = new_cache(self.model)

            def hook_for(index: int) -> Any:
                def hook(_module: Any, _args: Any, _output: Any) -> None:
                    k, v = hf.cache_layers(cache)[index]
                    on_layer(index, k, v)

                return hook

            hooks = [layer.register_forward_hook(hook_for(l)) for l, layer in enumerate(decoder_layers(self.model))]
            try:
                out = self.model(input_ids=torch.tensor([list(prompt)], device=self.device), past_key_values=cache,
                                 use_cache=True, **last_logits_only(self.model))
            finally:
                for h in hooks:
                    h.remove()
            return out.logits[0, -1].float().cpu().numpy()

    def allocate_kv(self, shape: Tuple[int, int, int, int], dtype: str) -> Any:
        """A ``(layers, 2, kv_heads, tokens, head_dim)`` tensor on the
        model's device for a received frame of ``shape`` (layers, kv_heads,
        tokens, head_dim) and ``dtype``."""
        torch = _torch()
        layers, heads, tokens, dim = shape
        kind = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
        return torch.empty((layers, 2, heads, tokens, dim), dtype=kind, device=self.device)

    def generate(self, parts: Sequence[Any], keep_masks: Sequence[bytes], prompt: Sequence[int],
                 suffix: Sequence[int], last_logits: Sequence[float], max_new_tokens: int, temperature: float,
                 top_p: float, seed: int, stop_at_eos: bool) -> Tuple[List[int], float]:
        """Greedy tokens from the received KV ``parts`` (frames in token
        order, concatenated): the first from ``last_logits`` (or, for a
        prefix hit, from running ``suffix``), then ``max_new_tokens - 1``
        decode steps. Returns (tokens, seconds to the first token, the KV's
        import into the step cache included)."""
        torch = _torch()
        if temperature > 0:
            raise NotImplementedError("the transformers engine generates greedily (temperature 0)")
        if any(0 in m for m in keep_masks):
            raise NotImplementedError("the transformers engine cannot hide tokens a pruning profile dropped")
        start = time.monotonic()
        with torch.no_grad():
            # Forward passes one at a time; without a batch decoder the steps too.
            with self._lock:
                layers = self._layers(parts, suffix)
                if len(suffix) > 1:
                    layers = self._run_prompt_rest(layers, suffix)
                if self.batch is None:
                    return self._generate_alone(layers, suffix, last_logits, max_new_tokens, start)
            return self._generate_batched(layers, suffix, last_logits, max_new_tokens, start)

    def _generate_alone(self, layers: List[Any], suffix: Sequence[int], last_logits: Sequence[float],
                        max_new_tokens: int, start: float) -> Tuple[List[int], float]:
        """The decode steps of this request alone, through the generator."""
        if suffix:
            tokens = self.generator.generate(layers, int(suffix[-1]), max_new_tokens)
            return tokens, time.monotonic() - start - sum(self.generator.step_seconds[1:])
        first_token = _first_token(last_logits)
        first = time.monotonic() - start
        rest = self.generator.generate(layers, first_token, max_new_tokens - 1) if max_new_tokens > 1 else []
        return [first_token] + rest, first + self.generator.load_seconds

    def _generate_batched(self, layers: List[Any], suffix: Sequence[int], last_logits: Sequence[float],
                          max_new_tokens: int, start: float) -> Tuple[List[int], float]:
        """The decode steps through the batch decoder, with those of every
        other admitted request. The first token's seconds include the wait
        for a free row (the request's KV is then in it)."""
        before = time.monotonic()
        if suffix:
            result = self.batch.generate(layers, int(suffix[-1]), max_new_tokens)
            return result.tokens, before - start + result.first_token_seconds
        first_token = _first_token(last_logits)
        if max_new_tokens <= 1:
            return [first_token], time.monotonic() - start
        result = self.batch.generate(layers, first_token, max_new_tokens - 1)
        return [first_token] + result.tokens, before - start + result.load_seconds

    def _run_prompt_rest(self, layers: List[Any], suffix: Sequence[int]) -> List[Any]:
        """A prefix hit's rest of the prompt beyond the received KV (all of
        ``suffix`` but its last token, which the first step runs) run
        against ``layers``; the layers of the whole cache."""
        torch = _torch()
        cache = new_cache(self.model)
        for l, (k, v) in enumerate(layers):
            cache.update(k[None], v[None], l)
        self.model(input_ids=torch.tensor([list(suffix[:-1])], device=self.device),
                   past_key_values=cache, use_cache=True, **last_logits_only(self.model))
        return [(k[0], v[0]) for k, v in hf.cache_layers(cache)]

    def _layers(self, parts: Sequence[Any], suffix: Sequence[int]) -> List[Any]:
        """Per model layer (K, V) of the received ``parts`` in the model's
        dtype: concatenated along tokens, or, for a whole-prefix hit (several
        parts, only the last prompt token left), as lists of the parts'
        pieces, which the generator copies into its cache one by one (a
        concatenation would hold the prompt's KV twice)."""
        torch = _torch()
        dtype = next(self.model.parameters()).dtype
        if len(parts) > 1 and len(suffix) == 1:
            parts = [p.to(dtype=dtype) for p in parts]
            return [([p[l, 0] for p in parts], [p[l, 1] for p in parts]) for l in range(parts[0].shape[0])]
        kv = parts[0] if len(parts) == 1 else torch.cat(list(parts), dim=3)
        kv = kv.to(dtype=dtype)
        return [(kv[l, 0], kv[l, 1]) for l in range(kv.shape[0])]
