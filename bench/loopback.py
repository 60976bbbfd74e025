"""Loopback throughput on this machine: plain TCP sockets with 1..n parallel
streams, and kvserve's transport with 1..n lanes, in one run.

    PYTHONPATH=build/release/python python3 bench/loopback.py --streams 1,2,4,8 --lanes 1,2,4 --mb 1024

One TCP stream moves about one core's copy rate; the plain-socket rows say
what several streams could reach here, the transport rows what kvserve's
lanes (docs/transport.md, "Lanes") do reach. Each size is sent
``--repeats`` times; every measurement is printed (no best-of).
"""
from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from typing import Any, List, Optional, Sequence, Tuple

import kvserve
from kvserve import transport


def plain_socket_gbps(streams: int, nbytes: int) -> float:
    """Gbit/s of ``nbytes`` sent over ``streams`` plain loopback TCP
    connections at once (a sender and a receiver thread each, ``sendall`` /
    ``recv_into`` with the GIL released; Nagle and buffers left at the
    OS defaults), from the first byte sent to the last one received."""
    import numpy  # noqa: PLC0415

    part = nbytes // streams
    src = numpy.ones(part * streams, dtype=numpy.uint8)
    out = numpy.empty(part * streams, dtype=numpy.uint8)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(streams)

    def receive() -> None:
        c, _ = listener.accept()
        index = int.from_bytes(c.recv(1), "little")
        view, got = memoryview(out)[index * part:(index + 1) * part], 0
        while got < part:
            got += c.recv_into(view[got:], min(part - got, 8 << 20))
        c.close()

    receivers = [threading.Thread(target=receive) for _ in range(streams)]
    for t in receivers:
        t.start()
    socks = [socket.create_connection(listener.getsockname()) for _ in range(streams)]

    def send(i: int) -> None:
        socks[i].sendall(bytes([i]))
        socks[i].sendall(memoryview(src)[i * part:(i + 1) * part])

    start = time.monotonic()
    senders = [threading.Thread(target=send, args=(i,)) for i in range(streams)]
    for t in senders:
        t.start()
    for t in senders + receivers:
        t.join()
    seconds = time.monotonic() - start
    for c in socks:
        c.close()
    listener.close()
    return part * streams * 8 / seconds / 1e9


def transport_loopback_gbps(frame: Any, secret: str, sends: int = 3, lanes: int = 1,
                            shape_gbps: float = 0.0) -> float:
    """Goodput (Gbit/s) of kvserve's TCP transport alone over this
    machine's loopback: ``frame`` (bytes-like, a whole frame) sent
    ``sends`` times between two threads of this process, striped over
    ``lanes`` connections (each shaped to ``shape_gbps``, 0: unshaped), the
    receiver reading the records straight into one buffer (no Python per
    record); the mean of frame bytes / sender busy seconds. The reference
    for a PD sweep's rate-0 point, which adds the workers' GPU copies and
    Python."""
    sent = _send_frames([frame] * sends, secret, lanes, shape_gbps)
    return statistics.fmean(kvserve.bytes_per_second_to_gbps(n / s) for n, s in sent)


def transport_frames_gbps(frames: Sequence[Any], secret: str, shape_gbps: float = 0.0) -> float:
    """Goodput (Gbit/s) of kvserve's TCP transport alone sending ``frames``
    one after another, each its own transfer, over one connection shaped
    to ``shape_gbps`` (one token bucket for all, as a pool link has): their
    bytes over the sender's busy seconds. The reference for a PD sweep's
    pool fetches, which move the same chunk frames."""
    sent = _send_frames(frames, secret, 1, shape_gbps)
    return kvserve.bytes_per_second_to_gbps(sum(n for n, _ in sent) / sum(s for _, s in sent))


def _send_frames(frames: Sequence[Any], secret: str, lanes: int, shape_gbps: float) -> List[Tuple[int, float]]:
    """(frame bytes, sender busy seconds) per frame of ``frames``, sent in
    order between two threads of this process over ``lanes`` connections
    (each shaped to ``shape_gbps``), the receiver reading every record
    straight into one buffer."""
    import numpy  # noqa: PLC0415

    t = transport.tcp()
    listener = t.listen("127.0.0.1:0")
    arena = numpy.empty(max(len(f) for f in frames), dtype=numpy.uint8)
    errors: List[BaseException] = []

    def receive() -> None:
        try:
            conns = [transport.accept(listener, timeout=30, secret=secret) for _ in range(lanes)]
            try:
                for _ in frames:
                    transport.receive_frame(conns[0], lambda _tid, _h: arena, None, timeout=120,
                                            lanes=conns[1:] or None)
            finally:
                for c in conns:
                    c.close()
        except BaseException as e:  # re-raised on the calling thread
            errors.append(e)

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    sent = []
    conns = [transport.dial(t, listener.address, secret=secret, shape_gbps=shape_gbps) for _ in range(lanes)]
    try:
        for i, frame in enumerate(frames):
            stats = transport.send_frame(conns[0], i, frame, lanes=conns[1:] or None)
            sent.append((stats.frame_bytes, stats.busy_seconds))
    finally:
        for c in conns:
            c.close()
        thread.join(120)
        listener.close()
    if errors:
        raise errors[0]
    return sent


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="bench/loopback.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="1,2,4,8", help="plain-socket stream counts (empty: none)")
    p.add_argument("--lanes", default="1,2,4", help="kvserve transport lane counts (empty: none)")
    p.add_argument("--mb", type=int, default=1024, help="bytes per measurement, MiB")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    nbytes = args.mb << 20
    print(f"# loopback, {nbytes >> 20} MiB per measurement, {args.repeats} repeats", flush=True)
    for s in (int(x) for x in args.streams.split(",") if x):
        print(f"plain sockets, {s} streams:", [round(plain_socket_gbps(s, nbytes), 1) for _ in range(args.repeats)],
              "Gbps", flush=True)
    lanes = [int(x) for x in args.lanes.split(",") if x]
    if lanes:
        import numpy  # noqa: PLC0415

        # A raw frame of f16 KV: records of one layer's keys or values.
        tokens = max(1, nbytes // (32 * 2 * 8 * 128 * 2))
        frame = kvserve.encode(numpy.ones((32, 2, 8, tokens, 128), dtype=numpy.float16), "none")
        for n in lanes:
            rates = [round(transport_loopback_gbps(frame, "loopback-bench", sends=1, lanes=n), 1)
                     for _ in range(args.repeats)]
            print(f"kvserve transport, {n} lanes ({len(frame) >> 20} MiB frame):", rates, "Gbps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
