"""kvserve's own transport from Python: what a prefill worker streams KV over.

The C++ transport (``include/kvserve/transport.h``, docs/transport.md)
behind a small API:

* :func:`tcp` / :func:`ucx` make a :class:`Transport`;
  ``transport.listen(address)`` gives a :class:`Listener` (``"host:port"``;
  port 0 picks a free one, read it back from ``listener.address``) and
  ``transport.dial(address, ...)`` a :class:`Connection`.
* Connections authenticate before any data (HMAC-SHA256 challenge-response
  over a shared ``secret``; both sides leave it empty only on loopback),
  shape the sender to a link rate with a token bucket (``shape_gbps``; or
  one :class:`SharedLink` bucket for several workers' connections, which
  then contend for it as transfers on one real link do), and
  hand every transfer's goodput sample to a :class:`kvserve.BandwidthEstimator`
  (``estimator=``) from the transferring thread -- the controller then
  decides from measured bandwidth.
* :class:`FrameSender` streams one frame: the header, then each chunk
  record as the encoder produces it, then ``finish()``, which waits for the
  receiver's verdict. ``write(transfer_id, data)`` takes the bytes an
  :class:`kvserve.Encoder` returns from ``begin`` / ``encode_layer`` /
  ``finish`` as they come and cuts them at record boundaries itself.
  ``FrameSender(conn, lanes=[c1, c2, ...])`` stripes the records over more
  connections to the same receiver, each written by its own thread (one
  TCP stream moves about one core's copy rate); the receiver passes the
  same ``lanes`` to :func:`receive_frame`, in the same order.
* :func:`receive_frame` delivers the header and each record to callbacks as
  they arrive; :func:`receive_kv` decodes each record straight into a KV
  array as it arrives (the layer-streamed decode of a decode worker).

Every blocking call releases the GIL. Errors are the package's exception
classes: ``KvservePermissionDeniedError`` for a peer without the secret,
``KvserveUnavailableError`` when the peer closed or died,
``KvserveTimeoutError``, ``KvserveCorruptionError`` for bytes that fail a
checksum or do not decode, ``KvserveInvalidArgumentError`` (a ValueError) for
bad arguments.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence, Tuple

from . import _kvserve
from ._kvserve import (  # noqa: F401  (re-exported API)
    Connection,
    ConnectionOptions,
    FrameSender,
    Listener,
    SharedLink,
    Transport,
    TransferStats,
)

__all__ = ["Transport", "Listener", "Connection", "ConnectionOptions", "FrameSender", "SharedLink",
           "TransferStats", "tcp", "ucx", "options", "dial", "accept", "send_frame",
           "receive_frame", "receive_kv", "FIRST_USER_TYPE", "MAX_USER_TYPE"]

# Message types a user of Connection.send may use (0xE0-0xFF belong to the
# transport, 0x10-0x14 to frame streaming).
FIRST_USER_TYPE = 0x20
MAX_USER_TYPE = 0xDF


def tcp() -> Transport:
    """kvserve's TCP transport (asio; TCP_NODELAY, no SIGPIPE)."""
    return _kvserve.tcp_transport()


def ucx(tls: str = "", devices: str = "", secret: str = "") -> Transport:
    """UCX active messages behind the same interface (docs/transport.md §UCX).

    ``tls`` in UCX_TLS syntax (``"tcp"``, ``"sm,self"``, ``"rc,dc,cuda_ipc"``;
    empty: what UCX finds), ``devices`` in UCX_NET_DEVICES syntax. ``secret``
    keys the UCX channel (use the same bytes as the connection's secret).
    Raises KvserveIOError when UCX cannot start.
    """
    return _kvserve.ucx_transport(tls, devices, secret)


def options(*, secret: str = "", local_id: str = "kvserve", shape_gbps: float = 0.0,
            io_timeout: float = 30.0, connect_timeout: float = 5.0,
            handshake_timeout: float = 5.0, max_message_bytes: int = 1 << 30,
            estimator: Optional[Any] = None) -> ConnectionOptions:
    """Connection options.

    ``secret``: shared secret both peers prove (empty on both sides: no
    check). ``local_id``: this side's id, the peer's ``peer_id``.
    ``shape_gbps``: sender-side token bucket at this rate (Gbit/s, 1e9 bit/s;
    0: unshaped). ``io_timeout``: idle timeout of every blocking step, s.
    ``max_message_bytes``: largest message accepted (larger declared lengths
    are refused before anything is allocated). ``estimator``: a
    :class:`kvserve.BandwidthEstimator` that receives every goodput sample
    (bytes, seconds of actual transfer) keyed by the peer's id.
    """
    return ConnectionOptions(secret, local_id, float(shape_gbps), float(io_timeout),
                             float(connect_timeout), float(handshake_timeout),
                             int(max_message_bytes), estimator)


