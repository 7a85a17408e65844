"""Shared by the golden generators: the safetensors writer and reader they use
(the standard layout, tensors ordered as the reference Rust writer orders them),
the relative error of two tensors, the weights the hand-written models draw,
and the files of a case built from a transformers model."""
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


def golden_tensors(inputs, outs, loss, grads, names):
    """golden.safetensors' tensors: the inputs, the outputs, `loss` and grad.<name> for each of `names`, float32."""
    golden = collections.OrderedDict()
    golden.update(inputs)
    for k, v in outs.items():
        golden[k] = v.to(torch.float32)
    golden["loss"] = loss.to(torch.float32)
    for n in names:
        golden["grad." + n] = grads[n].to(torch.float32)
    return golden


def case_files(config_text, cfg, params, inputs, outs, loss, grads):
    """The three files of a case (config.json, model.safetensors and
    golden.safetensors = inputs, outputs, loss and grad.<param>), each read back
    and checked against what was written."""
    golden = golden_tensors(inputs, outs, loss, grads, params)
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


# --------------------------------------------------------------------------
# What every model generator does the same way
# --------------------------------------------------------------------------

# HF fills masked attention scores with finfo(float32).min (its models run in float32).
F32_MIN = torch.finfo(torch.float32).min
# The attention_mask of the padded cases: rows of 7, 5 and 3 tokens.
ATTN_MASK = [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0]]


# init_params' kinds: a weight N(0, 0.2), a bias N(0, 0.1), a LayerNorm weight 1 + N(0, 0.1), its bias N(0, 0.1).
PARAM_KINDS = {"w": (0.2, 0.0), "b": (0.1, 0.0), "lnw": (0.1, 1.0), "lnb": (0.1, 0.0)}


def init_params(specs, gen, kinds=None):
    """Float32 weights for (name, shape, kind) specs, in order: offset + N(0, 1) * scale by the kind's
    (scale, offset) in `kinds` (default PARAM_KINDS); an unknown kind is an error."""
    kinds = PARAM_KINDS if kinds is None else kinds
    params = collections.OrderedDict()
    for name, shape, kind in specs:
        r = torch.randn(shape, generator=gen, dtype=torch.float32)
        if kind not in kinds:
            raise ValueError(kind)
        scale, offset = kinds[kind]
        t = offset + r * scale if offset else r * scale
        params[name] = t.to(torch.float32).contiguous()
    return params


def setup_torch():
    """One thread, deterministic kernels: the output is byte-identical on rerun."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_grad_enabled(True)


def ce_loss(logits, labels, ignore_index=-100):
    """CrossEntropyLoss(ignore_index) with mean reduction over non-ignored rows."""
    lsm = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    keep = labels != ignore_index
    picked = lsm[keep].gather(1, labels[keep].unsqueeze(1)).squeeze(1)
    return -picked.sum() / keep.sum()


def backward(outs, loss, leaves):
    """loss.backward(); returns (outputs, loss, d loss / d leaf by name), detached
    (a leaf the loss does not reach gets zeros)."""
    loss.backward()
    grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t)).detach() for n, t in leaves.items()}
    return {k: v.detach() for k, v in outs.items()}, loss.detach(), grads


def assert_agree(name, first, second):
    """Two implementations' (outputs, loss, grads) agree to 1e-9 relative."""
    (outs, loss, grads), (outs2, loss2, grads2) = first, second
    for k in outs:
        assert rel_err(outs[k], outs2[k]) < 1e-9, (name, k, rel_err(outs[k], outs2[k]))
    assert abs(float(loss) - float(loss2)) <= 1e-9 * max(1.0, abs(float(loss))), (name, float(loss), float(loss2))
    for n in grads:
        e = float((grads[n] - grads2[n]).abs().max())
        assert e <= 1e-9 * max(1e-3, float(grads2[n].abs().max())), (name, n, e)


def finite_difference_check(loss_of, p64, grads, gen, nonzero, anywhere=0):
    """Central differences (float64, step 1e-6) of loss_of(params) against grads: `nonzero`
    entries drawn among those with a nonzero gradient, then `anywhere` drawn uniformly
    (often a zero row)."""
    names = list(p64.keys())
    done = 0
    while done < nonzero + anywhere:
        name = names[int(torch.randint(0, len(names), (1,), generator=gen))]
        g_all = grads[name].reshape(-1)
        if done < nonzero:
            nz = torch.nonzero(g_all != 0).reshape(-1)
            if nz.numel() == 0:
                continue
            idx = int(nz[int(torch.randint(0, nz.numel(), (1,), generator=gen))])
        else:
            idx = int(torch.randint(0, g_all.numel(), (1,), generator=gen))
        check_entry(loss_of, p64, grads, name, idx)
        done += 1


def check_entry(loss_of, p64, grads, name, idx, h=1e-6):
    """grads[name] entry idx against the central difference of loss_of(params) (float64)."""
    vals = []
    for sgn in (1.0, -1.0):
        q = dict(p64)
        t = p64[name].clone()
        t.view(-1)[idx] += sgn * h
        q[name] = t
        with torch.no_grad():
            vals.append(float(loss_of(q)))
    fd = (vals[0] - vals[1]) / (2 * h)
    g = float(grads[name].reshape(-1)[idx])
    assert abs(fd - g) <= 1e-6 * max(1.0, abs(g)), (name, idx, fd, g)


# --------------------------------------------------------------------------
# Cases built from a transformers model (gen_deberta_goldens, gen_hf_decoder_goldens)
# --------------------------------------------------------------------------


def saved_pretrained(model):
    """config.json and model.safetensors as model.save_pretrained writes them."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        saved = {}
        for fn in ("config.json", "model.safetensors"):
            with open(os.path.join(tmp, fn), "rb") as f:
                saved[fn] = f.read()
    return saved


def check_float32_run(name, run32, run64):
    """The float32 run's outputs and loss agree with the float64 run's to 1e-4, and every gradient of the
    float64 run is nonzero somewhere."""
    (outs32, loss32, _), (outs, loss, grads) = run32, run64
    for k in outs:
        assert rel_err(outs32[k], outs[k]) < 1e-4, (name, k, rel_err(outs32[k], outs[k]))
    assert abs(float(loss32) - float(loss)) < 1e-4 * max(1.0, abs(float(loss))), name
    for n, g in grads.items():
        assert float(g.abs().max()) > 0, (name, n)


def pretrained_case_files(name, model, saved, inputs, outs, loss, grads):
    """The case's files: save_pretrained's two and golden.safetensors (inputs, outputs, loss and
    grad.<name> of every tensor model.safetensors holds, which must be the model's parameters)."""
    import safetensors.torch
    state = model.state_dict()
    written = safetensors.torch.load(saved["model.safetensors"])
    names = sorted(written.keys())
    for n in names:
        assert n in grads, (name, n, "a saved tensor that is not a parameter")
        assert torch.equal(state[n].to(torch.float32), written[n])
    assert len(names) == len(grads), (name, sorted(set(grads) - set(names)))
    golden = golden_tensors(inputs, outs, loss, grads, names)
    files = dict(saved)
    files["golden.safetensors"] = safetensors_bytes(golden)
    assert sorted(read_safetensors(files["golden.safetensors"])) == sorted(golden)
    return files


def write_files(out_dir, files):
    """Writes each file of `files` (name -> bytes) into out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    for fn, data in files.items():
        with open(os.path.join(out_dir, fn), "wb") as f:
            f.write(data)
