"""Shared by the golden generators: the safetensors writer and reader they use
(the standard layout, tensors ordered as the reference Rust writer orders them)
and the relative error of two tensors."""
import collections
import json
import struct

import numpy as np
import torch

F64 = torch.float64

ST_DTYPE = {torch.float32: "F32", torch.int64: "I64"}
ST_RANK = {"I64": 1, "F32": 0}  # safetensors writes dtypes in descending enum order (I64 before F32)
NP_DTYPE = {"F32": "<f4", "I64": "<i8"}


def safetensors_bytes(tensors):
    items = sorted(tensors.items(), key=lambda kv: (-ST_RANK[ST_DTYPE[kv[1].dtype]], kv[0]))
    header = collections.OrderedDict()
    header["__metadata__"] = {"format": "pt"}
    blobs, off = [], 0
    for name, t in items:
        dt = ST_DTYPE[t.dtype]
        data = np.ascontiguousarray(t.detach().cpu().numpy().astype(NP_DTYPE[dt])).tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def read_safetensors(buf):
    (n,) = struct.unpack("<Q", buf[:8])
    assert n % 8 == 0
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    assert header.pop("__metadata__") == {"format": "pt"}
    data = buf[8 + n:]
    out, end = {}, 0
    for name, info in header.items():
        b, e = info["data_offsets"]
        assert b == end, "data not contiguous in header order"
        end = e
        arr = np.frombuffer(data[b:e], dtype=NP_DTYPE[info["dtype"]]).reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    assert end == len(data)
    return out


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------


def rel_err(a, b):
    a, b = a.to(F64), b.to(F64)
    return float((a - b).abs().max()) / max(1e-30, float(b.abs().max()))
