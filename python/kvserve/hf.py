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
CUDA tensors are encoded on the GPU by the CUDA codec (``compress_cache``
returns a :class:`kvserve.DeviceFrame`, ``restore_cache`` decodes on the GPU)
when this build has it; a CPU-only build copies them to the CPU first.

``generate_through_frame`` is the whole boundary in one call: prefill, move
the KV through a frame, continue generating.
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
        if k.device.type != "cpu" and not kvserve.cuda_available():  # CPU-only build: stage
            k, v = k.cpu(), v.cpu()
        out.append((k.detach(), v.detach()))
    return out


def compress_cache(cache: Any, profile: kvserve.ProfileLike, *, batch_index: Optional[int] = None,
                   threads: int = 0, head_scores: kvserve.HeadScoresLike = None,
                   encoder: Any = None) -> Any:
    """Encodes the cache of one sequence into a frame: a :class:`kvserve.Frame`
    (bytes-like) for CPU caches, a :class:`kvserve.DeviceFrame` for CUDA ones.

    ``profile``: a Profile, spec or preset name; ``head_scores``: needed by
    mixhq and duo; ``encoder``: a reusable :class:`kvserve.Encoder` or
    :class:`kvserve.CudaEncoder` (then ``profile``, ``threads`` and
    ``head_scores`` are the encoder's).
    """
    pairs = _sequence(cache_layers(cache), batch_index)
    if kvserve.cuda.is_cuda(pairs):
        if encoder is None:
            return kvserve.cuda.encode(pairs, profile, head_scores=head_scores)
        return encoder.encode(pairs, check=True)
    if encoder is None:
        encoder = kvserve.Encoder(profile, threads, head_scores)
    return encoder.encode(pairs)


# The entropy stages the CUDA codec runs; frames of other codecs (zstd, lz4)
# are decoded on the CPU.
GPU_CODECS = ("pack", "rans")


def decode_frame(frame: Any, device: Any = None, *, keep_mask: bool = False,
                 threads: int = 0) -> Tuple[Any, Any, bool]:
    """Decodes ``frame`` into one new 5-D torch tensor ``(layers, 2,
    kv_heads, tokens, head_dim)`` on ``device`` (None: the CPU, or the GPU
    for a :class:`kvserve.DeviceFrame`): with the CUDA codec when the build
    has it, the target is a CUDA device and the frame's codec is one it runs
    (:data:`GPU_CODECS`), else with the CPU codec (``threads``), then moved.
    Returns ``(buffer, keep_mask or None, decoded_on_gpu)``; the mask is
    ``(layers, 2, kv_heads, tokens)``, 0 where the profile pruned a token."""
    on_gpu = kvserve.cuda_available() and (
        isinstance(frame, kvserve.DeviceFrame)
        or (device is not None and str(device).startswith("cuda")
            and kvserve.inspect(frame).profile.codec in GPU_CODECS))
    if on_gpu:
        decoded = kvserve.cuda.decode(frame, None, keep_mask=keep_mask)
        buffer, mask = decoded if keep_mask else (decoded, None)
    else:
        decoder = kvserve.Decoder(threads)
        info = decoder.header(frame)
        buffer = kvserve.empty_like_frame(info, framework="torch")
        mask = decoder.decode(frame, out=buffer, keep_mask=keep_mask)
        mask = mask[1] if keep_mask else None
    if device is not None:
        buffer = buffer.to(device=device)
    return buffer, mask, on_gpu


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
    if like is not None and device is None:
        device = cache_layers(like)[0][0].device
    buffer, mask, _ = decode_frame(frame, device, keep_mask=return_keep_mask, threads=threads)
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


def generate_through_frame(model: Any, input_ids: Any, profile: kvserve.ProfileLike, max_new_tokens: int,
                           *, head_scores: kvserve.HeadScoresLike = None) -> Tuple[List[int], Any]:
    """Prefills ``input_ids`` (a ``(1, n)`` tensor on the model's device) with
    ``model`` (a transformers causal LM), moves its KV cache through a frame
    of ``profile`` (on the GPU when the model is there), restores it and
    greedy-decodes ``max_new_tokens`` tokens from the restored cache.
    Returns ``(tokens, frame)``; tokens start with the prefill's next token."""
    import torch  # noqa: PLC0415

    with torch.no_grad():
        out = model(input_ids=input_ids, use_cache=True)
        frame = compress_cache(out.past_key_values, profile, head_scores=head_scores)
        cache = restore_cache(frame, like=out.past_key_values)
        tokens = [int(out.logits[0, -1].argmax())]
        for _ in range(max_new_tokens - 1):
            step = model(input_ids=torch.tensor([[tokens[-1]]], device=input_ids.device),
                         past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            tokens.append(int(step.logits[0, -1].argmax()))
    return tokens, frame
