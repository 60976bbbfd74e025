"""kvserve.transport: frames streamed over kvserve's own TCP (and UCX)
transport between threads of this process, authentication, shaping and
goodput samples, and errors as exceptions."""
from __future__ import annotations

import threading
import unittest

import numpy as np

import kvserve
from kvserve import transport
from kv_test_util import SHAPE, synth

SECRET = "python-transport-test-secret"


class Peer(threading.Thread):
    """Runs `fn(connection)` on the accepted side of a listener; keeps its
    result or exception for the test thread."""

    def __init__(self, listener, fn, **options):
        super().__init__(daemon=True)
        self.listener, self.fn, self.options = listener, fn, options
        self.result, self.error = None, None

    def run(self):
        try:
            conn = transport.accept(self.listener, timeout=10, **self.options)
            try:
                self.result = self.fn(conn)
            finally:
                conn.close()
        except BaseException as e:  # handed to the test thread
            self.error = e

    def outcome(self):
        self.join(30)
        if self.is_alive():
            raise AssertionError("peer thread did not finish")
        if self.error is not None:
            raise self.error
        return self.result


class FrameStreamingTest(unittest.TestCase):
    def stream_layers(self, t, profile, seed, **sender_options):
        """Encodes a seeded cache layer by layer into a FrameSender while the
        peer decodes each record as it arrives; returns (kv, received kv,
        received frame bytes, sender stats, receiver stats, layers seen)."""
        kv = synth(seed, "f16")
        listener = t.listen("127.0.0.1:0")
        received = []
        layers = []

        def receive(conn):
            def on_header(_tid, header):
                received.append(bytes(header))

            out, stats = transport.receive_kv(conn, on_layer=layers.append, timeout=10)
            return out, stats

        peer = Peer(listener, receive, secret=SECRET, local_id="decode")
        peer.start()
        conn = transport.dial(t, listener.address, secret=SECRET, local_id="prefill", **sender_options)
        self.assertEqual(conn.peer_id, "decode")
        encoder = kvserve.Encoder(profile)
        sender = transport.FrameSender(conn)
        sender.write(7, encoder.begin(SHAPE, "f16"))
        for layer in range(SHAPE[0]):
            sender.write(7, encoder.encode_layer(layer, (kv[layer, 0], kv[layer, 1])))
        sender.write(7, encoder.finish())
        sent = sender.finish()
        out, got = peer.outcome()
        conn.close()
        listener.close()
        return kv, out, sent, got, layers

    def test_records_decode_as_they_arrive_and_equal_a_local_decode(self):
        t = transport.tcp()
        for seed, profile in [(301, "kivi-2"), (302, "cachegen"), (303, "none")]:
            kv, out, sent, got, layers = self.stream_layers(t, profile, seed)
            frame = kvserve.encode(kv, profile)
            self.assertTrue(np.array_equal(out, kvserve.decode(frame)), profile)
            if profile == "none":
                self.assertTrue(np.array_equal(out, kv))
            self.assertEqual(sent.frame_bytes, len(frame), profile)
            self.assertEqual(got.frame_bytes, len(frame), profile)
            self.assertEqual(sent.records, kvserve.inspect(frame).chunk_count, profile)
            self.assertEqual(sent.transfer_id, 7)
            self.assertEqual(layers, list(range(SHAPE[0])), profile)

    def test_whole_frame_and_raw_callbacks_see_the_frame_bytes(self):
        t = transport.tcp()
        kv = synth(304, "f16")
        frame = kvserve.encode(kv, "kivi-4")
        listener = t.listen("127.0.0.1:0")
        pieces = []

        def receive(conn):
            return transport.receive_frame(conn, lambda tid, h: pieces.append((tid, bytes(h))),
                                           lambda r: pieces.append((None, bytes(r))), timeout=10)

        peer = Peer(listener, receive)
        peer.start()
        conn = transport.dial(t, listener.address)
        stats = transport.send_frame(conn, 99, frame)
        got = peer.outcome()
        self.assertEqual(pieces[0][0], 99)
        self.assertEqual(b"".join(p for _, p in pieces), bytes(frame))
        self.assertEqual(got.records, stats.records)
        self.assertGreater(stats.goodput_gbps, 0)

    def test_records_are_read_into_the_buffer_on_header_returns(self):
        t = transport.tcp()
        frame = kvserve.encode(synth(306, "f16"), "kivi-4")
        header_bytes = kvserve.inspect(frame).chunks[0].offset
        records = bytes(frame)[header_bytes:]
        for capacity in (len(records), len(records) // 2):
            listener = t.listen("127.0.0.1:0")
            arena = np.zeros(capacity, dtype=np.uint8)
            seen = []

            def receive(conn):
                def on_record(r):
                    a = np.frombuffer(r, dtype=np.uint8)
                    seen.append((a.ctypes.data - arena.ctypes.data, bytes(r)))

                return transport.receive_frame(conn, lambda tid, h: arena, on_record, timeout=10)

            peer = Peer(listener, receive)
            peer.start()
            conn = transport.dial(t, listener.address)
            transport.send_frame(conn, 5, frame)
            peer.outcome()
            conn.close()
            listener.close()
            self.assertEqual(b"".join(r for _, r in seen), records)
            offset, placed = 0, 0
            for address, r in seen:  # placed records sit back to back from the start
                if 0 <= address < capacity:
                    self.assertEqual(address, offset)
                    self.assertEqual(bytes(arena[address:address + len(r)]), r)
                    offset += len(r)
                    placed += 1
            self.assertEqual(placed == len(seen), capacity == len(records))
            self.assertGreater(placed, 0)

    def test_on_header_returning_a_read_only_buffer_fails_the_transfer(self):
        t = transport.tcp()
        frame = kvserve.encode(synth(307, "f16"), "kivi-4")
        listener = t.listen("127.0.0.1:0")
        peer = Peer(listener, lambda conn: transport.receive_frame(conn, lambda tid, h: b"x" * 1024, None,
                                                                  timeout=10))
        peer.start()
        conn = transport.dial(t, listener.address)
        with self.assertRaises(kvserve.KvserveError):
            transport.send_frame(conn, 6, frame)
        with self.assertRaises(BufferError):
            peer.outcome()
        conn.close()
        listener.close()

    def test_lanes_stripe_a_frame_over_several_connections_in_order(self):
        t = transport.tcp()
        frame = kvserve.encode(synth(308, "f16"), "kivi-4")
        listener = t.listen("127.0.0.1:0")
        pieces = []

        def receive(conn):
            lanes = [transport.accept(listener, timeout=10, secret=SECRET) for _ in range(2)]
            try:
                return [transport.receive_frame(conn, lambda tid, h: pieces.append(bytes(h)),
                                                lambda r: pieces.append(bytes(r)), timeout=10, lanes=lanes)
                        for _ in range(2)], [conn.stats["bytes_received"]] + [c.stats["bytes_received"] for c in lanes]
            finally:
                for c in lanes:
                    c.close()

        peer = Peer(listener, receive, secret=SECRET)
        peer.start()
        conn = transport.dial(t, listener.address, secret=SECRET)
        lanes = [transport.dial(t, listener.address, secret=SECRET) for _ in range(2)]
        sent = [transport.send_frame(conn, i, frame, lanes=lanes) for i in range(2)]
        (got, lane_bytes) = peer.outcome()
        for c in [conn] + lanes:
            c.close()
        listener.close()
        records = kvserve.inspect(frame).chunk_count
        self.assertEqual(b"".join(pieces), bytes(frame) * 2)  # in order, twice
        self.assertEqual([g.records for g in got], [records, records])
        self.assertEqual([s.records for s in sent], [records, records])
        for b in lane_bytes:  # the lanes shared the bytes about equally
            self.assertGreater(b, 0.8 * sum(lane_bytes) / 3)

    def test_loopback_bench_measures_sockets_and_lanes(self):
        import contextlib
        import io
        import re

        import os
        import sys

        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                        "bench"))
        import loopback  # bench/loopback.py (not part of the installed package)

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            loopback.main(["--streams", "1,2", "--lanes", "1,2", "--mb", "8", "--repeats", "2"])
        rows = [l for l in out.getvalue().splitlines() if not l.startswith("#")]
        self.assertEqual([l.split(":")[0].split(" (")[0] for l in rows],
                         ["plain sockets, 1 streams", "plain sockets, 2 streams",
                          "kvserve transport, 1 lanes", "kvserve transport, 2 lanes"])
        for l in rows:
            rates = [float(x) for x in re.findall(r"[0-9.]+", l.split(":")[1])]
            self.assertEqual(len(rates), 2, l)
            self.assertTrue(all(r > 0 for r in rates), l)

    def test_over_ucx(self):
        try:
            t = transport.ucx(tls="tcp", secret=SECRET)
        except kvserve.KvserveError as e:  # UCX could not start here
            self.skipTest(str(e))
        kv, out, _, _, _ = self.stream_layers(t, "kivi-2", 305)
        self.assertTrue(np.array_equal(out, kvserve.decode(kvserve.encode(kv, "kivi-2"))))


