#!/usr/bin/env bash
# Tokenizer benchmark, kiln next to Hugging Face's implementations, same run.
#   bench/tokenizers/run_bench.sh BUILD_DIR NODE_MODULES_PARENT [MB]
# NODE_MODULES_PARENT: a scratch dir outside the repo where
#   npm install tokenizers @huggingface/tokenizers   was run (e.g. /tmp/tokgold).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?build dir}
nodedir=${2:?dir holding node_modules}
mb=${3:-4}
shared=$(cd "$here/../../../shared/tokenizers" && pwd)
corpus=$(mktemp --suffix=.txt)
trap 'rm -f "$corpus"' EXIT
export NODE_PATH="$nodedir/node_modules"
cp "$here/bench_tokenizers.mjs" "$nodedir/bench_tokenizers.mjs"  # ESM resolves packages from the script dir
node "$nodedir/bench_tokenizers.mjs" make-corpus "$corpus" "$mb" "$here/../../tests/goldens/tokenizers/corpus.txt"
models=("$shared/bert-base-uncased" "$shared/gpt2")
"$build/bin/bench_tokenizers" $(printf -- '--model %s ' "${models[@]}") --corpus "$corpus"
TOKENIZERS_PARALLELISM=false node "$nodedir/bench_tokenizers.mjs" rust "$corpus" "${models[@]}"
node "$nodedir/bench_tokenizers.mjs" rust "$corpus" "${models[@]}"
node "$nodedir/bench_tokenizers.mjs" js "$corpus" "${models[@]}"
