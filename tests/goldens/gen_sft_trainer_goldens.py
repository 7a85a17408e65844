"""Writes tests/goldens/sft_trainer/: TRL's SFTTrainer itself (trl 1.16) on the
data files of tests/goldens/sft/, which `kiln train --task sft` must reproduce
(tests/cli/sft_trainer_golden_test.cpp) and whose prepared rows
tokenize_sft / pack_sft must equal (tests/data/sft_trainer_golden_test.cpp).

    /work/pyref/bin/python tests/goldens/gen_sft_trainer_goldens.py

Made with torch 2.15 (CPU), transformers 5.25, trl 1.16, datasets 5.2 and
tokenizers 0.23. Where gen_sft_goldens.py re-implements TRL's tokenize_fn and
build_labels, this script imports TRL and reads SFTTrainer.train_dataset: the
rows _prepare_dataset leaves (tokenized, labelled, truncated or packed; a
packed row's seq_lengths), and the loss and gradient norm of two AdamW steps
on one batch holding every row, so the sampler's order does not matter (with
bfd packing TRL trains padding-free: one flattened row with position_ids).

llama/: LlamaForCausalLM (hidden 16, two layers, untied embeddings) with
tests/goldens/sft/tokenizer (ChatML template with {% generation %} blocks,
eos <|im_end|>, pad <|endoftext|>).

cases.json, per case: kiln's flags ("{dir}" is this folder), the SFTConfig
fields set, the data file, TRL's rows and the steps.
"""
import json
import pathlib
import shutil
import sys

# This folder's datasets/ would shadow the datasets package TRL imports.
sys.path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != pathlib.Path(__file__).resolve().parent]

import torch  # noqa: E402
from datasets import load_dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent
OUT = ROOT / "sft_trainer"
SFT = ROOT / "sft"

# name: (data file, SFTConfig fields, kiln flags)
CASES = {
    "chat_assistant_only": ("chat.jsonl", {"assistant_only_loss": True}, ["--assistant_only_loss"]),
    "chat_all_tokens": ("chat.jsonl", {}, []),
    "chat_truncated_assistant_only": ("chat.jsonl", {"max_length": 16, "assistant_only_loss": True},
                                      ["--max_length", "16", "--assistant_only_loss"]),
    "prompt_completion_text": ("prompt_completion_text.jsonl", {}, []),
    "prompt_completion_text_all_tokens": ("prompt_completion_text.jsonl", {"completion_only_loss": False},
                                          ["--completion_only_loss", "false"]),
    "prompt_completion_messages": ("prompt_completion.jsonl", {}, []),
    "prompt_completion_messages_assistant_only": ("prompt_completion.jsonl", {"assistant_only_loss": True},
                                                  ["--assistant_only_loss"]),
    "prompt_completion_messages_truncated": ("prompt_completion.jsonl", {"max_length": 22}, ["--max_length", "22"]),
    # TRL flattens each batch into one row; it truncates nothing, so it needs max_length None.
    "chat_padding_free": ("chat.jsonl", {"padding_free": True, "max_length": None, "assistant_only_loss": True},
                          ["--padding_free", "--assistant_only_loss"]),
    "packed_bfd": ("chat.jsonl", {"packing": True, "max_length": 64}, ["--packing", "--max_length", "64"]),
    "packed_bfd_cut_assistant_only": ("chat.jsonl", {"packing": True, "max_length": 24, "assistant_only_loss": True},
                                      ["--packing", "--max_length", "24", "--assistant_only_loss"]),
    "packed_wrapped": ("chat.jsonl", {"packing": True, "max_length": 40, "packing_strategy": "wrapped"},
                       ["--packing", "--max_length", "40", "--packing_strategy", "wrapped"]),
    "packed_bfd_split": ("prompt_completion.jsonl", {"packing": True, "max_length": 20, "packing_strategy": "bfd_split"},
                         ["--packing", "--max_length", "20", "--packing_strategy", "bfd_split"]),
}
STEPS = 2


def make_model(d):
    tok = AutoTokenizer.from_pretrained(SFT / "tokenizer")
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(7)
    LlamaForCausalLM(cfg).save_pretrained(d)
    (d / "generation_config.json").unlink(missing_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SFT / "tokenizer" / f, d / f)


def run(file, config):
    tok = AutoTokenizer.from_pretrained(OUT / "llama")
    model = AutoModelForCausalLM.from_pretrained(OUT / "llama")
    ds = load_dataset("json", data_files=str(SFT / file), split="train")
    args = SFTConfig(output_dir="/tmp/gen_sft_trainer_run", report_to="none", save_strategy="no", max_steps=STEPS,
                     learning_rate=0.02, logging_steps=1, seed=42, bf16=False, use_cpu=True,
                     per_device_train_batch_size=64, **config)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    rows = [{k: r[k] for k in ("input_ids", "labels", "seq_lengths") if k in r} for r in trainer.train_dataset]
    assert len(rows) <= 64, "one batch must hold every row"
    trainer.train()
    steps = [{"loss": e["loss"], "grad_norm": e["grad_norm"]} for e in trainer.state.log_history if "loss" in e]
    return rows, steps


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir()
    make_model(OUT / "llama")
    cases = {}
    for name, (file, config, kiln_flags) in CASES.items():
        rows, steps = run(file, dict(config))
        flags = ["--task", "sft", "--model_name_or_path", "{dir}/llama", "--train_file", "{dir}/../sft/" + file,
                 "--per_device_train_batch_size", str(len(rows)), "--max_steps", str(STEPS), "--learning_rate", "0.02",
                 "--logging_steps", "1", "--seed", "42", "--report_to", "none", "--save_strategy", "no",
                 "--disable_tqdm", "true"] + kiln_flags
        cases[name] = {"file": file, "config": config, "flags": flags, "rows": rows, "steps": steps}
    (OUT / "cases.json").write_text(json.dumps(cases, indent=None, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
