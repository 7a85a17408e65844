#!/usr/bin/env python3
"""Golden forward/backward values for the decoder families kiln builds on its
Llama layers, made by Hugging Face `transformers` itself: Llama 3.x rope
scaling (llama3, linear, dynamic, yarn) with an explicit head_dim and tied
embeddings, Qwen3, Mistral's and Qwen3's sliding windows, Gemma and Gemma 2.

Made with transformers 5.25.0 and torch 2.15.0 (CPU). Rerun from the
repository root with a Python that has both:

    /work/pyref/bin/python tests/goldens/gen_hf_decoder_goldens.py

For every case it builds a tiny random model with transformers'
AutoModelFor* classes ("eager" attention), draws float32 weights from a
per-case seeded torch.Generator (matrices N(0, 0.2), biases N(0, 0.1), norm
weights 1 + N(0, 0.1), Gemma's stored w - 1 as N(0, 0.1)), and writes under
tests/goldens/<family>/<case>/:

  config.json         what transformers' save_pretrained writes (transformers 5's
                      form: rope_parameters with rope_theta inside, layer_types).
  model.safetensors   what save_pretrained writes: float32, tied copies dropped.
  golden.safetensors  inputs, outputs (logits, or last_hidden_state for *Model),
                      loss [] and grad.<name> = d loss / d <name> for every tensor
                      in model.safetensors.

The forward and backward run in float64 (model.double() after saving the
float32 weights), so the goldens carry no float32 rounding of their own; the
rotary tables are still computed in float32 inside transformers, as kiln does.
*Model cases use loss = sum(last_hidden_state * loss_weight_hidden).

Checks before writing: the float64 run agrees with a float32 run of the same
model (relative 1e-4), every parameter gets a gradient, windowed cases differ
from the same model without the window (so the window is exercised), and the
files read back.
"""

import collections
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import (ATTN_MASK, check_float32_run, pretrained_case_files, rel_err, saved_pretrained,  # noqa: E402
                       setup_torch, write_files)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO_ROOT, "tests", "goldens")

setup_torch()
transformers.logging.set_verbosity_error()

BASE = dict(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}

