"""Shared helpers for the kvserve Python tests: seeded caches and comparisons.

Run the tests with the package on the path, e.g.
    PYTHONPATH=build/python /usr/bin/python3 -m unittest discover -s python/tests -v
"""
from __future__ import annotations

import numpy as np

import kvserve

# Small enough for a 2-core machine, large enough for several chunks per
# layer (default chunk 256) and kivi's residual window (128).
SHAPE = (3, 2, 512, 64)  # layers, kv_heads, tokens, head_dim


def synth(seed: int, dtype: str = "f16", shape=SHAPE) -> np.ndarray:
    """A seeded synthetic cache with real-cache structure (outlier channels,
    token correlation), shaped (layers, 2, kv_heads, tokens, head_dim)."""
    return kvserve.synthesize_kv(shape, dtype=dtype, seed=seed)


def to_float(array) -> np.ndarray:
    """float32 copy of a numpy array or torch tensor (bf16 bits too)."""
    try:
        import torch

        if isinstance(array, torch.Tensor):
            return array.float().numpy()
    except ImportError:
        pass
    if array.dtype == np.uint16:  # bf16 bits
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(np.float32)


def head_scores_for(profile: kvserve.Profile, shape) -> kvserve.HeadScores | None:
    if profile.quantizer in ("mixhq", "duo"):
        return kvserve.synthesize_head_scores(shape[0], shape[1], seed=11)
    return None


def relative_rmse(decoded, original, mask=None) -> float:
    """RMS error over RMS of the original, over kept tokens only."""
    d, o = to_float(decoded), to_float(original)
    if mask is not None:
        keep = mask.astype(bool)[..., None]
        d, o = d * keep, o * keep
    return float(np.sqrt(np.mean((d - o) ** 2)) / np.sqrt(np.mean(o ** 2)))


def small_llama(seed: int):
    """A seeded 3-layer Llama (fp32, 4 heads, 2 KV heads, vocabulary 512)
    on the GPU, for the CUDA-graph tests (needs torch, transformers, CUDA)."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                                      max_position_embeddings=8192)
    torch.manual_seed(seed)
    with torch.device("cuda"):
        return transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
