"""A safetensors writer shared by the model-building scripts
(make_tiny_model.py, make_hf_checkpoint.py): the format's 8-byte header
length, JSON header padded to 8 bytes, then the tensors' bytes in order."""
import json
import os
import struct


def write_safetensors(path, tensors, metadata=None):
    """tensors: (name, dtype name e.g. "BF16", shape, raw little-endian bytes)
    in file order. Written to path + ".tmp", then renamed. Returns the data
    size in bytes."""
    header, offset = ({"__metadata__": metadata} if metadata else {}), 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)
    os.replace(path + ".tmp", path)
    return offset
