"""kvserve: compress LLM KV caches for disaggregated serving.

The package binds the C++ library (``include/kvserve/``) without copying
tensors:

* ``encode(kv, profile)`` reads a KV cache in place -- a numpy array, a torch
  tensor (CPU), anything with ``__dlpack__`` or a DLPack capsule -- with its
  strides, and returns a :class:`Frame` (bytes-like, owns its bytes; no copy
  of the input is made, and none of the output unless you call ``bytes()``).
  ``encode(kv, profile, out=buffer)`` writes the frame into your buffer (e.g.
  a registered transfer buffer) and returns a memoryview of the used prefix.
* ``decode(frame, out=tensor)`` writes the cache into your tensor.
* CUDA tensors go through the CUDA codec (:mod:`kvserve.cuda`:
  :class:`CudaEncoder`, :class:`CudaDecoder`, :class:`DeviceFrame`) on the
  caller's stream, never through host memory; ``encode`` of a CUDA tensor
  returns a DeviceFrame.
* :class:`Encoder` / :class:`Decoder` are reusable contexts, with
  layer-at-a-time streaming (``begin`` / ``encode_layer`` / ``finish`` and
  ``start`` / ``decode_record``).
* :class:`Controller`, :class:`ProfileTable`, :class:`BandwidthEstimator`
  pick a profile per request; :class:`FrameSizeModel` gives it each
  profile's frame size for the request's prompt length.
* :mod:`kvserve.hf` compresses and restores Hugging Face ``DynamicCache``.
* :func:`profile` runs the Bayesian profiler with your own quality
  function (your model, your eval set) and writes the controller's Pareto
  table; :mod:`kvserve.task_eval` is a transformers task evaluator for it.
* :class:`PagedKv` describes one request's KV in an engine's paged caches
  (vLLM, FlashInfer layouts) with its block table: ``encode`` gathers from
  the pages, ``decode(frame, out=paged)`` scatters into the receiver's
  pages, and the frames equal those of the contiguous cache.

A KV cache is either one 5-D tensor ``(layers, 2, kv_heads, tokens,
head_dim)`` (axis 1: 0 = K, 1 = V) with any non-negative strides, or a
sequence of per-layer ``(K, V)`` pairs each ``(kv_heads, tokens, head_dim)``
or ``(1, kv_heads, tokens, head_dim)``. dtypes: float32, float16, bfloat16
(numpy carries bfloat16 as uint16 bits: pass ``dtype="bf16"``).

Errors are raised as subclasses of :class:`KvserveError` carrying the
library's message; invalid arguments are also ``ValueError`` and corrupt
frames ``KvserveCorruptionError`` (a ``ValueError``). Every encode and decode
releases the GIL.

See docs/python.md for the serving-engine recipe.
"""
from __future__ import annotations

from typing import Any, Optional, Union

from . import _kvserve
from ._kvserve import (  # noqa: F401  (re-exported API)
    BandwidthEstimator,
    ChunkEntry,
    Controller,
    Decision,
    Frame,
    FrameInfo,
    FrameSizeModel,
    FrameStats,
    HeadScores,
    KvserveCorruptionError,
    KvserveError,
    KvserveInternalError,
    KvserveInvalidArgumentError,
    KvserveIOError,
    KvserveNotFoundError,
    KvserveNotSupportedError,
    KvserveOutOfRangeError,
    KvservePermissionDeniedError,
    KvserveResourceExhaustedError,
    KvserveTimeoutError,
    KvserveUnavailableError,
    ParamInfo,
    Preset,
    PagedKv as _PagedKv,
    Profile,
    ProfileCost,
    ProfileTable,
    StrategySpace,
    benefit_threshold,
    describe_layout,
    bytes_per_second_to_gbps,
    gbps_to_bytes_per_second,
    inspect,
    load_kv_file,
    measure_codec,
    param_info,
    piecewise_policy,
    predict_seconds,
    presets,
    save_kv_file,
    synth_shapes,
    synthesize_head_scores,
    synthesize_kv,
)

from . import cuda  # noqa: E402
from .cuda import CudaDecoder, CudaEncoder, DeviceFrame  # noqa: E402,F401
from .profiling import Evaluation, NoFeasibleProfileError, ProfileResult, profile  # noqa: E402,F401

cuda_available = cuda.available

__all__ = [
    "CudaDecoder", "CudaEncoder", "DeviceFrame", "cuda", "cuda_available",
    "Evaluation", "NoFeasibleProfileError", "ProfileResult", "StrategySpace", "measure_codec", "profile",
    "BandwidthEstimator", "ChunkEntry", "Controller", "Decision", "Decoder", "Encoder", "Frame",
    "FrameInfo", "FrameSizeModel", "FrameStats", "HeadScores", "KvserveCorruptionError", "KvserveError",
    "KvserveInternalError", "KvserveInvalidArgumentError", "KvserveIOError",
    "KvserveNotFoundError", "KvserveNotSupportedError", "KvserveOutOfRangeError",
    "KvservePermissionDeniedError", "KvserveResourceExhaustedError", "KvserveTimeoutError",
    "KvserveUnavailableError", "PagedKv", "ParamInfo", "Preset", "Profile", "ProfileCost", "ProfileTable",
    "as_torch", "benefit_threshold", "describe_layout", "bytes_per_second_to_gbps", "decode", "encode", "empty_like_frame",
    "gbps_to_bytes_per_second", "inspect", "load_kv_file", "param_info", "piecewise_policy",
    "predict_seconds", "presets", "save_kv_file", "synth_shapes", "synthesize_head_scores",
    "synthesize_kv", "GBPS",
]