def dial(transport: Transport, address: str, **kwargs: Any) -> Connection:
    """Connects to ``address`` and authenticates; keywords as :func:`options`."""
    return transport.dial(address, options(**kwargs))


def accept(listener: Listener, timeout: float = 30.0, **kwargs: Any) -> Connection:
    """Accepts one peer within ``timeout`` s and authenticates it; keywords as
    :func:`options`. Raises KvserveTimeoutError when none arrives."""
    return listener.accept(float(timeout), options(**kwargs))


def send_frame(connection: Connection, transfer_id: int, frame: Any,
               lanes: Optional[Sequence[Connection]] = None) -> TransferStats:
    """Streams a complete frame (bytes-like: a :class:`kvserve.Frame`,
    bytes, a memoryview) record by record (striped over ``lanes`` when
    given, see :class:`FrameSender`) and waits for the receiver's verdict.
    Returns the sender's :class:`TransferStats`."""
    sender = FrameSender(connection, lanes)
    sender.write(transfer_id, frame)
    return sender.finish()


def receive_frame(connection: Connection,
                  on_header: Optional[Callable[[int, memoryview], Any]] = None,
                  on_record: Optional[Callable[[memoryview], None]] = None,
                  timeout: Optional[float] = None,
                  lanes: Optional[Sequence[Connection]] = None) -> TransferStats:
    """Receives one streamed frame.

    Waits up to ``timeout`` s (None: the connection's io timeout) for its
    beginning, then calls ``on_header(transfer_id, header)`` and
    ``on_record(record)`` per chunk record as it arrives (the memoryviews
    are valid only during the call: copy what you keep), checks the record
    count and acknowledges. ``on_header`` may return a writable contiguous
    1-D buffer (e.g. a numpy view of pinned memory): records are then read
    from the socket straight into it, back to back from its start, and
    ``on_record`` gets views of it (valid as long as the buffer), until a
    record does not fit; that record and every later one arrive as usual.
    Return None for the usual delivery. ``lanes``: the sender's lanes (see
    :class:`FrameSender`), each read by its own thread; records still reach
    the callbacks in order. An exception raised by a callback stops
    delivery, is sent to the sender as the transfer's verdict (its
    ``finish()`` raises), and is re-raised here after the rest of the
    transfer was drained. Returns the receiver's :class:`TransferStats`.
    """
    return _kvserve.receive_frame(connection, on_header, on_record, timeout, lanes)


def receive_kv(connection: Connection, out: Any = None, *, decoder: Any = None,
               timeout: Optional[float] = None,
               on_layer: Optional[Callable[[int], None]] = None,
               timing: Optional[dict] = None,
               lanes: Optional[Sequence[Connection]] = None) -> Tuple[Any, TransferStats]:
    """Receives one streamed frame and decodes each record into a KV cache
    as it arrives (CPU codec).

    ``out``: the cache to write (a 5-D array or per-layer ``(K, V)`` pairs of
    the frame's shape, or a :class:`kvserve.PagedKv`); None: a new array
    allocated from the header (as :func:`kvserve.empty_like_frame`).
    ``decoder``: a reusable :class:`kvserve.Decoder`. ``on_layer(layer)`` is
    called once every record of ``layer`` was decoded (a frame's records
    come layer by layer, as the sender encoded them). ``timing`` (a dict)
    receives ``decode_seconds``: the time spent decoding records (the rest
    of the transfer is waiting for them). ``lanes``: as for
    :func:`receive_frame`. Returns ``(out, stats)``.
    """
    from . import Decoder, empty_like_frame  # the package's wrappers

    decoder = decoder if decoder is not None else Decoder()
    state = {"out": out, "seen": 0, "per_layer": 0, "decode_seconds": 0.0}

    def header(_transfer_id: int, data: memoryview) -> None:
        decoder.start(data)
        info = decoder.info
        if state["out"] is None:
            state["out"] = empty_like_frame(info)
        # docs/format.md: a frame's records come layer by layer, the same
        # number for every layer.
        state["per_layer"] = info.chunk_count // max(1, info.shape[0])

    def record(data: memoryview) -> None:
        start = time.monotonic()
        decoder.decode_record(data, state["out"])
        state["decode_seconds"] += time.monotonic() - start
        state["seen"] += 1
        per_layer = state["per_layer"]
        if on_layer is not None and per_layer and state["seen"] % per_layer == 0:
            on_layer(state["seen"] // per_layer - 1)

    stats = receive_frame(connection, header, record, timeout, lanes)
    if timing is not None:
        timing["decode_seconds"] = state["decode_seconds"]
    return state["out"], stats
