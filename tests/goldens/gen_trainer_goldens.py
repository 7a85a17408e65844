"""Writes tests/goldens/trainer/: whole training runs of transformers' Trainer on
tiny models, which `kiln train` must reproduce (tests/cli/trainer_golden_test.cpp),
and transformers' weight-decay grouping of every preset model (decay.json, read
by tests/train/decay_test.cpp).

    /work/pyref/bin/python tests/goldens/gen_trainer_goldens.py

Made with torch 2.15 (CPU), transformers 5.25 and tokenizers 0.23. The models are
random (seeded), dropout 0, with word-level tokenizers over a 20-word vocabulary:
BertForSequenceClassification, GPT2LMHeadModel, LlamaForCausalLM and
T5ForConditionalGeneration (hidden size 8, two layers; biases and LayerNorms moved off their initial values
so that weight decay groups matter). transformers' train sampler shuffles with
torch's generator, which kiln's sampler cannot reproduce, so every case is one
where the order of the rows does not change the result: each optimizer step
holds the whole training set (one batch of all rows, or micro-batches that
together are all rows), or every row is the same (the remainder case).

Three cases patch the Trainer to what it means to compute, where transformers
5.25 itself is inconsistent:
- causal LM: GPT2LMHeadModel has no loss_type, so the Trainer's
  num_items_in_batch counts position 0 of each row although the loss never
  predicts it (it counts labels[..., 1:] for models whose loss_type is
  ForCausalLM, such as Llama). The script sets `_loss_shifts_labels = True`.
- gradient accumulation with a model whose loss ignores num_items_in_batch
  (T5's CrossEntropyLoss mean, BERT's classifier) while its forward takes
  **kwargs: the Trainer neither divides by the accumulation steps nor
  normalises over the whole step, so loss and gradient are
  gradient_accumulation_steps times too large (transformers issue #37766).
  The T5 case passes a compute_loss_func that does what num_items_in_batch is
  for (the sum over the step's label tokens / their count); the BERT case sets
  model_accepts_loss_kwargs = False (each micro-batch's mean / the steps).
Label smoothing needs no patch: HF's LabelSmoother uses num_items_in_batch.

runs.json holds, per case, kiln's command-line flags ("{dir}" is this folder),
transformers' log_history (runtimes set to null: only their keys are compared)
and the L2 norm of every tensor of the final model.
"""
import copy
import csv
import json
import pathlib
import random
import shutil
import sys

# This folder's datasets/ would shadow the datasets package transformers imports.
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]

import torch  # noqa: E402
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification,
                          AutoTokenizer, BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration, Trainer, TrainingArguments)

ROOT = pathlib.Path(__file__).resolve().parent
OUT = ROOT / "trainer"
WORDS = "the a cat dog sat ran on mat big small red blue fast slow good bad very not it was".split()
RUNTIME_KEYS = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "eval_runtime",
                "eval_samples_per_second", "eval_steps_per_second", "train_tokens_per_second"}


# --------------------------------------------------------------------------
# Models and data
# --------------------------------------------------------------------------

def wordlevel(specials, template=None, pair=None):
    vocab = {t: i for i, t in enumerate(specials + WORDS)}
    unk = [s for s in specials if "unk" in s.lower()][0]
    tok = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if template:
        tok.post_processor = processors.TemplateProcessing(
            single=template, pair=pair, special_tokens=[(s, vocab[s]) for s in specials if s in template + pair])
    return tok, vocab


def perturb(model, chosen):
    with torch.no_grad():
        for n, p in model.named_parameters():
            if chosen(n):
                p.add_(torch.randn_like(p) * 0.1)


def save(model, tokenizer, d):
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d)
    tokenizer.save_pretrained(d)
    for extra in ("generation_config.json", "special_tokens_map.json"):
        (d / extra).unlink(missing_ok=True)


def make_bert(d):
    tok, vocab = wordlevel(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1")
    t = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                sep_token="[SEP]", mask_token="[MASK]")
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=16, max_position_embeddings=16, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, num_labels=2, pad_token_id=0)
    torch.manual_seed(0)
    m = BertForSequenceClassification(cfg)
    perturb(m, lambda n: n.endswith("bias") or "LayerNorm" in n)
    save(m, t, d)


