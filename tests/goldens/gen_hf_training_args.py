"""Writes tests/goldens/hf_args/training_args.json: an args file as Hugging Face's
TrainingArguments.to_json_string() writes it (every field, report_to as a
list, integrations off), which `kiln train --args_file` must load.

    /work/pyref/bin/python tests/goldens/gen_hf_training_args.py
"""
import pathlib

import transformers
from transformers import TrainingArguments

args = TrainingArguments(
    output_dir="out",  # the test's --output_dir overrides it
    learning_rate=3e-5,
    per_device_train_batch_size=4,
    max_steps=4,
    logging_steps=1,
    save_strategy="no",
    seed=7,
    report_to=["tensorboard"],
)
out = pathlib.Path(__file__).resolve().parents[2] / "tests/goldens/hf_args/training_args.json"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(args.to_json_string())
print(f"transformers {transformers.__version__}: {len(args.to_dict())} fields -> {out}")
