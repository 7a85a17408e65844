#!/usr/bin/env bash
# One BERT training step (forward, backward, AdamW; fp32; CPU) in kiln and in
# PyTorch, side by side in one run, with the ratio.
#   bench/bert/run.sh [BUILD_DIR] [-- flags for both, e.g. --layers 12 --batch 8 --seq 128 --steps 10]
set -euo pipefail
build=${1:-build}
shift || true
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
# Both sides use the same thread count (PyTorch would default to physical cores).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
kiln_json=$("$build/bin/bench_bert_step" "$@")
echo "kiln:    $kiln_json"
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "PyTorch is not installed (Debian: apt-get install python3-torch): no reference to compare with."
  exit 0
fi
torch_json=$(/usr/bin/python3 "$here/bert_train_step.py" "$@")
echo "pytorch: $torch_json"
/usr/bin/python3 - "$kiln_json" "$torch_json" <<'PY'
import json, sys
k, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"step time: kiln {k['median_step_s']*1e3:.1f} ms, pytorch {t['median_step_s']*1e3:.1f} ms "
      f"-> kiln is {t['median_step_s']/k['median_step_s']:.2f}x PyTorch's throughput")
print(f"peak RSS:  kiln {k['peak_rss_mb']:.0f} MB, pytorch {t['peak_rss_mb']:.0f} MB")
PY