def make_gpt2(d):
    tok, vocab = wordlevel(["<|endoftext|>", "<unk>"])
    t = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                unk_token="<unk>")
    cfg = GPT2Config(vocab_size=len(vocab), n_embd=8, n_layer=2, n_head=2, n_positions=16, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(1)
    m = GPT2LMHeadModel(cfg)
    perturb(m, lambda n: n.endswith("bias") or ".ln_" in n)
    save(m, t, d)


def make_llama(d):
    tok, vocab = wordlevel(["<unk>", "<s>", "</s>"])
    t = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16, rms_norm_eps=1e-6,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(3)
    m = LlamaForCausalLM(cfg)
    perturb(m, lambda n: "norm" in n)
    save(m, t, d)


def make_t5(d):
    tok, vocab = wordlevel(["<pad>", "</s>", "<unk>"], "$A </s>", "$A </s> $B </s>")
    t = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    cfg = T5Config(vocab_size=len(vocab), d_model=8, d_kv=4, d_ff=16, num_layers=2, num_decoder_layers=2,
                   num_heads=2, relative_attention_num_buckets=8, relative_attention_max_distance=16,
                   dropout_rate=0.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(2)
    m = T5ForConditionalGeneration(cfg)
    perturb(m, lambda n: "layer_norm" in n)
    save(m, t, d)


def sentences(n, seed, lo=3, hi=6):
    r = random.Random(seed)
    return [" ".join(r.choice(WORDS) for _ in range(r.randint(lo, hi))) for _ in range(n)]


def make_data(d):
    d.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train", 8, 10), ("dev", 6, 11)):
        with open(d / f"{name}.csv", "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["sentence", "label"])
            for s in sentences(n, seed):
                w.writerow([s, int("good" in s or "cat" in s)])
    for name, n, seed in (("lm_train", 12, 20), ("lm_dev", 6, 21)):
        (d / f"{name}.txt").write_text("\n".join(sentences(n, seed)) + "\n")
    for name, n, seed in (("s2s_train", 8, 30), ("s2s_dev", 4, 31)):
        rows = zip(sentences(n, seed, 3, 7), sentences(n, seed + 100, 1, 5))
        (d / f"{name}.jsonl").write_text("".join(json.dumps({"source": s, "target": t}) + "\n" for s, t in rows))
    same = json.dumps({"source": "the big dog ran fast", "target": "a dog ran"}) + "\n"
    (d / "s2s_same10.jsonl").write_text(same * 10)


# --------------------------------------------------------------------------
# Rows as kiln train builds them (run_glue, run_clm, run_summarization)
# --------------------------------------------------------------------------

def cls_rows(tok, path, L, _):
    out = []
    for r in csv.DictReader(open(path)):
        e = dict(tok(r["sentence"], truncation=True, max_length=L, padding="max_length"))
        e["labels"] = int(r["label"])
        out.append(e)
    return out


def clm_rows(tok, path, L, _):
    ids = []
    for line in open(path).read().splitlines(keepends=True):
        ids += tok(line)["input_ids"]
    n = len(ids) // L * L
    return [{"input_ids": ids[i:i + L], "attention_mask": [1] * L, "labels": ids[i:i + L]} for i in range(0, n, L)]


def s2s_rows(tok, path, L, TL):
    out = []
    for line in open(path):
        r = json.loads(line)
        e = dict(tok(r["source"], truncation=True, max_length=L, padding="max_length"))
        y = tok(r["target"], truncation=True, max_length=TL)["input_ids"]
        e["labels"] = y + [-100] * (TL - len(y))
        # T5's _shift_right, given explicitly so the model gets it when the Trainer pops the labels.
        e["decoder_input_ids"] = [0] + [t if t != -100 else 0 for t in e["labels"][:-1]]
        out.append(e)
    return out


class Rows(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {k: torch.tensor(v) for k, v in self.rows[i].items()}


TASKS = {"text-classification": (cls_rows, AutoModelForSequenceClassification),
         "causal-lm": (clm_rows, AutoModelForCausalLM),
         "seq2seq": (s2s_rows, AutoModelForSeq2SeqLM)}


def token_weighted(outputs, labels, num_items_in_batch=None):
    """What num_items_in_batch is for: the step's summed token loss over its label tokens."""
    logits = outputs["logits"].flatten(0, -2).float()
    loss = torch.nn.functional.cross_entropy(logits, labels.flatten(), reduction="sum")
    return loss / (num_items_in_batch if num_items_in_batch is not None else labels.ne(-100).sum())


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------

COMMON = {"learning_rate": 0.01, "weight_decay": 0.1, "max_grad_norm": 0.5, "logging_steps": 1, "seed": 42}
CASES = {
    # Whole batch; linear schedule with warmup; clipping; evaluation before the first step, every 2 steps and at
    # the last (5th); input tokens counted (each training log then has the run's speed in tokens).
    "bert_linear": dict(model="bert", task="text-classification", train="train.csv", dev="dev.csv", L=8,
                        args=dict(per_device_train_batch_size=8, num_train_epochs=5, warmup_steps=2,
                                  eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=6,
                                  eval_on_start=True, include_num_input_tokens_seen=True)),
    # Label smoothing, no clipping (grad_norm still logged), cosine with restarts, warmup as a fraction,
    # logging_first_step with logging_steps 3.
    "bert_smoothing": dict(model="bert", task="text-classification", train="train.csv", dev="dev.csv", L=8,
                           args=dict(per_device_train_batch_size=8, max_steps=7, label_smoothing_factor=0.1,
                                     max_grad_norm=0.0, lr_scheduler_type="cosine_with_restarts",
                                     lr_scheduler_kwargs={"num_cycles": 2}, warmup_steps=0.3, logging_steps=3,
                                     logging_first_step=True, eval_strategy="epoch",
                                     per_device_eval_batch_size=4)),
    # Gradient accumulation over micro-batches that together are the training set.
    "bert_accumulation": dict(model="bert", task="text-classification", train="train.csv", dev="dev.csv", L=8,
                              hf_patch="mean_per_microbatch",
                              args=dict(per_device_train_batch_size=4, gradient_accumulation_steps=2,
                                        num_train_epochs=4, lr_scheduler_type="inverse_sqrt", warmup_steps=2,
                                        eval_strategy="no")),
    # GPT-2's LayerNorms (ln_1, ln_2, ln_f: no decay by module type); polynomial schedule.
    "gpt2_polynomial": dict(model="gpt2", task="causal-lm", train="lm_train.txt", dev="lm_dev.txt", L=8,
                            hf_patch="count_shifted",
                            args=dict(per_device_train_batch_size=64, num_train_epochs=5, weight_decay=0.5,
                                      lr_scheduler_type="polynomial", warmup_steps=1,
                                      lr_scheduler_kwargs={"lr_end": 0.001, "power": 2.0},
                                      eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=8)),
    # Label smoothing with the causal shift.
    "gpt2_smoothing": dict(model="gpt2", task="causal-lm", train="lm_train.txt", dev="lm_dev.txt", L=8,
                           hf_patch="count_shifted",
                           args=dict(per_device_train_batch_size=64, max_steps=4, label_smoothing_factor=0.2,
                                     lr_scheduler_type="cosine", eval_strategy="steps", eval_steps=4,
                                     per_device_eval_batch_size=8)),
    # Llama's loss takes num_items_in_batch, so HF needs no patch: accumulation over micro-batches that together
    # are the training set; RMSNorm weights (no decay by name: input_layernorm, model.norm).
    "llama_accumulation": dict(model="llama", task="causal-lm", train="lm_train.txt", dev="lm_dev.txt", L=8,
                               args=dict(per_device_train_batch_size=3, gradient_accumulation_steps=2,
                                         num_train_epochs=4, weight_decay=0.5, warmup_steps=1,
                                         eval_strategy="steps", eval_steps=3, per_device_eval_batch_size=8)),
    # Token-weighted accumulation: target lengths differ between micro-batches; T5's relative_attention_bias
    # (no decay: its name holds "bias").
    "t5_accumulation": dict(model="t5", task="seq2seq", train="s2s_train.jsonl", dev="s2s_dev.jsonl", L=8, TL=6,
                            hf_patch="token_weighted",
                            args=dict(per_device_train_batch_size=4, gradient_accumulation_steps=2,
                                      num_train_epochs=5, weight_decay=0.5, warmup_steps=2,
                                      eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=4)),
    # 10 rows in batches of 4 and 2 accumulation steps: each epoch is a step of two batches and a step of the
    # one left (HF never lets a step cross an epoch's end); label smoothing; constant_with_warmup.
    "t5_remainder": dict(model="t5", task="seq2seq", train="s2s_same10.jsonl", dev="s2s_dev.jsonl", L=8, TL=6,
                         args=dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, num_train_epochs=3,
                                   label_smoothing_factor=0.1, lr_scheduler_type="constant_with_warmup",
                                   warmup_steps=3, eval_strategy="epoch", per_device_eval_batch_size=4)),
    # The last partial batch: 10 rows in batches of 4 are 3 batches an epoch (the last of 2 rows), and a
    # fractional num_train_epochs: ceil(1.5 x 3) = 5 steps, epochs 1/3, 2/3, ...; evaluation every 2 steps and at
    # the last.
    "t5_partial_batch": dict(model="t5", task="seq2seq", train="s2s_same10.jsonl", dev="s2s_dev.jsonl", L=8, TL=6,
                             args=dict(per_device_train_batch_size=4, num_train_epochs=1.5, eval_strategy="steps",
                                       eval_steps=2, per_device_eval_batch_size=4)),
    # dataloader_drop_last: 2 batches an epoch; max_steps 5 ends halfway through the third epoch.
    "t5_drop_last": dict(model="t5", task="seq2seq", train="s2s_same10.jsonl", dev="s2s_dev.jsonl", L=8, TL=6,
                         args=dict(per_device_train_batch_size=4, dataloader_drop_last=True, max_steps=5,
                                   logging_strategy="epoch", eval_strategy="no")),
}


def kiln_flags(case):
    f = ["--task", case["task"], "--model_name_or_path", "{dir}/" + case["model"],
         "--train_file", "{dir}/data/" + case["train"], "--report_to", "none", "--save_strategy", "no",
         "--disable_tqdm", "true"]
    if case["task"] == "seq2seq":
        f += ["--max_source_length", str(case["L"]), "--max_target_length", str(case["TL"])]
    else:
        f += ["--max_seq_length", str(case["L"])]
    if case["task"] != "causal-lm":  # the rows below pad to the maximum length (causal-lm's blocks are full)
        f += ["--pad_to_max_length"]
    args = {**COMMON, **case["args"]}
    if args.get("eval_strategy", "no") != "no":
        f += ["--validation_file", "{dir}/data/" + case["dev"]]
    for k, v in args.items():
        v = json.dumps(v) if isinstance(v, dict) else ("true" if v is True else "false" if v is False else str(v))
        f += ["--" + k, v]
    return f


def run_hf(case, workdir):
    rows, Auto = TASKS[case["task"]]
    mdir = OUT / case["model"]
    tok = AutoTokenizer.from_pretrained(mdir)
    model = Auto.from_pretrained(mdir)
    args = {**COMMON, **case["args"]}
    train = Rows(rows(tok, OUT / "data" / case["train"], case["L"], case.get("TL")))
    dev = Rows(rows(tok, OUT / "data" / case["dev"], case["L"], case.get("TL")))
    targs = TrainingArguments(output_dir=str(workdir), report_to="none", save_strategy="no", **args)
    patch = case.get("hf_patch")
    trainer = Trainer(model=model, args=targs, train_dataset=train,
                      eval_dataset=dev if args.get("eval_strategy", "no") != "no" else None,
                      compute_loss_func=token_weighted if patch == "token_weighted" else None)
    if patch == "count_shifted":
        trainer._loss_shifts_labels = True
    if patch == "mean_per_microbatch":
        trainer.model_accepts_loss_kwargs = False
    trainer.train()
    history = []
    for e in trainer.state.log_history:
        history.append({k: (None if k in RUNTIME_KEYS else v) for k, v in e.items()})
    norms = {n: float(f"{p.detach().double().norm():.9g}") for n, p in model.state_dict().items()}
    return history, norms


# --------------------------------------------------------------------------
# Weight decay groups of the preset models
# --------------------------------------------------------------------------

DECAY_PRESETS = {"bert-tiny": "BertForSequenceClassification", "distilbert-tiny": "DistilBertForSequenceClassification",
                 "gpt2-tiny": "GPT2LMHeadModel", "llama-tiny": "LlamaForCausalLM", "qwen3-tiny": "Qwen3ForCausalLM",
                 "mistral-tiny": "MistralForCausalLM", "gemma-tiny": "GemmaForCausalLM",
                 "gemma2-tiny": "Gemma2ForCausalLM", "phi3-tiny": "Phi3ForCausalLM",
                 "t5-tiny": "T5ForConditionalGeneration", "deberta-v3-tiny": "DebertaV2ForSequenceClassification"}


def decay_groups():
    out = {}
    for preset, arch in DECAY_PRESETS.items():
        cfg_json = json.loads((ROOT / "configs" / f"{preset}.json").read_text())
        cfg = transformers.AutoConfig.for_model(**cfg_json)
        model = getattr(transformers, arch)(cfg)
        decayed = set(Trainer.get_decay_parameter_names(None, model))
        names = [n for n, _ in model.named_parameters()]
        out[preset] = {"architecture": arch, "parameters": len(names), "no_decay": [n for n in names if n not in decayed]}
    return out


def main():
    make_bert(OUT / "bert")
    make_gpt2(OUT / "gpt2")
    make_llama(OUT / "llama")
    make_t5(OUT / "t5")
    make_data(OUT / "data")
    runs = {}
    for name, case in CASES.items():
        history, norms = run_hf(copy.deepcopy(case), OUT / ".work" / name)
        runs[name] = {"flags": kiln_flags(case), "hf_patch": case.get("hf_patch"), "log_history": history,
                      "weight_norms": norms}
        steps = max(e["step"] for e in history)
        print(f"{name}: {len(history)} log entries, {steps} steps")
    shutil.rmtree(OUT / ".work", ignore_errors=True)
    text = json.dumps(runs, indent=1)
    (OUT / "runs.json").write_text(text + "\n")
    (OUT / "decay.json").write_text(json.dumps(decay_groups(), indent=1) + "\n")
    print(f"torch {torch.__version__}, transformers {transformers.__version__} -> {OUT}")


if __name__ == "__main__":
    main()
