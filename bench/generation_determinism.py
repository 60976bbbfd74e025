#!/usr/bin/env python3
"""Does a kvserve.generation.Generator decode step repeat bit for bit, and
at what cost, per SDPA backend? The question behind issue 15's token check:
with random weights many bf16 logits tie, so any last-bit difference between
two runs of the same step on the same cache changes the greedy tokens.

On a CUDA machine with torch and transformers, from the repository root
(it loads python/kvserve/generation.py directly, no build needed):

  OUT=out python3 bench/generation_determinism.py      # writes $OUT/probe_det.json

Llama-3.1-8B architecture with seeded random weights (bf16), torch's
deterministic mode on; per prompt size (2K, 8K, 32K random tokens) and
variant (the math backend, SDPA's own choice, memory-efficient, cuDNN) one
Generator replays its captured step 6 times (3 at 32K) for 16 tokens from
the same prefilled cache: distinct token sequences, whether every step's
logits are bit-equal to the first run's, the first step that differs, and
the median step time of one more generate(). It also lists the CUDA kernels
of one eager step (math and SDPA's choice, at 2K) and runs a small bf16
Llama (3 layers, 32K vocabulary, 3000 cached tokens) 12 times both ways.
Recorded: docs/results/generation-determinism-h200.json.
"""
import importlib.util, json, os, random, time
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch
torch.use_deterministic_algorithms(True, warn_only=True)
from transformers import AutoModelForCausalLM, LlamaConfig, DynamicCache

spec = importlib.util.spec_from_file_location("gen", "python/kvserve/generation.py")
gen = importlib.util.module_from_spec(spec); spec.loader.exec_module(gen)
out_dir = os.environ.get("OUT", "/tmp")
res = {}
t0 = time.time()
config = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                     max_position_embeddings=131072, rope_theta=500000.0)
torch.manual_seed(0)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16).eval()
print("loaded", time.time() - t0, "attn", model.config._attn_implementation, flush=True)

captured = {}
def hook(mod, inp, out):
    captured["logits"] = out
model.lm_head.register_forward_hook(hook)

def prefill(prompt):
    with torch.no_grad():
        cache = DynamicCache()
        out = model(input_ids=torch.tensor([prompt], device="cuda"), past_key_values=cache, use_cache=True,
                    logits_to_keep=1)
        layers = [(l.keys.clone(), l.values.clone()) for l in cache.layers]
        return int(out.logits[0, -1].argmax()), layers, out.logits[0, -1].float().clone()

def graph_logits(g, layers, first, steps):
    """Tokens and per-step logits from the captured step (replays by hand)."""
    step = g._step_for(int(layers[0][0].shape[-2]) + steps)
    if not hasattr(step, "logits_buf"):
        step.logits_buf = captured["logits"]  # just captured: the graph's static output
    with torch.no_grad():
        tokens = step.load(layers)
        step.ids.fill_(first); step.pos.fill_(tokens)
        toks, logits = [], []
        for _ in range(steps):
            step.graph.replay()
            toks.append(int(step.next))
            logits.append(step.logits_buf[0, -1].float().clone())
    return toks, logits

from torch.nn.attention import sdpa_kernel, SDPBackend
from torch.profiler import profile, ProfilerActivity
import contextlib, statistics
rng = random.Random(0)
variants = {"math": (True, None), "sdpa-default": (False, None),
            "efficient": (False, SDPBackend.EFFICIENT_ATTENTION), "cudnn": (False, SDPBackend.CUDNN_ATTENTION)}
for tokens in (2048, 8192, 32768):
    prompt = [rng.randrange(1, 128256) for _ in range(tokens)]
    f1, L1, pl1 = prefill(prompt)
    r = {}
    for name, (math, b) in variants.items():
        if tokens == 32768 and name in ("efficient", "cudnn"):
            continue
        g = gen.Generator(model, math_attention=math)
        try:
            runs = []
            for i in range(6 if tokens < 32768 else 3):
                with (sdpa_kernel([b]) if b is not None else contextlib.nullcontext()):
                    runs.append(graph_logits(g, L1, f1, 16))
            g.generate(L1, f1, 16)
            step_ms = statistics.median(g.step_seconds) * 1e3
            r[name] = {"distinct_token_seqs": len({tuple(t) for t, _ in runs}),
                       "logits_bit_equal_all": all(all(torch.equal(a, b2) for a, b2 in zip(runs[0][1], x[1])) for x in runs[1:]),
                       "first_diff_step": [next((i for i, (a, b2) in enumerate(zip(runs[0][1], x[1])) if not torch.equal(a, b2)), None) for x in runs[1:]],
                       "step_ms": round(step_ms, 3), "tokens0": runs[0][0]}
            if tokens == 2048 and name in ("math", "sdpa-default"):
                step = g._steps[g.capacities[-1]]
                with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
                    with (gen._math_attention() if math else contextlib.nullcontext()):
                        step._step(); torch.cuda.synchronize()
                r[name]["kernels"] = sorted({e.name[:120] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
        except Exception as e:
            r[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
        del g
        torch.cuda.empty_cache()
    res[tokens] = r
    print(tokens, json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "kernels"} for k, v in r.items()}), flush=True)
# The unit test's setting, with and without math attention.
cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=32000, max_position_embeddings=8192)
torch.manual_seed(63)
with torch.device("cuda"):
    small = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16).eval()
rs = random.Random(63)
ids = [rs.randrange(1, 32000) for _ in range(3000)]
with torch.no_grad():
    c = DynamicCache()
    o = small(input_ids=torch.tensor([ids], device="cuda"), past_key_values=c, use_cache=True)
    sl = [(l.keys, l.values) for l in c.layers]; sf = int(o.logits[0, -1].argmax())
for math in (True, False):
    gs = gen.Generator(small, math_attention=math)
    res[f"small_test_distinct_math_{math}"] = len({tuple(gs.generate(sl, sf, 32)) for _ in range(12)})
print("small", res["small_test_distinct_math_True"], res["small_test_distinct_math_False"], flush=True)
json.dump(res, open(os.path.join(out_dir, "probe_det.json"), "w"), indent=1)
print("done", time.time() - t0)
