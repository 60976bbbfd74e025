"""The library's serving workers from Python (kvserve/serve.h).

The prefill and decode workers are the C++ library's, the same that
``kvserve serve`` runs with kvserve's own runtime; from Python they run
around an *engine*, a Python object that computes KV and tokens
(:class:`kvserve.integration.transformers.TransformersEngine` for a
transformers model). The workers own the protocol, the controller's
per-request choice, the transfers (on the GPU, through the device
connector: KV encoded and decoded window by window in bounded device
memory), retries and the prefix pool; their threads take the GIL only to
call the engine.

    engine = TransformersEngine(model)
    device = serve.device_connector() if engine.info()["device"] >= 0 else None
    decode = serve.DecodeWorker(engine, device=device)
    prefill = serve.PrefillWorker(engine, table, [decode.address], device=device)
    response = prefill.serve(serve.request(0, prompt, max_new_tokens=8, method="kivi-2"))

``DecodeWorker(engine, listen="127.0.0.1:0", secret="", max_kv_bytes=64 GiB,
decode_threads=1, device=None, pool=None)``: serves prefill connections on its
own threads until ``stop()``; ``address``, ``completed``, ``refused_frames``.
With ``pool`` (the prefill workers' pool, e.g. ``kvserve.pool.remote(...)``)
it fetches a prefix hit's chunks from the pool itself, straight into the
engine's KV; without it the prefill worker relays them.

``PrefillWorker(engine, table, decode_addresses, listen=..., secret=...,
link_bytes_per_second=0, model_id="model", overlap_prefill=True, pool=None,
pool_store_profiles=[], pool_chunk_tokens=128, head_scores=None,
default_workload="", table_reference_tokens=512, latency_model="streamed",
epsilon=0.05, bandit=True, prefill_seconds_per_token_prior=1e-4,
device=None, shared_link=None, max_decode_connections=4)``: ``serve(request)`` runs one
request in the calling thread (the GIL released) and returns the response; clients reach it at
``address`` (:class:`ServeClient`); ``set_link_rate(bytes_per_second)``
re-shapes its decode link; ``bandwidth_estimate``. ``shared_link``
(``kvserve.transport.SharedLink(gbps)``, given to several workers): one
token bucket for all their decode transfers, which then contend for it as
on one real link; ``set_link_rate`` then changes it for all of them. Requests
run their prefill and KV transfer one at a time; up to
``max_decode_connections`` of them then await their decode results at once
(a decode worker whose engine batches, e.g. a TransformersEngine with a
:class:`kvserve.batching.BatchDecoder`, steps them together), and while
they do, up to as many more run their prefill and hold their KV until a
connection is free.

A response is a dict: ``id``, ``ok``, ``error``, ``code``, ``tokens`` and
``timings`` (kvserve/serve.h RequestTimings: prefill, encode, transfer,
decode, generation, KV, pool fetch, TTFT and JCT seconds, KV and frame
bytes, the bandwidth estimate and the predicted KV seconds of the
decision, the profile sent, whether it explored, hit the pool or
recomputed, attempts).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from . import _kvserve

DecodeWorker = _kvserve.DecodeWorker
PrefillWorker = _kvserve.PrefillWorker
ServeClient = _kvserve.ServeClient
DeviceConnector = _kvserve.DeviceConnector


def device_connector(device: int = 0, device_budget_bytes: int = 64 << 20, pinned_budget_bytes: int = 64 << 20,
                     max_slots: int = 4) -> Any:
    """The connector's GPU paths on CUDA device ``device``: each transfer
    holds at most ``device_budget_bytes`` of device memory (its ring of
    window slots) and ``pinned_budget_bytes`` of pinned host memory,
    whatever the prompt length. ``memory()`` reports what its rings held.
    KvserveNotSupportedError in a build without the CUDA codec or on a
    machine without a GPU."""
    return _kvserve.device_connector(device, device_budget_bytes, pinned_budget_bytes, max_slots)


def request(id: int, prompt: Sequence[int], *, max_new_tokens: int = 16, method: str = "adaptive",
            workload: str = "", slo_seconds: Optional[float] = None, quality_min: float = 0.0,
            use_pool: bool = False, **sampling: Any) -> Dict[str, Any]:
    """A request as the workers take it. ``method``: ``"adaptive"`` (the
    controller chooses), or a profile spec / preset to force (``"none"`` is
    raw). ``sampling``: ``temperature``, ``top_p``, ``seed``,
    ``stop_at_eos``."""
    r: Dict[str, Any] = {"id": id, "prompt": [int(t) for t in prompt], "max_new_tokens": max_new_tokens,
                         "method": method, "workload": workload, "quality_min": quality_min, "use_pool": use_pool}
    if slo_seconds is not None:
        r["slo_seconds"] = slo_seconds
    r.update(sampling)
    return r


def raise_for(response: Dict[str, Any]) -> Dict[str, Any]:
    """``response`` when it is OK; else raises the KvserveError subclass of
    its code (``"io error"`` -> KvserveIOError, ...) with its message."""
    if response["ok"]:
        return response
    words = response["code"].split()
    name = "Kvserve" + "".join("IO" if w == "io" else w.capitalize() for w in words if w != "error") + "Error"
    raise getattr(_kvserve, name, _kvserve.KvserveError)(response["error"])
