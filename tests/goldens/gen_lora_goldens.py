#!/work/pyref/bin/python
"""Generate LoRA adapter goldens with Hugging Face PEFT.

Rerun from the repository root with the reference venv (torch, transformers, peft):

    /work/pyref/bin/python tests/goldens/gen_lora_goldens.py

For each case the base model is one of the committed tiny model goldens
(tests/goldens/<family>/<case>/: config.json + model.safetensors), opened with
transformers (eager attention, float32, eval mode). PEFT's get_peft_model
wraps it with the case's LoraConfig; every lora_B is then drawn N(0, 0.2)
(PEFT initialises it to zero, which would make the adapter invisible) and each
modules_to_save copy is perturbed, so the adapter changes the logits. Written
under tests/goldens/lora/<case>/:

  adapter/adapter_config.json, adapter/adapter_model.safetensors
                      PeftModel.save_pretrained's files, as PEFT writes them.
  golden.safetensors  the inputs (input_ids, attention_mask, and for T5
                      decoder_input_ids), `logits` of the PeftModel, `loss`
                      (the labels below), and grad.<adapter key> = d loss / d
                      each trained adapter tensor, keyed as in adapter_model.safetensors;
                      for the cases in MERGED also `merged_logits`, the
                      logits after PEFT's merge_and_unload.

DoRA cases: each lora_magnitude_vector is also scaled by 1 + N(0, 0.2), so
the magnitude differs from the weight norm it starts at.

Trainable-token cases: the trained rows start as the table's, so they are
moved by N(0, 0.2) too.

Bias cases (bias "all" / "lora_only"): each bias PEFT trains is also moved
by N(0, 0.2), so the adapter's copy differs from the base's.

Embedding cases: PEFT initialises lora_embedding_A to zero (B is N(0, 1)),
so it is A that is drawn N(0, 0.2) there.

Labels: sequence classification, labels [0, 1, ...]; causal LM, the
input_ids (HF shifts them); T5, labels = decoder_input_ids shifted left.
Self-check: the adapter is reloaded with PeftModel.from_pretrained on a fresh
base and must give the same logits (no missing or unexpected keys).
"""

import os
import shutil
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO_ROOT, "tests", "goldens")
OUT_DIR = os.path.join(DATA, "lora")

