"""The CUDA codec from Python: encode and decode KV caches that live in GPU
memory, on the caller's CUDA stream, without staging through host memory.

    enc = kvserve.CudaEncoder("kivi-2", like=kv)      # kv: a CUDA tensor
    frame = enc.encode(kv)                             # DeviceFrame, stream-ordered
    dec = kvserve.CudaDecoder(frame)                   # header read once (syncs)
    dec.decode(frame, out=kv_out)                      # stream-ordered
    dec.check()                                        # the one sync: raises on corruption

``kvserve.encode(cuda_tensor, profile)`` and ``kvserve.decode(frame,
out=cuda_tensor)`` do the same in one call and check (synchronise) before
returning.

Tensors: torch CUDA tensors (through ``__dlpack__``, with the stream
handshake), any object with ``__dlpack__`` on a CUDA device or with
``__cuda_array_interface__`` (CuPy, Numba), or a DLPack capsule. A KV cache is
one 5-D ``(layers, 2, kv_heads, tokens, head_dim)`` tensor with any strides,
a sequence of per-layer ``(K, V)`` pairs (HF layout; a layer's V may lie
below its K in memory), or a :class:`kvserve.PagedKv` over CUDA page caches
(vLLM, FlashInfer layouts; encode gathers through the request's block
table, decode scatters through the receiver's). A PagedKv borrows its
tensors when it is made: work still pending on them must be ordered before
the codec's stream (same stream, or synchronise).

Streams: ``stream=None`` means torch's current stream on the tensor's device
when torch is loaded (CuPy's current stream for CuPy arrays), else the legacy
default stream. A ``torch.cuda.Stream``, a CuPy stream or a raw
``cudaStream_t`` integer may be passed.

What synchronises with the host: creating a CudaEncoder/CudaDecoder (the plan
upload; a decoder made from a DeviceFrame also reads its header),
``check()``, ``check=True`` arguments, the size of a rANS frame the first time
it is read (``len(frame)``, ``frame.nbytes``; pack frames know it without a
sync), ``frame.tobytes()``, and decoding a frame given in host memory (it is
copied to the device first). Everything else only queues work.

Errors: bad arguments (a CPU tensor, another device, a buffer too small, a
shape or dtype that differs from the encoder's) raise
KvserveInvalidArgumentError at the call; errors found by the kernels (a
non-finite value, a corrupt frame) are raised by the next ``check()``.
"""
from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

from . import _kvserve

DeviceFrame = getattr(_kvserve, "DeviceFrame", None)


def available() -> bool:
    """True when this build has the CUDA codec and a CUDA device is present."""
    return bool(_kvserve.cuda_available())


def _require() -> None:
    if not hasattr(_kvserve, "CudaEncoder"):
        raise _kvserve.KvserveNotSupportedError(
            "this kvserve build has no CUDA codec: build with nvcc present "
            "(pip install . / -DKVSERVE_CUDA=ON), see docs/python.md")


def _first_tensor(kv: Any) -> Any:
    if isinstance(kv, (list, tuple)) and kv:
        first = kv[0]
        return first[0] if isinstance(first, (list, tuple)) else first
    return kv


def is_cuda(obj: Any) -> bool:
    """True when ``obj`` (a tensor, a KV cache as a sequence of (K, V) pairs,
    or a DeviceFrame) lives in CUDA device memory."""
    t = _first_tensor(obj)
    if DeviceFrame is not None and isinstance(t, DeviceFrame):
        return True
    if isinstance(t, _kvserve.PagedKv):
        return bool(t.on_cuda)
    if hasattr(t, "__dlpack_device__"):
        try:
            return int(t.__dlpack_device__()[0]) == 2
        except Exception:  # noqa: BLE001 - not a device-aware object
            return False
    return hasattr(t, "__cuda_array_interface__")


def device_of(obj: Any) -> int:
    """The CUDA device ordinal of a tensor, cache or DeviceFrame (0 if unknown)."""
    t = _first_tensor(obj)
    if (DeviceFrame is not None and isinstance(t, DeviceFrame)) or isinstance(t, _kvserve.PagedKv):
        return t.device
    if hasattr(t, "__dlpack_device__"):
        return int(t.__dlpack_device__()[1])
    dev = getattr(t, "device", None)
    index = getattr(dev, "index", None) if dev is not None else None
    if index is None:
        index = getattr(dev, "id", None) if dev is not None else None
    return int(index or 0)


