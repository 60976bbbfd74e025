"""Writes a Qwen2 checkpoint in HF layout: config.json, bf16 safetensors shards (each under a size cap)
and model.safetensors.index.json. No dependency on the safetensors package (the format is a JSON
header plus raw little-endian tensors)."""
import json
import os
import struct

import torch

DT = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}


def _bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, t in tensors.items():
        b = _bytes(t)
        header[name] = {"dtype": DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def save_hf(model, out_dir, dtype=torch.bfloat16, shard_bytes=14_500_000):
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.to(dtype) for k, v in model.hf_state_dict().items()}
    shards, cur, size = [], {}, 0
    for k in sorted(sd, key=lambda n: (not n.startswith("model.embed"), n)):
        nb = sd[k].numel() * sd[k].element_size()
        if cur and size + nb > shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = sd[k]
        size += nb
    shards.append(cur)
    weight_map, total = {}, 0
    n = len(shards)
    for i, sh in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        write_safetensors(os.path.join(out_dir, fn), sh)
        for k, t in sh.items():
            weight_map[k] = fn
            total += t.numel() * t.element_size()
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(out_dir, "model.safetensors.index.json"), "w"), indent=1)
    json.dump(model.cfg.hf_config({torch.bfloat16: "bfloat16", torch.float16: "float16",
                                   torch.float32: "float32"}[dtype]),
              open(os.path.join(out_dir, "config.json"), "w"), indent=1)
    json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False},
              open(os.path.join(out_dir, "generation_config.json"), "w"), indent=1)
    return [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