# family dir, case, architecture, num_labels, batch, seq, use attention_mask, config, seed
CASES = [
    # Llama 3.2's shape: tied embeddings, explicit head_dim (16, not hidden / heads), llama3 rope scaling whose
    # 64-position original context puts one frequency in each band (kept, smoothed, divided) at theta 500000.
    ("llama3", "llama3_lm_tied", "LlamaForCausalLM", None, 3, 7, True,
     dict(head_dim=16, tie_word_embeddings=True, max_position_embeddings=128, pad_token_id=0,
          rope_parameters=dict(LLAMA3, rope_theta=500000.0)), 4001),
    ("llama3", "llama_linear_rope", "LlamaForCausalLM", None, 3, 7, True,
     dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}), 4002),
    # 9 positions past max_position_embeddings 8: the dynamic base grows with the length.
    ("llama3", "llama_dynamic_rope", "LlamaForCausalLM", None, 2, 9, False,
     dict(max_position_embeddings=8, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
     4003),
    # YaRN with a 2048-position original context: the correction range [2, 6] blends the 8 frequencies
    # from kept to divided by the factor; cos and sin times 0.1 ln 4 + 1.
    ("llama3", "llama_yarn_rope", "LlamaForCausalLM", None, 3, 7, True,
     dict(head_dim=16, max_position_embeddings=8192,
          rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048,
                           "rope_theta": 10000.0}), 4004),
    ("qwen3", "qwen3_lm", "Qwen3ForCausalLM", None, 3, 7, True, dict(head_dim=16, pad_token_id=0), 4101),
    # YaRN's other knobs: an untruncated correction range from beta_fast / beta_slow, and the attention
    # factor from mscale / mscale_all_dim.
    ("qwen3", "qwen3_yarn_mscale", "Qwen3ForCausalLM", None, 2, 9, False,
     dict(head_dim=16, max_position_embeddings=8192,
          rope_parameters={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 1024,
                           "rope_theta": 1000000.0, "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 1.2,
                           "mscale_all_dim": 0.8, "truncate": False}), 4105),
    ("qwen3", "qwen3_seqcls", "Qwen3ForSequenceClassification", 3, 3, 7, True, dict(head_dim=8, pad_token_id=0), 4102),
    ("qwen3", "qwen3_model_tied", "Qwen3Model", None, 2, 9, False,
     dict(head_dim=8, tie_word_embeddings=True, attention_bias=True), 4103),
    # Layer 1 (from max_window_layers 1) attends to its last 3 keys.
    ("qwen3", "qwen3_lm_window", "Qwen3ForCausalLM", None, 2, 9, False,
     dict(head_dim=8, use_sliding_window=True, sliding_window=3, max_window_layers=1), 4104),
    ("mistral", "mistral_lm_window", "MistralForCausalLM", None, 3, 7, True,
     dict(head_dim=8, sliding_window=5, pad_token_id=0), 4201),
    # Multi-query attention, tied head, gelu_pytorch_tanh.
    ("gemma", "gemma_lm", "GemmaForCausalLM", None, 3, 7, True,
     dict(head_dim=16, num_key_value_heads=1, tie_word_embeddings=True), 4301),
    ("gemma", "gemma_seqcls", "GemmaForSequenceClassification", 3, 3, 7, True, dict(head_dim=8), 4302),
    # Caps small enough that tanh bends the scores and logits; a 5-key window on layer 0 (a padded row
    # keeps a real key in its window: a row with none is NaN in transformers).
    ("gemma", "gemma2_lm", "Gemma2ForCausalLM", None, 3, 7, True,
     dict(head_dim=16, tie_word_embeddings=True, sliding_window=5, query_pre_attn_scalar=24,
          attn_logit_softcapping=1.0, final_logit_softcapping=5.0), 4401),
    ("gemma", "gemma2_model", "Gemma2Model", None, 2, 9, False,
     dict(head_dim=8, sliding_window=4, attn_logit_softcapping=2.0), 4402),
    # Phi3Config's pad_token_id 32000 is past this vocabulary: 0 instead.
    ("phi3", "phi3_lm", "Phi3ForCausalLM", None, 3, 7, True, dict(pad_token_id=0), 4501),
    ("phi3", "phi3_seqcls", "Phi3ForSequenceClassification", 3, 3, 7, True, dict(pad_token_id=0), 4502),
    # 9 positions past original_max_position_embeddings 8: the long factors, and the attention factor
    # sqrt(1 + ln(16 / 8) / ln 8) on cos and sin; a 5-key window on every layer.
    ("phi3", "phi3_longrope_window", "Phi3ForCausalLM", None, 2, 9, False,
     dict(pad_token_id=0, max_position_embeddings=16, original_max_position_embeddings=8, sliding_window=5,
          rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 1.1, 1.3, 1.6],
                           "long_factor": [1.0, 1.5, 2.5, 4.0]}), 4503),
]

MODEL_TYPE = {"Llama": "llama", "Qwen3": "qwen3", "Mistral": "mistral", "Gemma2": "gemma2", "Gemma": "gemma",
              "Phi3": "phi3"}


def model_type(arch):
    for prefix in ("Gemma2", "Gemma", "Qwen3", "Mistral", "Llama", "Phi3"):
        if arch.startswith(prefix):
            return MODEL_TYPE[prefix]
    raise ValueError(arch)


def build_model(arch, num_labels, changes):
    kw = dict(BASE)
    kw.update(changes)
    if num_labels is not None:
        kw["num_labels"] = num_labels
        kw["problem_type"] = "single_label_classification"
    config = AutoConfig.for_model(model_type(arch), **kw)
    config.architectures = [arch]
    auto = AutoModel if arch.endswith("Model") else (
        AutoModelForCausalLM if arch.endswith("ForCausalLM") else AutoModelForSequenceClassification)
    model = auto.from_config(config, attn_implementation="eager", dtype=torch.float32)
    assert type(model).__name__ == arch, type(model).__name__
    return model