__version__ = "0.1.0"
GBPS: float = _kvserve.GBPS  # bytes/s in one Gbps (1.25e8)

ProfileLike = Union[Profile, str]
HeadScoresLike = Union[HeadScores, str, Any, None]  # HeadScores, a JSON path, or a 2-D array


class Encoder(_kvserve.Encoder):
    """A reusable encoding context for one profile. Not thread-safe; use one
    per thread (it runs chunks on its own worker threads).

    Args:
        profile: a :class:`Profile`, a spec string or a preset name.
        threads: worker threads; 0 = hardware concurrency, 1 = calling thread.
        head_scores: per-(layer, kv_head) retrieval scores, required by the
            ``mixhq`` and ``duo`` quantizers: a :class:`HeadScores`, the path of
            a head-scores JSON file, or a 2-D ``(layers, kv_heads)`` array.

    Methods:
        ``encode(kv, out=None, dtype=None)``: the whole cache as one frame.
        Returns a :class:`Frame`, or, with ``out`` (a writable C-contiguous
        buffer), a memoryview of the frame's bytes at the start of ``out``
        (``KvserveResourceExhaustedError`` if it does not fit). ``dtype``
        names the element type of 16-bit integer buffers ("bf16").

        ``begin((layers, kv_heads, tokens, head_dim), dtype) -> bytes``: starts
        a streamed frame and returns its header bytes.
        ``encode_layer(layer, kv) -> bytes``: encodes layer ``layer`` from a
        ``(K, V)`` pair or a full 5-D tensor (only that layer is read) and
        returns its chunk records; layers in any order, each once.
        ``finish() -> bytes``: checks every layer was written. The
        concatenated bytes equal ``encode`` of the same cache.

        ``stats``: section sizes of the last frame; ``profile``: the profile.
    """

    def __init__(self, profile: ProfileLike, threads: int = 0,
                 head_scores: HeadScoresLike = None) -> None:
        super().__init__(profile, threads, head_scores)


class Decoder(_kvserve.Decoder):
    """A reusable decoding context. Not thread-safe; use one per thread.

    Methods:
        ``decode(frame, out=None, keep_mask=False, framework=None)``: decodes
        the whole frame into ``out`` (a 5-D tensor or per-layer ``(K, V)``
        pairs of the frame's shape and dtype, written in place) or, when
        ``out`` is None, into a new array (numpy for f32/f16, torch for bf16
        unless ``framework`` says otherwise). Returns ``out`` or
        ``(out, keep_mask)`` where keep_mask is a ``(layers, 2, kv_heads,
        tokens)`` uint8 array, 0 for tokens the profile pruned.

        ``header(frame) -> FrameInfo``: the dtype and shape a frame decodes to.
        ``start(data) -> int``: parses a streamed frame's header from the front
        of ``data``, returns the bytes used. ``decode_record(data, out) ->
        int``: decodes one chunk record from the front of ``data`` into
        ``out`` (records in any order), returns the bytes used.
    """

    def __init__(self, threads: int = 0) -> None:
        super().__init__(threads)

    def decode(self, frame: Any, out: Any = None, keep_mask: bool = False,
               framework: Optional[str] = None) -> Any:
        dtype = None
        if out is None:
            out = empty_like_frame(self.header(frame), framework=framework)
        if str(getattr(out, "dtype", "")) in ("uint16", "int16"):  # numpy bf16 bits
            dtype = self.header(frame).dtype
        mask = super().decode(frame, out, keep_mask, dtype)
        return (out, mask) if keep_mask else out


