"""Hugging Face ``transformers`` integration: compress a KV cache after prefill
and restore it before decode (the prefill/decode boundary in one process).

    from kvserve import hf
    out = model(input_ids, use_cache=True)               # prefill
    frame = hf.compress_cache(out.past_key_values, "kivi-4")   # send side
    ...                                                   # frame goes over the wire
    cache = hf.restore_cache(frame, like=out.past_key_values)  # receive side
    model(next_ids, past_key_values=cache, use_cache=True)     # decode

Supported cache objects: ``DynamicCache`` (both the ``key_cache`` /
``value_cache`` lists of transformers < 4.54 and the ``layers[i].keys`` /
``.values`` of later versions) and the legacy tuple-of-``(K, V)`` format.
Tensors are ``(batch, kv_heads, tokens, head_dim)``; kvserve encodes one
sequence, so batch must be 1 or ``batch_index`` picks one (a view, no copy).

CPU tensors are read in place (per layer; see ``kvserve.describe_layout``).
CUDA tensors are copied to the CPU first until the CUDA backend exists.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import kvserve

Pair = Tuple[Any, Any]


def cache_layers(cache: Any) -> List[Pair]:
    """The per-layer ``(K, V)`` tensors of a transformers cache, legacy tuple
    or ``DynamicCache`` (any version), without copying."""
    if isinstance(cache, (tuple, list)):
        return [(k, v) for k, v in cache]
    if hasattr(cache, "layers") and cache.layers and hasattr(cache.layers[0], "keys"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache") and hasattr(cache, "value_cache"):
        return list(zip(cache.key_cache, cache.value_cache))
    if hasattr(cache, "to_legacy_cache"):
        return [(k, v) for k, v in cache.to_legacy_cache()]
    raise TypeError(f"unsupported cache type {type(cache).__name__}: expected a DynamicCache "
                    "or a tuple of per-layer (key, value) tensors")


def _sequence(layers: Sequence[Pair], batch_index: Optional[int]) -> List[Pair]:
    out = []
    for k, v in layers:
        if k.dim() != 4:
            raise ValueError(f"expected (batch, kv_heads, tokens, head_dim) tensors, got {tuple(k.shape)}")
        if batch_index is None:
            if k.shape[0] != 1:
                raise ValueError(f"batch size {k.shape[0]}: pass batch_index to pick one sequence")
            batch_index = 0
        k, v = k[batch_index], v[batch_index]
        if k.device.type != "cpu":  # no CUDA backend yet: stage through host memory
            k, v = k.cpu(), v.cpu()
        out.append((k.detach(), v.detach()))
    return out


def compress_cache(cache: Any, profile: kvserve.ProfileLike, *, batch_index: Optional[int] = None,
                   threads: int = 0, head_scores: kvserve.HeadScoresLike = None,
                   encoder: Optional[kvserve.Encoder] = None) -> kvserve.Frame:
    """Encodes the cache of one sequence into a frame (bytes-like).

    ``profile``: a Profile, spec or preset name; ``head_scores``: needed by
    mixhq and duo; ``encoder``: a reusable :class:`kvserve.Encoder` (then
    ``profile``, ``threads`` and ``head_scores`` are the encoder's).
    """
    pairs = _sequence(cache_layers(cache), batch_index)
    if encoder is None:
        encoder = kvserve.Encoder(profile, threads, head_scores)
    return encoder.encode(pairs)


def restore_cache(frame: Any, like: Any = None, *, device: Any = None, dtype: Any = None,
                  return_keep_mask: bool = False, threads: int = 0) -> Any:
    """Decodes ``frame`` into a new cache for one sequence (batch 1).

    ``like``: a cache to mimic -- a legacy tuple gives a legacy tuple, a
    ``DynamicCache`` (or None) gives a ``DynamicCache``; its tensors' device
    and dtype are used unless ``device`` / ``dtype`` say otherwise. The frame
    is decoded with one allocation; each layer's K and V are views of it.
    With ``return_keep_mask`` returns ``(cache, mask)``: mask is ``(layers, 2,
    kv_heads, tokens)``, 0 where the profile pruned a token (duo), which the
    attention mask must then exclude.
    """
    decoder = kvserve.Decoder(threads)
    info = decoder.header(frame)
    buffer = kvserve.empty_like_frame(info, framework="torch")
    mask = decoder.decode(frame, out=buffer, keep_mask=return_keep_mask)
    if return_keep_mask:
        mask = mask[1]
    if like is not None:
        ref = cache_layers(like)[0][0]
        device = ref.device if device is None else device
        dtype = ref.dtype if dtype is None else dtype
    if device is not None or dtype is not None:
        buffer = buffer.to(device=device or buffer.device, dtype=dtype or buffer.dtype)
    layers = tuple((buffer[l, 0].unsqueeze(0), buffer[l, 1].unsqueeze(0)) for l in range(buffer.shape[0]))
    if isinstance(like, (tuple, list)):
        cache: Any = layers
    else:
        from transformers import DynamicCache

        if hasattr(DynamicCache, "from_legacy_cache"):
            cache = DynamicCache.from_legacy_cache(layers)
        else:
            cache = DynamicCache()
            for l, (k, v) in enumerate(layers):
                cache.update(k, v, l)
    return (cache, mask) if return_keep_mask else cache
