"""Shared by the golden generators: the safetensors writer and reader they use
(the standard layout, tensors ordered as the reference Rust writer orders them)
and the relative error of two tensors."""
import collections
import hashlib
import json
import os
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


def case_files(config_text, cfg, params, inputs, outs, loss, grads):
    """The three files of a case (config.json, model.safetensors and
    golden.safetensors = inputs, outputs, loss and grad.<param>), each read back
    and checked against what was written."""
    golden = collections.OrderedDict()
    golden.update(inputs)
    for k, v in outs.items():
        golden[k] = v.to(torch.float32)
    golden["loss"] = loss.to(torch.float32)
    for n in params:
        golden["grad." + n] = grads[n].to(torch.float32)
    files = {
        "config.json": config_text.encode("utf-8"),
        "model.safetensors": safetensors_bytes(params),
        "golden.safetensors": safetensors_bytes(golden),
    }
    rb = read_safetensors(files["model.safetensors"])
    assert sorted(rb) == sorted(params)
    for n in params:
        assert torch.equal(rb[n], params[n]), n
    rb = read_safetensors(files["golden.safetensors"])
    assert sorted(rb) == sorted(golden)
    for n in golden:
        assert rb[n].dtype == golden[n].dtype and torch.equal(rb[n], golden[n]), n
    assert json.loads(files["config.json"]) == cfg
    return files


def write_cases(out_dir, cases, build_case, name_width):
    """Builds every case and writes out_dir/<name>/{config.json, model.safetensors,
    golden.safetensors}, printing sizes and a digest per case."""
    os.makedirs(out_dir, exist_ok=True)
    total = 0
    for case in cases:
        name = case[0]
        files, loss = build_case(*case)
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        sizes = []
        for fn in ("config.json", "model.safetensors", "golden.safetensors"):
            with open(os.path.join(d, fn), "wb") as f:
                f.write(files[fn])
            sizes.append(len(files[fn]))
            total += len(files[fn])
        digest = hashlib.sha256(b"".join(files[k] for k in sorted(files))).hexdigest()[:12]
        print("%-*s loss=%-12.6g bytes=%s sha256=%s" % (name_width, name, loss, sizes, digest))
    print("total bytes: %d" % total)