class PagedKv(_PagedKv):
    """One request's KV cache in a serving engine's per-layer paged caches,
    borrowed in place (CPU numpy arrays or torch tensors), plus the
    request's block table: token ``t`` sits in block ``block_table[t //
    block_size]``, slot ``t % block_size``.

    Args:
        layers: the per-layer cache tensors (a sequence, one per layer, or
            one tensor with a leading layer axis), each in ``layout``'s shape:
            ``"vllm"`` ``(2, num_blocks, block_size, kv_heads, head_dim)``;
            ``"vllm-block-first"`` and ``"flashinfer-nhd"``
            ``(num_blocks, 2, block_size, kv_heads, head_dim)``;
            ``"flashinfer-hnd"`` ``(num_blocks, 2, kv_heads, block_size,
            head_dim)``. Any strides, head_dim contiguous, every layer alike.
        layout: one of the names above.
        block_table: the request's block ids, in token order (at least
            ``ceil(tokens / block_size)``; copied).
        tokens: the request's token count.
        dtype: the element type of 16-bit integer buffers ("bf16").
        writable: borrow the tensors writable (needed for ``decode(out=)``).

    ``Encoder.encode(paged)`` / ``encode_layer(layer, paged)`` gather from
    the pages; ``Decoder.decode(frame, out=paged)`` / ``decode_record(data,
    paged)`` scatter into them, touching only the request's slots.
    ``gather(out)`` / ``scatter(kv)`` copy between the pages and a 5-D
    ``(layers, 2, kv_heads, tokens, head_dim)`` tensor. The tensors must
    outlive the PagedKv's use. Raises ValueError for a shape that does not
    fit the layout, a table entry outside the cache or (for writing) a block
    named twice. docs/paged.md has the details.
    """

    def __init__(self, layers: Any, layout: str, block_table: Any, tokens: int,
                 dtype: Optional[str] = None, writable: bool = True) -> None:
        super().__init__(layers, layout, block_table, tokens, dtype, writable)


def as_torch(array: Any, dtype: Optional[str] = None) -> Any:
    """Views a numpy KV array as a torch tensor without copying. uint16 arrays
    (bf16 bits, as synthesize_kv returns them) become torch.bfloat16, or
    torch.float16 with ``dtype="f16"``."""
    import torch

    if str(array.dtype) == "uint16":  # torch has no uint16: go through int16
        target = torch.float16 if dtype in ("f16", "float16") else torch.bfloat16
        return torch.from_numpy(array.view("int16")).view(target)
    return torch.from_numpy(array)


def empty_like_frame(info: FrameInfo, framework: Optional[str] = None) -> Any:
    """A new, uninitialised 5-D array to decode a frame with header ``info``
    into. ``framework``: "numpy" or "torch"; default numpy, except bf16
    frames, which default to torch (numpy has no bfloat16; with
    framework="numpy" they get a uint16 array of the bits)."""
    shape = info.kv_shape
    if framework is None:
        framework = "torch" if info.dtype == "bf16" else "numpy"
    if framework == "torch":
        import torch

        dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[info.dtype]
        return torch.empty(shape, dtype=dtype)
    if framework == "numpy":
        import numpy

        dtype = {"f32": numpy.float32, "f16": numpy.float16, "bf16": numpy.uint16}[info.dtype]
        return numpy.empty(shape, dtype=dtype)
    raise ValueError(f"framework: {framework!r} is not 'numpy' or 'torch'")


def encode(kv: Any, profile: ProfileLike, *, threads: int = 0,
           head_scores: HeadScoresLike = None, out: Any = None,
           dtype: Optional[str] = None) -> Union[Frame, memoryview]:
    """Encodes the KV cache ``kv`` with ``profile`` and returns the frame.

    ``kv`` is read in place (no copy): a 5-D ``(layers, 2, kv_heads, tokens,
    head_dim)`` tensor with any strides, or a sequence of per-layer ``(K, V)``
    pairs (HF layout). Returns a :class:`Frame` (bytes-like; ``bytes(frame)``
    copies, ``memoryview(frame)`` does not), or with ``out`` a memoryview of
    the frame at the start of that buffer. For repeated encodes, keep an
    :class:`Encoder`.

    A CUDA ``kv`` is encoded on the GPU (:func:`kvserve.cuda.encode`):
    returns a :class:`DeviceFrame`, or with a host ``out`` the frame's size;
    the call synchronises to report errors.

    Raises KvserveInvalidArgumentError (a ValueError) for a bad profile or
    tensor, KvserveNotSupportedError for CUDA tensors in a CPU-only build.
    """
    if cuda.is_cuda(kv):
        if cuda.DeviceFrame is None:
            cuda._require()
        return cuda.encode(kv, profile, head_scores=head_scores, out=out)
    return Encoder(profile, threads, head_scores).encode(kv, out, dtype)


def decode(frame: Any, out: Any = None, *, threads: int = 0, keep_mask: bool = False,
           framework: Optional[str] = None) -> Any:
    """Decodes ``frame`` (any bytes-like object) into ``out`` in place and
    returns it; with ``out=None`` allocates (see :func:`empty_like_frame`).
    With ``keep_mask=True`` returns ``(out, mask)``.

    Raises KvserveCorruptionError (a ValueError) for malformed, truncated or
    checksum-failing frames, KvserveInvalidArgumentError when ``out`` does not
    match the frame's shape and dtype.

    A :class:`DeviceFrame`, a CUDA frame buffer or a CUDA ``out`` decodes on
    the GPU (:func:`kvserve.cuda.decode`; ``out=None`` then allocates a torch
    CUDA tensor, and the mask is a CUDA uint8 tensor).
    """
    if cuda.is_cuda(frame) or (out is not None and cuda.is_cuda(out)):
        return cuda.decode(frame, out, keep_mask=keep_mask)
    return Decoder(threads).decode(frame, out, keep_mask=keep_mask, framework=framework)

