"""Serving engines: models kvserve's workers run (kvserve/engine.h).

:mod:`kvserve.integration.transformers`: a transformers causal LM (on a CUDA
device or the CPU).
"""