def current_stream(obj: Any = None, device: Optional[int] = None) -> int:
    """The stream a call defaults to, as a ``cudaStream_t`` integer: CuPy's
    current stream for CuPy arrays, else torch's current stream on the
    device when torch is loaded, else 0 (the legacy default stream)."""
    t = _first_tensor(obj)
    if type(t).__module__.startswith("cupy"):
        import cupy  # noqa: PLC0415

        return int(cupy.cuda.get_current_stream().ptr)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        dev = device if device is not None else device_of(obj) if obj is not None else None
        return int(torch.cuda.current_stream(dev).cuda_stream)
    return 0


def _stream(stream: Any, obj: Any, device: int) -> Any:
    return current_stream(obj, device) if stream is None else stream


def kv_shape(kv: Any) -> Tuple[Tuple[int, int, int, int], str]:
    """``((layers, kv_heads, tokens, head_dim), dtype)`` of a KV cache given
    as a 5-D tensor or a sequence of per-layer (K, V) pairs."""
    def dims(t: Any) -> Tuple[int, ...]:
        if hasattr(t, "shape"):
            return tuple(int(n) for n in t.shape)
        return tuple(int(n) for n in t.__cuda_array_interface__["shape"])

    def dtype(t: Any) -> str:
        name = str(getattr(t, "dtype", "")).replace("torch.", "")
        return {"bfloat16": "bf16", "float16": "f16", "half": "f16", "float32": "f32",
                "float": "f32"}.get(name, name)

    if isinstance(kv, _kvserve.PagedKv):
        return tuple(kv.shape), kv.dtype
    if isinstance(kv, (list, tuple)):
        k = kv[0][0]
        d = dims(k)
        if len(d) == 4:
            d = d[1:]
        if len(d) != 3:
            raise ValueError(f"kv[0].K: expected (kv_heads, tokens, head_dim) or (1, kv_heads, tokens, head_dim), got {d}")
        return (len(kv), d[0], d[1], d[2]), dtype(k)
    d = dims(kv)
    if len(d) != 5 or d[1] != 2:
        raise ValueError(f"kv: expected a (layers, 2, kv_heads, tokens, head_dim) tensor, got shape {d}")
    return (d[0], d[2], d[3], d[4]), dtype(kv)


class CudaEncoder:
    """Encodes KV caches of one (profile, shape, dtype) on a CUDA device.

    ``like``: a CUDA KV cache to take shape, dtype and device from; or give
    ``shape=(layers, kv_heads, tokens, head_dim)``, ``dtype`` and ``device``.
    ``head_scores``: needed by mixhq and duo. Creating one uploads the plan
    and allocates the workspace (synchronises); reuse it across requests of
    one shape.
    """

    def __init__(self, profile: Any, like: Any = None, *, shape: Any = None, dtype: Any = None,
                 device: Optional[int] = None, head_scores: Any = None) -> None:
        _require()
        if like is not None:
            shape, like_dtype = kv_shape(like)
            dtype = like_dtype if dtype is None else dtype
            device = device_of(like) if device is None else device
        if shape is None or dtype is None:
            raise ValueError("CudaEncoder: pass like=<a CUDA KV cache> or shape= and dtype=")
        self.device = 0 if device is None else int(device)
        self._native = _kvserve.CudaEncoder(profile, list(shape), str(dtype).replace("torch.", ""),
                                            head_scores, self.device)

    @property
    def max_frame_bytes(self) -> int:
        """Bytes a frame buffer (``out``) must hold; exact for pack profiles."""
        return self._native.max_frame_bytes

    @property
    def frame_size_is_static(self) -> bool:
        """True for pack profiles: every frame has ``max_frame_bytes`` bytes."""
        return self._native.frame_size_is_static

    @property
    def header_bytes(self) -> int:
        """Bytes of the frame header, written by :meth:`begin` (the records
        start there)."""
        return self._native.header_bytes

    @property
    def profile(self) -> Any:
        return self._native.profile

    @property
    def shape(self) -> Tuple[int, int, int, int]:
        return self._native.shape

    @property
    def dtype(self) -> str:
        return self._native.dtype

    def encode(self, kv: Any, out: Any = None, *, stream: Any = None, check: bool = False) -> Any:
        """Encodes the whole cache ``kv`` (CUDA memory, read in place).

        ``out``: None (a new DeviceFrame from the stream-ordered pool), a
        DeviceFrame to reuse, a CUDA buffer of at least ``max_frame_bytes``
        bytes (16-byte aligned; returns a DeviceFrame over it), or a host
        buffer, pinned or not (the frame is copied there; returns its size in
        bytes, valid once the stream reaches this point). ``check=True``
        synchronises and raises kernel-found errors (non-finite values).
        """
        return self._native.encode(kv, out, _stream(stream, kv, self.device), check)

    def begin(self, out: Any = None, *, stream: Any = None) -> Any:
        """Starts a layer-at-a-time frame (for forward hooks: encode each
        layer as prefill produces it). Returns the DeviceFrame being written;
        ``out`` as :meth:`encode`'s, device memory only."""
        return self._native.begin(out, _stream(stream, None, self.device))

    def encode_layer(self, layer: int, kv: Any, *, stream: Any = None) -> None:
        """Encodes layer ``layer`` (layers in order 0, 1, ...): ``kv`` is that
        layer's ``(K, V)`` pair, or the whole cache (only this layer is read).
        The bytes equal :meth:`encode`'s."""
        self._native.encode_layer(layer, kv, _stream(stream, kv, self.device))

    def finish(self, *, stream: Any = None, check: bool = False) -> Any:
        """Completes the frame begun by :meth:`begin` and returns it."""
        return self._native.finish(_stream(stream, None, self.device), check)

    def check(self, *, stream: Any = None) -> None:
        """Synchronises ``stream`` and raises the first error the kernels found
        since the last encode/begin (KvserveInvalidArgumentError for a
        non-finite value), then clears it."""
        self._native.check(_stream(stream, None, self.device))


