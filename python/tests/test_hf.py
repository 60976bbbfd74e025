"""kvserve.hf: compress a transformers KV cache after prefill, restore it before decode.

The legacy-tuple test runs anywhere torch is installed. The model test needs
`transformers` and a model in HF format (config.json + safetensors): the
directory in $KVSERVE_HF_MODEL, else the first models/*/config.json of the
repository. It runs on the GPU machine (scripts/device_python_test.sh) and
skips cleanly elsewhere. It checks that greedy generation from a cache sent
through `none` is token-identical to the uncompressed run, and measures the
token agreement of a lossy profile (mean and 95% CI over prompts). If
$KVSERVE_QUALITY_REFERENCE names a JSON file {"mean": m, "ci95": h} from the
C++ quality evaluator for the same profile, the two intervals must overlap.
Results are written to $KVSERVE_TEST_OUT/hf_results.json when set.
"""
from __future__ import annotations

import glob
import json
import math
import os
import unittest

import kvserve
from kvserve import hf

try:
    import torch
except ImportError:
    torch = None
try:
    import transformers
except ImportError:
    transformers = None

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOSSY_PROFILE = os.environ.get("KVSERVE_HF_PROFILE", "kivi-4")
PROMPTS = int(os.environ.get("KVSERVE_HF_PROMPTS", "8"))
PROMPT_TOKENS = 384
NEW_TOKENS = 32


def _model_dir():
    if os.environ.get("KVSERVE_HF_MODEL"):
        return os.environ["KVSERVE_HF_MODEL"]
    found = sorted(glob.glob(os.path.join(REPO, "models", "*", "config.json")))
    return os.path.dirname(found[0]) if found else None


@unittest.skipIf(torch is None, "torch not installed")
class LegacyTupleTest(unittest.TestCase):
    def test_legacy_tuple_round_trip(self):
        gen = torch.Generator().manual_seed(91)
        cache = tuple((torch.randn(1, 2, 300, 64, generator=gen).to(torch.bfloat16),
                       torch.randn(1, 2, 300, 64, generator=gen).to(torch.bfloat16)) for _ in range(3))
        frame = hf.compress_cache(cache, "none")
        restored = hf.restore_cache(frame, like=cache)
        self.assertIsInstance(restored, tuple)
        for (k, v), (rk, rv) in zip(cache, restored):
            self.assertTrue(torch.equal(k, rk) and torch.equal(v, rv))
        lossy = hf.restore_cache(hf.compress_cache(cache, "kivi-4"), like=cache)
        self.assertEqual(lossy[0][0].shape, cache[0][0].shape)
        with self.assertRaises(ValueError):
            hf.compress_cache(tuple((torch.cat([k, k]), torch.cat([v, v])) for k, v in cache), "none")
        self.assertEqual(bytes(hf.compress_cache(tuple((torch.cat([k, k]), torch.cat([v, v])) for k, v in cache),
                                                 "none", batch_index=1)), bytes(frame))


def _greedy(model, cache, first_token, steps):
    tokens = [first_token]
    next_ids = torch.tensor([[first_token]], device=model.device)
    with torch.no_grad():
        for _ in range(steps - 1):
            out = model(input_ids=next_ids, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            tok = int(out.logits[0, -1].argmax())
            tokens.append(tok)
            next_ids = torch.tensor([[tok]], device=model.device)
    return tokens


def _prompts(tokenizer, vocab, count):
    """Real text from the repository's docs when a tokenizer loads, else seeded ids."""
    gen = torch.Generator().manual_seed(92)
    ids = []
    if tokenizer is not None:
        text = ""
        for path in sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
            with open(path, encoding="utf-8") as f:
                text += f.read() + "\n"
        all_ids = tokenizer(text)["input_ids"]
        step = max(1, (len(all_ids) - PROMPT_TOKENS) // max(1, count))
        for i in range(count):
            chunk = all_ids[i * step:i * step + PROMPT_TOKENS]
            if len(chunk) == PROMPT_TOKENS:
                ids.append(chunk)
    while len(ids) < count:
        ids.append(torch.randint(0, vocab, (PROMPT_TOKENS,), generator=gen).tolist())
    return ids


@unittest.skipIf(torch is None or transformers is None, "transformers not installed")
@unittest.skipIf(_model_dir() is None, "no HF model (set KVSERVE_HF_MODEL or ship models/*/config.json)")
class TransformersDynamicCacheTest(unittest.TestCase):
    def test_prefill_compress_restore_decode(self):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_dir = _model_dir()
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).to(device).eval()
        try:
            tokenizer = AutoTokenizer.from_pretrained(model_dir)
        except Exception:  # noqa: BLE001 (a model without a HF tokenizer still works)
            tokenizer = None
        agreements, identical, ratios = [], 0, []
        prompts = _prompts(tokenizer, model.config.vocab_size, PROMPTS)
        for ids in prompts:
            input_ids = torch.tensor([ids], device=device)
            with torch.no_grad():
                out = model(input_ids=input_ids, use_cache=True)
            cache = out.past_key_values
            first = int(out.logits[0, -1].argmax())
            frame_none = hf.compress_cache(cache, "none")
            frame_lossy = hf.compress_cache(cache, LOSSY_PROFILE)
            kv_bytes = sum(k.numel() * k.element_size() * 2 for k, _ in hf.cache_layers(cache))
            ratios.append(kv_bytes / len(frame_lossy))
            baseline = _greedy(model, cache, first, NEW_TOKENS)
            restored = hf.restore_cache(frame_none, like=cache)
            self.assertEqual(type(restored), type(cache))
            got = _greedy(model, restored, first, NEW_TOKENS)
            self.assertEqual(got, baseline, "generation through 'none' is not token-identical")
            identical += 1
            lossy = _greedy(model, hf.restore_cache(frame_lossy, like=cache), first, NEW_TOKENS)
            agreements.append(sum(a == b for a, b in zip(lossy, baseline)) / NEW_TOKENS)
        mean = sum(agreements) / len(agreements)
        var = sum((a - mean) ** 2 for a in agreements) / max(1, len(agreements) - 1)
        ci95 = 1.96 * math.sqrt(var / len(agreements))
        result = {
            "model": model_dir, "device": device, "transformers": transformers.__version__,
            "torch": torch.__version__, "cache_type": type(cache).__name__, "prompts": len(prompts),
            "prompt_tokens": PROMPT_TOKENS, "new_tokens": NEW_TOKENS,
            "none_token_identical": f"{identical}/{len(prompts)}", "lossy_profile": LOSSY_PROFILE,
            "lossy_compression_ratio": sum(ratios) / len(ratios),
            "lossy_token_agreement": {"mean": mean, "ci95": ci95, "per_prompt": agreements},
        }
        reference_path = os.environ.get("KVSERVE_QUALITY_REFERENCE")
        if reference_path and os.path.exists(reference_path):
            with open(reference_path) as f:
                reference = json.load(f)
            result["cpp_quality_reference"] = reference
            overlap = abs(reference["mean"] - mean) <= reference["ci95"] + ci95
            result["intervals_overlap"] = overlap
        print(json.dumps(result, indent=2))
        if os.environ.get("KVSERVE_TEST_OUT"):
            with open(os.path.join(os.environ["KVSERVE_TEST_OUT"], "hf_results.json"), "w") as f:
                json.dump(result, f, indent=2)
        if "intervals_overlap" in result:
            self.assertTrue(result["intervals_overlap"], result)


if __name__ == "__main__":
    unittest.main()
