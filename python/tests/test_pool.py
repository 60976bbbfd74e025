"""kvserve.pool: the embedded pool and a pool server with its remote client
from Python give the same answers, evict within the budget, refuse a wrong
secret, and the prefix hash is the workers' (XXH3-64 of int32 ids)."""
from __future__ import annotations

import ctypes
import ctypes.util
import random
import shutil
import struct
import subprocess
import tempfile
import time
import unittest

import kvserve
from kvserve import pool as kvpool


def frame_bytes(seed, n):
    return random.Random(seed).randbytes(n)


class PoolTest(unittest.TestCase):
    def check_pool(self, p):
        h = kvpool.prefix_hash([1, 2, 3])
        self.assertIsNone(p.get("m", h, "kivi-2"))
        a, b = frame_bytes(1, 3000), frame_bytes(2, 70000)
        p.put("m", h, "kivi-2", a)
        p.put("m", h, "none", b)
        self.assertEqual(p.get("m", h, "kivi-2"), a)
        self.assertEqual(p.get("m", h, "none"), b)
        self.assertIsNone(p.get("other-model", h, "kivi-2"))
        self.assertEqual(sorted(p.lookup("m", h)), [("kivi-2", len(a)), ("none", len(b))])
        self.assertTrue(p.delete("m", h, "kivi-2"))
        self.assertFalse(p.delete("m", h, "kivi-2"))
        self.assertIsNone(p.get("m", h, "kivi-2"))
        s = p.stats()
        self.assertEqual((s["entries"], s["bytes"]), (1, len(b)))
        with self.assertRaises(kvserve.KvserveInvalidArgumentError):
            p.put("", h, "kivi-2", a)

    def test_memory_pool(self):
        self.check_pool(kvpool.memory())

    def test_remote_pool_through_a_server_matches(self):
        server = kvpool.serve(kvpool.memory(), "127.0.0.1:0", secret="s3")
        self.addCleanup(server.stop)
        self.check_pool(kvpool.remote(server.address, secret="s3"))

    def test_wrong_secret_is_refused(self):
        server = kvpool.serve(kvpool.memory(), "127.0.0.1:0", secret="right")
        self.addCleanup(server.stop)
        client = kvpool.remote(server.address, secret="wrong", reconnect_attempts=0)
        with self.assertRaises(kvserve.KvserveError):
            client.get("m", 1, "none")

    def test_memory_budget_evicts_least_recently_used(self):
        p = kvpool.memory(budget_bytes=10000)
        for i in range(3):
            p.put("m", i, "none", frame_bytes(i, 4000))
        self.assertIsNone(p.get("m", 0, "none"))  # evicted: 12000 > 10000
        self.assertEqual(p.get("m", 2, "none"), frame_bytes(2, 4000))
        self.assertGreaterEqual(p.stats()["evictions"], 1)
        with self.assertRaises(kvserve.KvserveResourceExhaustedError):
            p.put("m", 9, "none", frame_bytes(9, 20000))

    def test_prefix_hash_is_over_little_endian_int32(self):
        tokens = [random.Random(5).randrange(0, 1 << 17) for _ in range(100)]
        self.assertEqual(kvpool.prefix_hash(tokens), kvpool.prefix_hash(list(tokens)))
        self.assertNotEqual(kvpool.prefix_hash(tokens), kvpool.prefix_hash(tokens[:-1]))
        # The reference: libxxhash's own XXH3_64bits over the packed ids.
        name = ctypes.util.find_library("xxhash")
        if name is None:
            self.skipTest("libxxhash not found for the reference hash")
        lib = ctypes.CDLL(name)
        lib.XXH3_64bits.restype = ctypes.c_uint64
        lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        packed = struct.pack(f"<{len(tokens)}i", *tokens)
        self.assertEqual(kvpool.prefix_hash(tokens), lib.XXH3_64bits(packed, len(packed)))


def _free_port():
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipIf(shutil.which("redis-server") is None, "redis-server not installed")
class RedisPoolTest(PoolTest):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvserve-redis-")
        self.port = _free_port()
        self.server = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                        "--save", "", "--appendonly", "no", "--dir", self.dir],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.addCleanup(self.server.wait)
        self.addCleanup(self.server.terminate)
        deadline = time.monotonic() + 20
        while True:
            try:
                kvpool.redis(f"127.0.0.1:{self.port}", key_prefix="probe", reconnect_attempts=0).stats()
                break
            except kvserve.KvserveError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def test_redis_pool_answers_as_the_embedded_one(self):
        # A fresh key prefix: the same server holds nothing under it yet.
        self.check_pool(kvpool.redis(f"127.0.0.1:{self.port}", key_prefix=f"t{random.randrange(1 << 30)}"))

    def test_unreachable_redis_is_unavailable(self):
        with self.assertRaisesRegex(kvserve.KvserveUnavailableError, "redis at 127.0.0.1"):
            kvpool.redis(f"127.0.0.1:{_free_port()}", reconnect_attempts=0)
        with self.assertRaises(ValueError):
            kvpool.redis("no-port")

    # The embedded pool's own tests are not repeated against Redis.
    test_memory_pool = test_remote_pool_through_a_server_matches = None
    test_wrong_secret_is_refused = test_memory_budget_evicts_least_recently_used = None
    test_prefix_hash_is_over_little_endian_int32 = None


if __name__ == "__main__":
    unittest.main()