class CudaDecoder:
    """Decodes frames of one header on a CUDA device.

    ``header``: a DeviceFrame (its header is read; synchronises) or the
    frame's first bytes in host memory (``CudaDecoder.header_bytes`` or more;
    the whole frame is fine).
    """

    def __init__(self, header: Any, *, device: Optional[int] = None) -> None:
        _require()
        if device is None:
            device = header.device if DeviceFrame is not None and isinstance(header, DeviceFrame) else 0
        self._native = _kvserve.CudaDecoder(header, int(device))
        self.device = self._native.device

    @property
    def info(self) -> Any:
        """The frame header (:class:`kvserve.FrameInfo`)."""
        return self._native.info

    @property
    def header_bytes(self) -> int:
        return self._native.header_bytes

    def empty_out(self) -> Any:
        """A new torch CUDA tensor ``(layers, 2, kv_heads, tokens, head_dim)``
        to decode into."""
        import torch  # noqa: PLC0415

        dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[self.info.dtype]
        return torch.empty(self.info.kv_shape, dtype=dtype, device=f"cuda:{self.device}")

    def decode(self, frame: Any, out: Any = None, *, keep_mask: Any = None, stream: Any = None,
               check: bool = False) -> Any:
        """Decodes ``frame`` (a DeviceFrame, a CUDA byte buffer, or host bytes,
        which are copied to the device first) into ``out`` (a CUDA 5-D tensor
        or per-layer (K, V) pairs; None allocates a torch tensor) and returns
        ``out``. ``keep_mask``: a CUDA uint8 buffer of layers*2*kv_heads*tokens
        bytes that receives 0 for pruned tokens. Corruption is raised by
        :meth:`check` (or here with ``check=True``)."""
        if out is None:
            out = self.empty_out()
        self._native.decode(frame, out, keep_mask, _stream(stream, out, self.device), check)
        return out

    def decode_layer(self, layer: int, records: Any, out: Any, *, keep_mask: Any = None,
                     stream: Any = None) -> None:
        """Decodes the records of one layer as they arrive (layers in any
        order, each once per frame) into the 5-D ``out``; ``records`` holds
        exactly that layer's records (for pack frames, the bytes at
        ``frame.layer_records(layer)``). Call :meth:`check` after the last."""
        self._native.decode_layer(layer, records, out, keep_mask, _stream(stream, out, self.device))

    def check(self, *, stream: Any = None) -> None:
        """Synchronises and raises KvserveCorruptionError if a frame decoded
        since the last check was malformed."""
        self._native.check(_stream(stream, None, self.device))


_encoders: dict = {}


def encode(kv: Any, profile: Any, *, head_scores: Any = None, out: Any = None,
           stream: Any = None) -> Any:
    """One-call CUDA encode (see :func:`kvserve.encode`): reuses an encoder
    per (profile, shape, dtype, device), checks before returning."""
    shape, dtype = kv_shape(kv)
    device = device_of(kv)
    key = (str(profile), shape, dtype, device)
    enc = _encoders.get(key) if head_scores is None else None
    if enc is None:
        enc = CudaEncoder(profile, kv, head_scores=head_scores)
        if head_scores is None:
            if len(_encoders) >= 8:
                _encoders.pop(next(iter(_encoders)))
            _encoders[key] = enc
    return enc.encode(kv, out, stream=stream, check=True)