class ShapingAndGoodputTest(unittest.TestCase):
    def test_goodput_samples_reach_the_estimator_and_respect_the_shaped_rate(self):
        estimator = kvserve.BandwidthEstimator()
        rate_gbps = 0.4
        t = transport.tcp()
        listener = t.listen("127.0.0.1:0")
        peer = Peer(listener, lambda conn: [transport.receive_frame(conn, timeout=10) for _ in range(3)],
                    local_id="decode")
        peer.start()
        conn = transport.dial(t, listener.address, shape_gbps=rate_gbps, estimator=estimator)
        frame = bytes(kvserve.encode(kvserve.synthesize_kv((2, 2, 2048, 64), dtype="f16", seed=306), "none"))
        for i in range(3):
            stats = transport.send_frame(conn, i, frame)
            # A token bucket cannot be beaten: its burst is a few ms at the rate.
            self.assertLess(stats.goodput_gbps, 1.5 * rate_gbps)
        peer.outcome()
        self.assertGreaterEqual(estimator.sample_count("decode"), 1)
        self.assertLess(kvserve.bytes_per_second_to_gbps(estimator.estimate("decode")), 1.5 * rate_gbps)
        self.assertEqual(estimator.sample_count("nobody"), 0)
        self.assertEqual(transport.options(shape_gbps=rate_gbps).shape_gbps, rate_gbps)


