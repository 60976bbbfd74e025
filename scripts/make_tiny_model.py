#!/usr/bin/python3
"""Builds a random-weight Llama or Qwen2 model directory in Hugging Face layout
(config.json + model.safetensors) and, with --reference, an independent
PyTorch float32 forward's outputs for it.

The reference forward is written here from the HF modelling semantics
(RMSNorm, rotate_half RoPE with float32 inv_freq, repeat_kv GQA, causal
softmax attention, SwiGLU, tied/untied LM head, Qwen2 q/k/v bias); it shares
no code with kvserve. The safetensors file is written with this script's own
writer. Run with Debian's /usr/bin/python3 (python3-torch).

  make_tiny_model.py --out DIR --family qwen2 [--reference --prompt-tokens 512
                     --gen-tokens 64]

reference.safetensors holds: prompt (I32 [P]), logits (F32 [P, V]: every
prompt position), generated (I32 [G]: greedy continuation, recomputed from
scratch each step), generated_logits (F32 [G, V]: logits that chose them).
"""
import argparse
import json
import math
import os

import safetensors_writer

try:
    import torch
except ImportError:  # ctest treats 77 as "skipped"
    print("make_tiny_model.py: this python has no torch; use /usr/bin/python3 (python3-torch)")
    raise SystemExit(77)


def write_safetensors(path, tensors):
    """tensors: list of (name, torch.Tensor) -> safetensors file."""
    dtype_names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                   torch.int32: "I32", torch.int64: "I64"}
    entries = []
    for name, t in tensors:
        t = t.contiguous()
        if t.dtype == torch.bfloat16:  # numpy has no bf16: go through int16 bits
            raw = t.view(torch.int16).numpy().tobytes()
        else:
            raw = t.numpy().tobytes()
        entries.append((name, dtype_names[t.dtype], t.shape, raw))
    safetensors_writer.write_safetensors(path, entries)


FAMILIES = {
    # GQA in both: 8 query heads over 2 kv heads, 6 over 2.
    "llama": dict(vocab_size=512, hidden_size=128, intermediate_size=344, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, rope_theta=10000.0,
                  rms_norm_eps=1e-5, tie_word_embeddings=False),
    "qwen2": dict(vocab_size=640, hidden_size=96, intermediate_size=224, num_hidden_layers=3,
                  num_attention_heads=6, num_key_value_heads=2, rope_theta=1000000.0,
                  rms_norm_eps=1e-6, tie_word_embeddings=True),
}


def make_config(family, overrides):
    c = dict(FAMILIES[family])
    c.update(overrides)
    c.update(architectures=["LlamaForCausalLM" if family == "llama" else "Qwen2ForCausalLM"],
             model_type=family, hidden_act="silu", max_position_embeddings=4096,
             bos_token_id=0, eos_token_id=c["vocab_size"] - 1, rope_scaling=None,
             torch_dtype="float32", initializer_range=0.02)
    if family == "llama":
        c.update(attention_bias=False, mlp_bias=False, pretraining_tp=1)
    else:
        c.update(use_sliding_window=False, sliding_window=4096,
                 max_window_layers=c["num_hidden_layers"])
    return c


def make_weights(c, family, gen):
    d, v, inter = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    hd = d // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd

    def randn(*shape, std):
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * std

    # A tied head reads the embedding back; a smaller table keeps it from
    # simply repeating the last token.
    embed_std = 0.05 if c["tie_word_embeddings"] else 1.0
    w = {"model.embed_tokens.weight": randn(v, d, std=embed_std),
         "model.norm.weight": 1.0 + randn(d, std=0.1)}
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = randn(v, d, std=0.2)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = 1.0 + randn(d, std=0.1)
        w[p + "post_attention_layernorm.weight"] = 1.0 + randn(d, std=0.1)
        w[p + "self_attn.q_proj.weight"] = randn(q, d, std=1 / math.sqrt(d))
        w[p + "self_attn.k_proj.weight"] = randn(kv, d, std=1 / math.sqrt(d))
        w[p + "self_attn.v_proj.weight"] = randn(kv, d, std=1 / math.sqrt(d))
        if family == "qwen2":
            w[p + "self_attn.q_proj.bias"] = randn(q, std=0.1)
            w[p + "self_attn.k_proj.bias"] = randn(kv, std=0.1)
            w[p + "self_attn.v_proj.bias"] = randn(kv, std=0.1)
        w[p + "self_attn.o_proj.weight"] = randn(d, q, std=1 / math.sqrt(q))
        w[p + "mlp.gate_proj.weight"] = randn(inter, d, std=1 / math.sqrt(d))
        w[p + "mlp.up_proj.weight"] = randn(inter, d, std=1 / math.sqrt(d))
        w[p + "mlp.down_proj.weight"] = randn(d, inter, std=1 / math.sqrt(inter))
    return w


