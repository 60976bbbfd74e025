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


def read_safetensors(path):
    """{name: torch tensor} from one .safetensors file (BF16/F16/F32)."""
    import numpy as np
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, m in header.items():
        if name == "__metadata__":
            continue
        a, b = m["data_offsets"]
        buf = raw[base + a:base + b]
        if m["dtype"] == "BF16":
            t = torch.from_numpy((np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).copy())
        elif m["dtype"] == "F16":
            t = torch.from_numpy(np.frombuffer(buf, dtype=np.float16).astype(np.float32))
        else:
            t = torch.from_numpy(np.frombuffer(buf, dtype=np.float32).copy())
        out[name] = t.reshape(m["shape"])
    return out


def load_model(model_dir):
    """Our Qwen2 module (float32) from an HF-layout directory written by save_hf."""
    import glob
    from model import Config, Qwen2
    cfgj = json.load(open(os.path.join(model_dir, "config.json")))
    m = Qwen2(Config(**{k: cfgj[k] for k in Config.__dataclass_fields__}))
    sd = {}
    for f in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        sd.update(read_safetensors(f))
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and all(k.startswith("rope_") for k in missing), (missing, unexpected)
    return m.eval()