class ErrorTest(unittest.TestCase):
    def test_wrong_secret_is_refused_on_both_sides(self):
        t = transport.tcp()
        listener = t.listen("127.0.0.1:0")
        peer = Peer(listener, lambda conn: None, secret=SECRET)
        peer.start()
        with self.assertRaises(kvserve.KvservePermissionDeniedError):
            transport.dial(t, listener.address, secret="not-the-secret")
        with self.assertRaises(kvserve.KvservePermissionDeniedError):
            peer.outcome()

    def test_a_raising_callback_fails_the_senders_finish_and_is_reraised(self):
        t = transport.tcp()
        listener = t.listen("127.0.0.1:0")

        class Refused(Exception):
            pass

        def on_record(_record):
            raise Refused("no room in the cache")

        peer = Peer(listener, lambda conn: transport.receive_frame(conn, None, on_record, timeout=10))
        peer.start()
        conn = transport.dial(t, listener.address)
        frame = kvserve.encode(synth(307, "f16"), "kivi-2")
        with self.assertRaisesRegex(kvserve.KvserveError, "no room in the cache"):
            transport.send_frame(conn, 1, frame)
        with self.assertRaises(Refused):
            peer.outcome()

    def test_a_record_that_does_not_decode_is_corruption_at_both_ends(self):
        t = transport.tcp()
        listener = t.listen("127.0.0.1:0")
        peer = Peer(listener, lambda conn: transport.receive_kv(conn, timeout=10))
        peer.start()
        conn = transport.dial(t, listener.address)
        frame = bytearray(bytes(kvserve.encode(synth(308, "f16"), "kivi-2")))
        info = kvserve.inspect(bytes(frame))
        c = info.chunks[1]
        frame[c.offset + c.size // 2] ^= 0x5A  # inside a record's payload
        with self.assertRaises(kvserve.KvserveCorruptionError):
            transport.send_frame(conn, 2, frame)
        with self.assertRaises(kvserve.KvserveCorruptionError):
            peer.outcome()

    def test_bad_arguments_and_a_closed_peer(self):
        t = transport.tcp()
        with self.assertRaises(ValueError):
            transport.options(shape_gbps=-1)
        with self.assertRaises(kvserve.KvserveError):
            t.listen("not an address")
        listener = t.listen("127.0.0.1:0")
        peer = Peer(listener, lambda conn: conn.receive(timeout=10))
        peer.start()
        conn = transport.dial(t, listener.address)
        with self.assertRaises(ValueError):
            conn.send(0xE0, b"reserved type")
        with self.assertRaises(ValueError):
            conn.send(transport.FIRST_USER_TYPE, 12345)  # not bytes-like
        conn.send(transport.FIRST_USER_TYPE, b"hello", flags=3)
        self.assertEqual(peer.outcome(), (transport.FIRST_USER_TYPE, 3, b"hello"))
        # The peer closed its side: the next receive reports it.
        with self.assertRaises(kvserve.KvserveUnavailableError):
            conn.receive(timeout=10)
        sender = transport.FrameSender(conn)
        with self.assertRaises(ValueError):
            sender.send_record(b"outside a transfer")
        listener2 = t.listen("127.0.0.1:0")
        peer2 = Peer(listener2, lambda c: transport.receive_frame(c, timeout=10))
        peer2.start()
        conn2 = transport.dial(t, listener2.address)
        frame = bytes(kvserve.encode(synth(309, "f16"), "none"))
        sender2 = transport.FrameSender(conn2)
        sender2.write(5, frame[: len(frame) - 10])
        with self.assertRaises(ValueError):  # the last record was cut short
            sender2.finish()
        sender2.abort("test abandons the transfer")
        with self.assertRaisesRegex(kvserve.KvserveError, "abandons"):
            peer2.outcome()


if __name__ == "__main__":
    unittest.main()
