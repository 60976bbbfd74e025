"""The KV pool from Python: prefix KV frames stored by (model id, prefix
hash, profile), as the serving workers keep them (include/kvserve/pool.h,
docs/transport.md for the pool protocol).

    pool = kvserve.pool.memory(budget_bytes=8 << 30)       # embedded LRU
    pool = kvserve.pool.redis("127.0.0.1:6379")             # or in Redis
    server = kvserve.pool.serve(pool, "127.0.0.1:0", secret="s")
    client = kvserve.pool.remote(server.address, secret="s", shape_gbps=5)
    client.put("llama-8b", kvserve.pool.prefix_hash(tokens), "kivi-2", frame)
    frame = client.get("llama-8b", h, "kivi-2")             # bytes, or None when absent

Every call releases the GIL while it waits. A remote pool reconnects after a
broken connection (``reconnect_attempts``) and otherwise raises
KvserveUnavailableError naming the address; a wrong secret raises
KvservePermissionDeniedError.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from . import _kvserve, transport

KvPool = _kvserve.KvPool
PoolServer = _kvserve.PoolServer

__all__ = ["KvPool", "PoolServer", "memory", "redis", "remote", "serve", "prefix_hash"]


def prefix_hash(tokens: Sequence[int]) -> int:
    """XXH3-64 of the token ids as little-endian int32: the key the workers
    store a prefix's KV under."""
    return _kvserve.prefix_hash([int(t) for t in tokens])


def memory(budget_bytes: int = 1 << 30) -> KvPool:
    """The embedded pool: least-recently-used eviction within
    ``budget_bytes`` of stored frames; a frame larger than the budget is
    refused (KvserveResourceExhaustedError)."""
    return _kvserve.memory_pool(int(budget_bytes))


def redis(address: str = "127.0.0.1:6379", *, password: str = "", database: int = 0,
          key_prefix: str = "kvserve", reconnect_attempts: int = 5) -> KvPool:
    """A pool in Redis at ``address`` (``host:port``; hiredis, one
    connection, values binary-safe under ``key_prefix``): several
    processes, or hosts, share it. Connects now: KvserveUnavailableError
    naming the address when Redis cannot be reached (later calls, after
    ``reconnect_attempts``)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address: host:port, not {address!r}")
    return _kvserve.redis_pool(host, int(port), password, database, key_prefix, int(reconnect_attempts))


def remote(address: str, *, reconnect_attempts: int = 2, estimator: Optional[Any] = None,
           **options: Any) -> KvPool:
    """A client of a pool server (``kvserve pool serve`` or :func:`serve`)
    at ``address``. ``options``: as :func:`kvserve.transport.options`
    (secret, shape_gbps, timeouts, ...); ``estimator`` receives the goodput
    of large gets. Connects on first use."""
    return _kvserve.remote_pool(address, transport.options(estimator=estimator, **options),
                                int(reconnect_attempts))


def serve(pool: KvPool, listen: str = "127.0.0.1:0", **options: Any) -> PoolServer:
    """Serves ``pool`` on ``listen`` (port 0: any; the bound one is
    ``.address``) until ``.stop()``. ``options``: as
    :func:`kvserve.transport.options` (the secret clients must hold)."""
    return _kvserve.PoolServer(pool, listen, transport.options(**options))