def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(c, w, tokens, cache=None):
    """Logits [T, V] of a causal forward over `tokens` (float32) that follow
    the positions already in `cache` ({layer: (k, v)} post-RoPE, updated)."""
    d = c["hidden_size"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = d // nh
    t = len(tokens)
    cache = {} if cache is None else cache
    start = cache[0][0].shape[1] if 0 in cache else 0
    ids = torch.tensor(tokens, dtype=torch.long)
    x = w["model.embed_tokens.weight"][ids]
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    pos = torch.arange(start, start + t, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    causal = torch.full((t, start + t), float("-inf")).triu(start + 1)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], c["rms_norm_eps"])

        def proj(name):
            y = h @ w[p + f"self_attn.{name}.weight"].T
            bias = w.get(p + f"self_attn.{name}.bias")
            return y + bias if bias is not None else y

        q = proj("q_proj").view(t, nh, hd).transpose(0, 1)
        k = proj("k_proj").view(t, nkv, hd).transpose(0, 1)
        v = proj("v_proj").view(t, nkv, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if l in cache:
            k = torch.cat((cache[l][0], k), dim=1)
            v = torch.cat((cache[l][1], v), dim=1)
        cache[l] = (k, v)
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.repeat_interleave(nh // nkv, dim=0)
        scores = (q @ k.transpose(1, 2)) / math.sqrt(hd) + causal
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + attn.transpose(0, 1).reshape(t, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], c["rms_norm_eps"])
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], c["rms_norm_eps"])
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--family", choices=sorted(FAMILIES), default="llama")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32",
                    help="stored weight dtype (the reference uses the rounded weights)")
    ap.add_argument("--config", default="{}", help="JSON overrides of the family config")
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=64)
    args = ap.parse_args()

    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    config = make_config(args.family, json.loads(args.config))
    gen = torch.Generator().manual_seed(args.seed)
    weights = make_weights(config, args.family, gen)
    store = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    stored = {k: t.to(store) for k, t in weights.items()}
    weights = {k: t.to(torch.float32) for k, t in stored.items()}
    config["torch_dtype"] = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[args.dtype]
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write_safetensors(os.path.join(args.out, "model.safetensors"), sorted(stored.items()))

    if args.reference:
        prompt = torch.randint(0, config["vocab_size"] - 1, (args.prompt_tokens,),
                               generator=gen).tolist()
        with torch.no_grad():
            logits = forward(config, weights, prompt)
            # Greedy continuation through the reference's own KV cache (a
            # separate prefill so the cache matches what logits came from).
            cache = {}
            last = forward(config, weights, prompt, cache)[-1]
            generated, generated_logits = [], []
            for _ in range(args.gen_tokens):
                nxt = int(torch.argmax(last))
                generated.append(nxt)
                generated_logits.append(last)
                last = forward(config, weights, [nxt], cache)[-1]
        write_safetensors(os.path.join(args.out, "reference.safetensors"), [
            ("prompt", torch.tensor(prompt, dtype=torch.int32)),
            ("logits", logits.contiguous()),
            ("generated", torch.tensor(generated, dtype=torch.int32)),
            ("generated_logits", torch.stack(generated_logits).contiguous()),
        ])
        top2 = torch.stack(generated_logits).topk(2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
        print(f"wrote {args.out}: {len(prompt)} prompt tokens, {len(generated)} greedy tokens, "
              f"min top-2 margin {margin:.3g}")
    else:
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
