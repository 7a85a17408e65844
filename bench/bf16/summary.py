"""Summary for bench/bf16/run.sh: arguments are JSON rows {model, mode, run}
(run: kiln bench --json's line or bench/torch_step.py's); prints per model
and mode the median step time, its spread (fastest and slowest run), the
peak RSS, and the ratios of the --bf16 targets."""
import json
import statistics
import sys

rows = [json.loads(a) for a in sys.argv[1:]]
by = {}
for r in rows:
    by.setdefault(r["model"], {}).setdefault(r["mode"], []).append(r["run"])
for model, modes in by.items():
    med = {}
    for mode, runs in modes.items():
        t = [x["median_step_s"] for x in runs]
        med[mode] = statistics.median(t)
        rss = statistics.median(x["peak_rss_mb"] for x in runs)
        extra = ""
        if "gemm_peak_gflops" in runs[0]:
            extra = (f", GEMM peak {statistics.median(x['gemm_peak_gflops'] for x in runs):.0f} GFLOP/s, model FLOP/s "
                     f"{100 * statistics.median(x['fraction_of_gemm_peak'] for x in runs):.0f} % of it")
        print(f"{model} {mode:10s} median {med[mode]:.3f} s over {len(t)} runs (spread {min(t):.3f}-{max(t):.3f} s), "
              f"peak RSS {rss:.0f} MB{extra}")
    if "fp32" in med and "bf16" in med:
        per_round = [f["median_step_s"] / b["median_step_s"] for f, b in zip(modes["fp32"], modes["bf16"])]
        print(f"{model} kiln --bf16 vs kiln fp32: {med['fp32'] / med['bf16']:.2f}x "
              f"(per round: {', '.join(f'{x:.2f}' for x in per_round)}; target >= 1.7x)")
    if "torch-bf16" in med and "bf16" in med:
        per_round = [t["median_step_s"] / b["median_step_s"] for t, b in zip(modes["torch-bf16"], modes["bf16"])]
        print(f"{model} kiln --bf16 vs PyTorch autocast bf16: {med['torch-bf16'] / med['bf16']:.2f}x "
              f"(per round: {', '.join(f'{x:.2f}' for x in per_round)}; target >= 1.5x)")