# name, base case, auto class, LoraConfig arguments
CASES = [
    ("bert_seqcls", "bert/bert_seqcls", AutoModelForSequenceClassification,
     dict(task_type="SEQ_CLS", r=4, lora_alpha=8, lora_dropout=0.1)),
    ("roberta_seqcls_all_linear", "bert/roberta_seqcls", AutoModelForSequenceClassification,
     dict(task_type="SEQ_CLS", r=2, lora_alpha=6, target_modules="all-linear")),
    ("gpt2_lm", "gpt2/gpt2_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=16, fan_in_fan_out=True)),
    ("t5", "t5/t5_gated_untied", AutoModelForSeq2SeqLM,
     dict(task_type="SEQ_2_SEQ_LM", r=4, lora_alpha=8)),
    ("llama_lm_all_linear", "llama/llama_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, target_modules="all-linear",
          rank_pattern={"down_proj": 2}, alpha_pattern={"o_proj": 3.0})),
    ("qwen2_lm_rslora", "llama/qwen2_lm_tied", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, use_rslora=True)),
    # LoRA on embedding tables (PEFT's lora.Embedding: lora_embedding_A/B).
    # PEFT also saves embed_tokens' base weight (save_embedding_layers).
    ("llama_lm_embed", "llama/llama_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, target_modules=["embed_tokens", "q_proj"])),
    # GPT-2's wte is tied to the head: the branch changes the input side only
    # (merging it changes the head too: merged_logits).
    ("gpt2_lm_wte", "gpt2/gpt2_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=16, fan_in_fan_out=True, target_modules=["wte", "c_attn"])),
    ("bert_seqcls_word_embeddings", "bert/bert_seqcls", AutoModelForSequenceClassification,
     dict(task_type="SEQ_CLS", r=2, lora_alpha=4, target_modules=["word_embeddings", "query"], use_rslora=True)),
    # exclude_modules as a string: a regular expression the whole path must match.
    ("llama_lm_exclude_regex", "llama/llama_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=2, lora_alpha=4, target_modules="all-linear",
          exclude_modules=r".*\.layers\.1\.(self_attn\..*|mlp\.up_proj)|.*down_proj")),
    # The embedding table trained in full and saved with the adapter.
    ("llama_lm_save_embed", "llama/llama_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, modules_to_save=["embed_tokens"])),
    # A vocabulary resized to RESIZED[name] rows before the adapter is made
    # (resize_token_embeddings): PEFT saves the resized tables with it.
    ("llama_lm_resized", "llama/llama_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8)),
    ("gpt2_lm_resized", "gpt2/gpt2_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, fan_in_fan_out=True, target_modules=["wte", "c_attn"])),
    # DoRA (use_dora): a trained magnitude per output row beside each branch,
    # on Linear layers with biases (BERT), without (Llama), and on GPT-2's Conv1D.
    ("bert_seqcls_dora", "bert/bert_seqcls", AutoModelForSequenceClassification,
     dict(task_type="SEQ_CLS", r=4, lora_alpha=8, use_dora=True, target_modules=["query", "value", "dense"])),
    ("llama_lm_dora", "llama/llama_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, use_dora=True, target_modules=["q_proj", "v_proj", "down_proj"],
          rank_pattern={"down_proj": 2})),
    ("gpt2_lm_dora", "gpt2/gpt2_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=16, fan_in_fan_out=True, use_dora=True,
          target_modules=["c_attn", "c_proj"])),
    # layers_to_transform: suffix-matched targets in the listed layers only
    # (the index after layers_pattern when given; BERT's pooler has none).
    ("llama_lm_layers", "llama/llama_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
          layers_to_transform=[1])),
    ("bert_seqcls_layers_pattern", "bert/bert_seqcls", AutoModelForSequenceClassification,
     dict(task_type="SEQ_CLS", r=2, lora_alpha=4, target_modules=["query", "value", "dense"],
          layers_to_transform=1, layers_pattern="layer")),
    # PEFT's bias: every bias trains ("all"; the classifier's too, which PEFT
    # then also saves under modules_to_save / original_module), or only the
    # adapted layers' ("lora_only"); lora_bias: a bias on lora_B, on layers
    # with a bias (BERT, GPT-2's Conv1D) and without one (Llama: no merge).
    ("bert_seqcls_bias_all", "bert/bert_seqcls", AutoModelForSequenceClassification,
     dict(task_type="SEQ_CLS", r=4, lora_alpha=8, bias="all", lora_bias=True)),
    ("gpt2_lm_bias_lora_only", "gpt2/gpt2_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=16, fan_in_fan_out=True, bias="lora_only", lora_bias=True,
          target_modules=["c_attn", "c_fc"])),
    ("llama_lm_lora_bias", "llama/llama_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, lora_bias=True, target_modules=["q_proj", "down_proj"])),
    # trainable_token_indices: chosen rows of the input embeddings trained as
    # they are (a list), of an untied head too (an object), with a head tied
    # to the table following it (Qwen2, GPT-2), and with BERT's padding row
    # among them (no gradient reaches it).
    ("llama_lm_tokens", "llama/llama_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, trainable_token_indices=[3, 42, 98])),
    ("llama_lm_tokens_head", "llama/llama_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, trainable_token_indices={"embed_tokens": [3, 5], "lm_head": [7, 2]})),
    ("qwen2_lm_tokens_tied", "llama/qwen2_lm_tied", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, trainable_token_indices=[17, 5])),
    ("gpt2_lm_tokens", "gpt2/gpt2_lm", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=16, fan_in_fan_out=True, trainable_token_indices=[42, 3])),
    ("bert_seqcls_tokens", "bert/bert_seqcls", AutoModelForSequenceClassification,
     dict(task_type="SEQ_CLS", r=4, lora_alpha=8, trainable_token_indices=[0, 17, 42])),
    # New tokens' rows trained after resize_token_embeddings: PEFT saves the
    # resized table under token_adapter.base_layer, and the tied head's copies.
    ("qwen2_lm_tokens_resized", "llama/qwen2_lm_tied", AutoModelForCausalLM,
     dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, trainable_token_indices=[99, 101, 103])),
]

RESIZED = {"llama_lm_resized": 104, "gpt2_lm_resized": 104, "qwen2_lm_tokens_resized": 104}
# Their inputs use the new ids too.
RESIZED_INPUT_IDS = [[5, 17, 101, 8, 99, 3, 11], [7, 103, 2, 64, 100, 0, 0]]

# Cases whose golden also holds merged_logits: PEFT's merge_and_unload's.
MERGED = {"llama_lm_embed", "gpt2_lm_wte", "bert_seqcls_word_embeddings", "bert_seqcls_dora", "llama_lm_dora",
          "gpt2_lm_dora", "bert_seqcls_bias_all", "gpt2_lm_bias_lora_only", "llama_lm_tokens_head", "qwen2_lm_tokens_tied",
          "gpt2_lm_tokens", "bert_seqcls_tokens"}

INPUT_IDS = [[5, 17, 42, 8, 99 - 1, 3, 11], [7, 23, 2, 64, 31, 0, 0]]
MASK = [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]
DECODER_IDS = [[0, 12, 7, 33, 5], [0, 9, 14, 2, 40]]


def load_base(base, auto, vocab=None):
    d = os.path.join(DATA, base)
    config = AutoConfig.from_pretrained(d)
    config._attn_implementation = "eager"
    model = auto.from_pretrained(d, config=config, torch_dtype=torch.float32)
    if vocab:
        torch.manual_seed(1)  # the new rows are drawn around the old ones' mean
        model.resize_token_embeddings(vocab)
    return model.eval()


