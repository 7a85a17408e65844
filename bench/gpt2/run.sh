#!/usr/bin/env bash
# One GPT-2 training step in kiln and in PyTorch side by side, and kiln's
# generation tokens/s with and without the key/value cache.
#   bench/gpt2/run.sh [BUILD_DIR] [-- flags for both, e.g. --layers 12 --batch 4 --seq 256 --steps 5]
set -euo pipefail
build=${1:-build}
shift || true
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
kiln_out=$("$build/bin/bench_gpt2" "$@")
echo "$kiln_out"
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "PyTorch is not installed (Debian: apt-get install python3-torch): no reference to compare with."
  exit 0
fi
torch_json=$(/usr/bin/python3 "$here/gpt2_train_step.py" $(echo "$@" | sed 's/--gen_tokens [0-9]*//'))
echo "pytorch: $torch_json"
/usr/bin/python3 - "$(echo "$kiln_out" | head -1)" "$torch_json" <<'PY'
import json, sys
k, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"step time: kiln {k['median_step_s']*1e3:.0f} ms, pytorch {t['median_step_s']*1e3:.0f} ms "
      f"-> kiln is {t['median_step_s']/k['median_step_s']:.2f}x PyTorch's throughput")
print(f"peak RSS:  kiln {k['peak_rss_mb']:.0f} MB, pytorch {t['peak_rss_mb']:.0f} MB")
PY
