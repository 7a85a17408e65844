"""Side-by-side ratios for bench/*/run.sh: arguments are kiln, PyTorch JSON
lines in pairs (one pair a round); prints each round and, for several, the
medians."""
import json
import statistics
import sys

rows = [json.loads(a) for a in sys.argv[1:]]
pairs = list(zip(rows[0::2], rows[1::2]))
for i, (k, t) in enumerate(pairs, 1):
    label = f"round {i}: " if len(pairs) > 1 else ""
    print(f"{label}step time: kiln {k['median_step_s'] * 1e3:.1f} ms, pytorch {t['median_step_s'] * 1e3:.1f} ms "
          f"-> kiln is {t['median_step_s'] / k['median_step_s']:.2f}x PyTorch's throughput")
    print(f"{label}peak RSS:  kiln {k['peak_rss_mb']:.0f} MB, pytorch {t['peak_rss_mb']:.0f} MB")
if len(pairs) > 1:
    ratios = [t['median_step_s'] / k['median_step_s'] for k, t in pairs]
    print(f"median of {len(pairs)} rounds: kiln {statistics.median(k['median_step_s'] for k, _ in pairs) * 1e3:.1f} ms, "
          f"pytorch {statistics.median(t['median_step_s'] for _, t in pairs) * 1e3:.1f} ms, "
          f"ratio {statistics.median(ratios):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
