#!/work/pyref/bin/python
"""Check that an adapter kiln wrote opens in Hugging Face PEFT and gives kiln's logits.

    /work/pyref/bin/python tests/goldens/check_kiln_adapter_in_peft.py BASE ADAPTER IN KILN_OUT

BASE     the base model directory (config.json + model.safetensors).
ADAPTER  the adapter directory kiln wrote (kiln train --use_peft, save_adapter).
IN       the inputs given to kiln forward: {"input_ids": [[...]], optional "attention_mask"}.
KILN_OUT what `kiln forward --model BASE --adapter ADAPTER --inputs IN --output KILN_OUT` wrote.

The base opens with the auto class of its config's architecture (eager
attention, float32, eval mode); PeftModel.from_pretrained loads the adapter.
The adapter's tensors are also loaded with set_peft_model_state_dict, whose
report must hold no missing LoRA key and no unexpected key. The logits of
the PeftModel are compared with kiln's; prints the largest relative
difference and exits non-zero above 1e-4.
"""

import json
import sys

import torch
import transformers
from peft import PeftModel
from peft.utils import load_peft_weights, set_peft_model_state_dict


def main():
    base_dir, adapter_dir, inputs_file, kiln_out = sys.argv[1:5]
    config = transformers.AutoConfig.from_pretrained(base_dir)
    config._attn_implementation = "eager"
    auto = getattr(transformers, config.architectures[0])
    base = auto.from_pretrained(base_dir, config=config, torch_dtype=torch.float32).eval()
    model = PeftModel.from_pretrained(base, adapter_dir).eval()
    report = set_peft_model_state_dict(model, load_peft_weights(adapter_dir))
    missing = [k for k in report.missing_keys if "lora_" in k]
    assert not missing and not report.unexpected_keys, (missing, report.unexpected_keys)
    inputs = json.load(open(inputs_file))
    args = {"input_ids": torch.tensor(inputs["input_ids"])}
    if "attention_mask" in inputs:
        args["attention_mask"] = torch.tensor(inputs["attention_mask"])
    with torch.no_grad():
        theirs = model(**args).logits
    ours = torch.tensor(json.load(open(kiln_out))["logits"], dtype=torch.float32)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    rel = ((ours - theirs).abs().max() / theirs.abs().max()).item()
    print("adapter %s: PEFT loads it (no missing or unexpected keys); max |kiln - PEFT| / max |PEFT| = %.3g"
          % (adapter_dir, rel))
    sys.exit(0 if rel <= 1e-4 else 1)


if __name__ == "__main__":
    main()