def decode(frame: Any, out: Any = None, *, keep_mask: bool = False, stream: Any = None) -> Any:
    """One-call CUDA decode (see :func:`kvserve.decode`), checked. With
    ``keep_mask=True`` returns ``(out, mask)``, mask a CUDA uint8 tensor
    ``(layers, 2, kv_heads, tokens)``."""
    if DeviceFrame is not None and isinstance(frame, DeviceFrame):
        dec = CudaDecoder(frame)
    else:
        device = device_of(out) if out is not None and is_cuda(out) else device_of(frame) if is_cuda(frame) else 0
        dec = CudaDecoder(_head_of(frame) if is_cuda(frame) else memoryview(frame), device=device)
    mask = None
    if keep_mask:
        import torch  # noqa: PLC0415

        mask = torch.empty(dec.info.kv_shape[:4], dtype=torch.uint8, device=f"cuda:{dec.device}")
    out = dec.decode(frame, out, keep_mask=mask, stream=stream, check=True)
    return (out, mask) if keep_mask else out


def _head_of(frame: Any) -> bytes:
    """The first bytes of a frame held in a CUDA buffer (a torch tensor)."""
    head = frame[: 1 << 20] if hasattr(frame, "__getitem__") else frame  # headers are far smaller
    if hasattr(head, "cpu"):
        return bytes(head.cpu().numpy().tobytes())
    raise _kvserve.KvserveNotSupportedError(
        "decode: pass the frame as a DeviceFrame, host bytes, or a torch CUDA uint8 tensor")


def _page_index(layout: str, k: int, blocks: Any, slots: Any) -> Tuple[Any, ...]:
    if layout == "vllm":  # [2, blocks, block_size, heads, dim]
        return (k, blocks, slots)
    if layout in ("vllm-block-first", "flashinfer-nhd"):  # [blocks, 2, block_size, heads, dim]
        return (blocks, k, slots)
    if layout == "flashinfer-hnd":  # [blocks, 2, heads, block_size, dim]
        return (blocks, k, slice(None), slots)
    raise ValueError(f"layout {layout!r}: expected vllm, vllm-block-first, flashinfer-nhd or flashinfer-hnd")


def page_shape(layout: str, num_blocks: int, block_size: int, kv_heads: int, head_dim: int) -> Tuple[int, ...]:
    """The shape of one layer's page cache in ``layout``."""
    if layout == "vllm":
        return (2, num_blocks, block_size, kv_heads, head_dim)
    if layout in ("vllm-block-first", "flashinfer-nhd"):
        return (num_blocks, 2, block_size, kv_heads, head_dim)
    _page_index(layout, 0, None, None)
    return (num_blocks, 2, kv_heads, block_size, head_dim)


def to_pages(kv: Any, layout: str, block_size: int, block_table: Any, num_blocks: int) -> list:
    """Copies a torch KV cache ``(layers, 2, kv_heads, tokens, head_dim)``
    into new per-layer page caches of ``layout`` (zeros elsewhere), token t in
    block ``block_table[t // block_size]``: a request as an engine holds it.
    For tests, benchmarks and glue code; the codec itself reads pages in place."""
    import torch  # noqa: PLC0415

    layers, _, heads, tokens, dim = kv.shape
    tok = torch.arange(tokens, device=kv.device)
    blocks = torch.as_tensor(list(block_table), device=kv.device)[tok // block_size]
    slots = tok % block_size
    pages = []
    for l in range(layers):
        p = torch.zeros(page_shape(layout, num_blocks, block_size, heads, dim), dtype=kv.dtype, device=kv.device)
        for k in range(2):
            p[_page_index(layout, k, blocks, slots)] = kv[l, k].transpose(0, 1)
        pages.append(p)
    return pages


def from_pages(pages: list, layout: str, block_size: int, block_table: Any, tokens: int) -> Any:
    """The inverse of :func:`to_pages`: a new ``(layers, 2, kv_heads, tokens,
    head_dim)`` tensor of the request's tokens."""
    import torch  # noqa: PLC0415

    tok = torch.arange(tokens, device=pages[0].device)
    blocks = torch.as_tensor(list(block_table), device=pages[0].device)[tok // block_size]
    slots = tok % block_size
    return torch.stack([torch.stack([p[_page_index(layout, k, blocks, slots)].transpose(0, 1) for k in range(2)])
                        for p in pages])