def init_params(model, gemma, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_(r * 0.1 if gemma else 1.0 + r * 0.1)
            else:
                p.copy_(r * (0.1 if name.endswith(".bias") else 0.2))


def make_inputs(arch, cfg, batch, seq, use_mask, gen):
    V = cfg.vocab_size
    inputs = collections.OrderedDict()
    mask = torch.tensor(ATTN_MASK, dtype=torch.int64) if use_mask else torch.ones(batch, seq, dtype=torch.int64)
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    ids = torch.randint(3, V, (batch, seq), generator=gen, dtype=torch.int64)  # never the ids 0, 1 or 2
    ids = torch.where(mask == 1, ids, torch.full_like(ids, pad))
    inputs["input_ids"] = ids
    if use_mask:
        inputs["attention_mask"] = mask
    if arch.endswith("ForCausalLM"):
        lab = ids.clone()
        if use_mask:
            lab[1, 5] = -100
            lab[2, 3:] = -100
        inputs["labels"] = lab
    elif arch.endswith("ForSequenceClassification"):
        inputs["labels"] = torch.randint(0, cfg.num_labels, (batch,), generator=gen, dtype=torch.int64)
    else:
        inputs["loss_weight_hidden"] = torch.randn(batch, seq, cfg.hidden_size, generator=gen, dtype=torch.float32)
    return inputs


def run(model, arch, inputs, dtype):
    """(outputs, loss, {name: grad}) of the model in `dtype`."""
    model = model.to(dtype)
    model.zero_grad(set_to_none=True)
    kwargs = {k: v for k, v in inputs.items() if k != "loss_weight_hidden"}
    kwargs["use_cache"] = False
    out = model(**kwargs)
    outs = collections.OrderedDict()
    if arch.endswith("Model"):
        outs["last_hidden_state"] = out.last_hidden_state
        loss = (out.last_hidden_state * inputs["loss_weight_hidden"].to(dtype)).sum()
    else:
        outs["logits"] = out.logits
        loss = out.loss
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return {k: v.detach() for k, v in outs.items()}, loss.detach(), grads


def build_case(family, name, arch, num_labels, batch, seq, use_mask, changes, seed):
    gen = torch.Generator().manual_seed(seed)
    model = build_model(arch, num_labels, changes)
    model.eval()
    init_params(model, arch.startswith("Gemma"), gen)
    inputs = make_inputs(arch, model.config, batch, seq, use_mask, gen)
    out_dir = os.path.join(DATA, family, name)
    saved = saved_pretrained(model)
    run32 = run(model, arch, inputs, torch.float32)
    outs, loss, grads = run(model, arch, inputs, torch.float64)
    check_float32_run(name, run32, (outs, loss, grads))
    if changes.get("sliding_window") and (changes.get("use_sliding_window", True)):
        windowless = build_model(arch, num_labels, dict(changes, sliding_window=4096))
        windowless.load_state_dict(model.state_dict())
        windowless.eval()
        o2, _, _ = run(windowless, arch, inputs, torch.float64)
        k = next(iter(outs))
        assert rel_err(o2[k], outs[k]) > 1e-6, (name, "the window changes nothing")
    # model.safetensors' tensors, by the names save_pretrained wrote.
    files = pretrained_case_files(name, model, saved, inputs, outs, loss, grads)
    write_files(out_dir, files)
    print("%-8s %-20s loss=%-12.6g bytes=%s" % (family, name, float(loss), [len(files[f]) for f in sorted(files)]))


def main():
    assert transformers.__version__ == "5.25.0", transformers.__version__
    for case in CASES:
        build_case(*case)


if __name__ == "__main__":
    main()
