"""Benchmarks that run from the installed package (``python -m kvserve.bench.<name>``):

* :mod:`kvserve.bench.pd` -- prefill/decode over kvserve's transport: JCT and
  TTFT by method, prompt size and link rate, with the controller choosing per
  request.
* :mod:`kvserve.bench.loopback` -- loopback throughput: plain sockets with
  several streams beside kvserve's transport with several lanes.
"""
