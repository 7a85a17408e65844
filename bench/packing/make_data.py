#!/usr/bin/env python3
"""Language-modeling SFT rows ({"text": ...}) whose lengths in tokens (with the
EOS kiln appends) are uniform in [10, 512], for bench/packing/run.sh.
   make_data.py TOKENIZER_JSON OUT.jsonl [ROWS=400] [SEED=0]
Needs the `tokenizers` package."""
import json
import random
import sys

from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
rows = int(sys.argv[3]) if len(sys.argv) > 3 else 400
random.seed(int(sys.argv[4]) if len(sys.argv) > 4 else 0)
words = "the a cat dog sat on mat and ran far over hill to see sun moon star tree river stone bird sings".split()
with open(sys.argv[2], "w") as out:
    written = 0
    while written < rows:
        target = random.randint(10, 512) - 1  # (the EOS)
        text = ""
        while True:
            longer = (text + " " + random.choice(words)).strip()
            if len(tok.encode(longer).ids) > target:
                break
            text = longer
        if len(tok.encode(text).ids) + 1 < 10:
            continue
        out.write(json.dumps({"text": text}) + "\n")
        written += 1
