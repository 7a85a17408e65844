"""What the sampling golden generators (gen_plain_sampling_goldens.py,
gen_beam_sampling_goldens.py) share: transformers' outputs for one prompt
counted over many torch seeds, and the distance between two such counts."""
import collections

import torch

PROMPT = [5, 17, 42, 8]
SEEDS = 2000
BATCH = 100


def counts(model, kw, seed, n):
    """n outputs of generate(do_sample=True, **kw): the prompt repeated in batches of BATCH, each row its own
    draws, torch seeded per batch; each continuation (the ids after the prompt, up to EOS) counted."""
    c = collections.Counter()
    for b in range(n // BATCH):
        torch.manual_seed(seed + b)
        out = model.generate(torch.tensor([PROMPT] * BATCH), do_sample=True, pad_token_id=0,
                             eos_token_id=model.config.eos_token_id, **kw)
        for row in out:
            # The continuation without the pads after an early EOS.
            ids = [int(t) for t in row[len(PROMPT):]]
            if model.config.eos_token_id in ids:
                ids = ids[:ids.index(model.config.eos_token_id) + 1]
            c[" ".join(map(str, ids))] += 1
    return c


def tvd(a, b, n):
    """Total variation distance between two count tables of n draws each."""
    return sum(abs(a[k] - b[k]) for k in set(a) | set(b)) / (2 * n)