def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name or ".lora_embedding_A." in name or ".trainable_tokens_delta." in name:
                # the zero-initialised half, or trained token rows (they start as the table's)
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            elif ".lora_magnitude_vector." in name:  # DoRA's magnitude starts at the weight's norm
                p.mul_(1 + torch.randn(p.shape, generator=g) * 0.2)
            elif ".modules_to_save." in name or (p.requires_grad and name.endswith(".bias")):
                p.add_(torch.randn(p.shape, generator=g) * 0.2)  # a saved module, or a bias PEFT's bias trains


def run(model, auto, n_labels, input_ids=INPUT_IDS):
    ids = torch.tensor(input_ids)
    mask = torch.tensor(MASK)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if auto is AutoModelForSequenceClassification:
        labels = torch.arange(ids.shape[0]) % n_labels
    elif auto is AutoModelForSeq2SeqLM:
        dec = torch.tensor(DECODER_IDS)
        inputs["decoder_input_ids"] = dec
        labels = torch.cat([dec[:, 1:], torch.full((dec.shape[0], 1), 1)], dim=1)
    else:
        labels = ids.masked_fill(mask == 0, -100)
    out = model(**inputs, labels=labels)
    return inputs, labels, out


def build(name, base, auto, lora_args):
    torch.manual_seed(0)
    vocab = RESIZED.get(name)
    ids = RESIZED_INPUT_IDS if vocab else INPUT_IDS
    model = load_base(base, auto, vocab)
    peft_model = get_peft_model(model, LoraConfig(**lora_args))
    perturb(peft_model, 1234)
    peft_model.eval()  # dropout off: the logits and gradients are deterministic
    n_labels = getattr(model.config, "num_labels", 0)
    inputs, labels, out = run(peft_model, auto, n_labels, ids)
    out.loss.backward()

    d = os.path.join(OUT_DIR, name)
    shutil.rmtree(d, ignore_errors=True)
    adapter_dir = os.path.join(d, "adapter")
    peft_model.save_pretrained(adapter_dir)
    os.remove(os.path.join(adapter_dir, "README.md"))  # PEFT's model card template: not needed here

    # PEFT's saved key for each trainable tensor: the adapter name dropped,
    # a modules_to_save copy under its module's own path.
    grads = {}
    for pname, p in peft_model.named_parameters():
        if not p.requires_grad:
            continue
        key = pname.replace(".default", "").replace(".modules_to_save", "")
        key = key.replace(".lora_magnitude_vector.weight", ".lora_magnitude_vector")
        grads["grad." + key] = p.grad.detach().clone()
    golden = {k: v.clone() for k, v in inputs.items()}
    golden["labels"] = labels
    golden["logits"] = out.logits.detach().clone()
    golden["loss"] = out.loss.detach().reshape([])
    golden.update(grads)
    save_file(golden, os.path.join(d, "golden.safetensors"), metadata={"format": "pt"})

    # Self-check: PEFT reloads its own files to the same logits, and every
    # gradient key is a tensor of the adapter file.
    from safetensors.torch import load_file
    saved = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    # save_embedding_layers: the base's own tables (a targeted one under
    # base_layer, resized ones under their own names) are saved untrained.
    def table(k):  # also bias "all"'s copies of a saved module's biases (its wrapper's two)
        if ".original_module." in k or ".modules_to_save." in k:
            return True
        if "lm_head.token_adapter." in k and model.config.tie_word_embeddings:
            return True  # the tied head's copy of the table's trained rows
        return (".base_layer." in k and not k.endswith(".bias")) or (vocab and k.endswith(".weight") and k.split(".")[-2] in ("embed_tokens", "wte", "lm_head"))
    assert sorted("grad." + k for k in saved if not table(k)) == sorted(grads), (sorted(saved), sorted(grads))
    fresh = PeftModel.from_pretrained(load_base(base, auto, vocab), adapter_dir).eval()
    _, _, again = run(fresh, auto, n_labels, ids)
    err = (again.logits - out.logits).abs().max().item()
    assert err < 1e-6, (name, err)
    base_logits = run(load_base(base, auto, vocab), auto, n_labels, ids)[2].logits
    change = (base_logits - out.logits).abs().max().item()
    assert change > 1e-3, (name, "the adapter does not change the logits", change)
    if name in MERGED:
        merged = fresh.merge_and_unload().eval()
        golden["merged_logits"] = run(merged, auto, n_labels, ids)[2].logits.detach().clone()
        save_file(golden, os.path.join(d, "golden.safetensors"), metadata={"format": "pt"})
    print("%-28s loss=%.6f adapter tensors=%d logits change=%.3g" % (name, out.loss.item(), len(saved), change))


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)
    only = sys.argv[1:]
    for case in CASES:
        if not only or case[0] in only:
            build(*case)


if __name__ == "__main__":
    main()
