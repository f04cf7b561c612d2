"""Bench JSON -> PNG bar chart: TFLOP/s per workload (groups) and backend (bars), peers
included, with the run's GEMM ceiling as a line when the JSON has one.

    python3 bench/plot.py bench/results/h100-2026-12-07-s17.json -o docs/bench-h100.png [--dtype bf16]

Needs matplotlib (pip install matplotlib).
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="bench JSON (visattn bench --json or bench/gpu_bench.py --json)")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--dtype", default="bf16", help="which dtype's results to plot")
    parser.add_argument("--title", help="chart title (default: the machine from the JSON)")
    args = parser.parse_args()

    bench = json.load(open(args.json))
    results = [r for r in bench["results"] if r["dtype"] == args.dtype]
    if not results:
        raise SystemExit(f"{args.json}: no {args.dtype} results")
    workloads = list(dict.fromkeys(r["workload"] for r in results))
    backends = list(dict.fromkeys(r["backend"] for r in results))
    rate = {(r["workload"], r["backend"]): r["tflops"] for r in results}

    width = 0.8 / len(backends)
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(workloads)), 5))
    for b, backend in enumerate(backends):
        xs = [i + (b - (len(backends) - 1) / 2) * width for i in range(len(workloads))]
        ys = [rate.get((w, backend), 0.0) for w in workloads]
        ours = not backend.startswith("peer:")
        ax.bar(xs, ys, width, label=backend, edgecolor="black" if ours else "none", linewidth=0.8)
    ceiling = bench.get("ceilings", {}).get("gemm_bf16_tflops") if args.dtype != "f32" else None
    if ceiling:
        ax.axhline(ceiling, color="gray", linestyle="--", linewidth=1)
        ax.text(len(workloads) - 0.5, ceiling, f" GEMM {ceiling:.0f}", va="bottom", ha="right", color="gray")
    ax.set_xticks(range(len(workloads)), workloads, rotation=20, ha="right")
    ax.set_ylabel(f"TFLOP/s ({args.dtype})")
    machine = bench.get("machine", {})
    ax.set_title(args.title or machine.get("gpu") or machine.get("cpu") or "visattn bench")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)


if __name__ == "__main__":
    main()
