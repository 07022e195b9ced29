#!/usr/bin/env python3
"""Turns `lmx bench --json` lines (scripts/bench_gpu.sh's output) into the markdown table docs/benchmarks.md
records: per run the model (its directory's name), prompt length, prefill tok/s and TFLOP/s (lmx bench's
prefill_tflop_s: matmul and attention FLOPs counted from the config) as a share of a bf16 tensor-core peak, and
decode tok/s as a share of its roofline (weight bytes per token / read bandwidth). Lines that are not JSON objects
(bench_gpu.sh's progress lines) are skipped; a JSON line without a field the table needs is an error naming it.

Usage: bench_table.py [FILE...] [--peak-tflops 790] [--read-gbs 4634]   (no FILE: stdin)
"""
import argparse
import json
import os
import sys

NEEDED = ("model", "prompt_tokens", "prefill_tok_s", "decode_tok_s", "weight_bytes_per_token")


def read_runs(lines, source):
    runs = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            run = json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"bench_table: {source}:{number}: not JSON ({e.msg})")
        if not isinstance(run, dict):
            sys.exit(f"bench_table: {source}:{number}: not a JSON object")
        missing = [key for key in NEEDED if key not in run]
        if missing:
            sys.exit(f"bench_table: {source}:{number}: no {', '.join(missing)} (not an `lmx bench --json` line?)")
        for key in NEEDED[1:] + ("prefill_tflop_s",):
            if key in run and (not isinstance(run[key], (int, float)) or run[key] < 0):
                sys.exit(f"bench_table: {source}:{number}: {key} is not a non-negative number")
        runs.append(run)
    return runs


def spaced(value, decimals):
    """value with `decimals` decimals, thousands grouped by spaces: 42766.2 -> "42 766"."""
    return f"{value:,.{decimals}f}".replace(",", " ")


def table(runs, peak_tflops, read_gbs):
    rows = ["| model | prompt | prefill tok/s | prefill TFLOP/s | % of bf16 peak | decode tok/s | weights / token |"
            " % of decode roofline |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in runs:
        tflops = run.get("prefill_tflop_s")
        roofline = read_gbs * 1e9 / run["weight_bytes_per_token"] if run["weight_bytes_per_token"] > 0 else None
        rows.append("| {} | {} | {} | {} | {} | {} | {:.3f} GB | {} |".format(
            os.path.basename(str(run["model"]).rstrip("/")), run["prompt_tokens"], spaced(run["prefill_tok_s"], 0),
            "—" if tflops is None else f"{tflops:.1f}",
            "—" if tflops is None else f"{100 * tflops / peak_tflops:.1f} %",
            spaced(run["decode_tok_s"], 1), run["weight_bytes_per_token"] / 1e9,
            "—" if roofline is None else f"{100 * run['decode_tok_s'] / roofline:.1f} %"))
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--peak-tflops", type=float, default=790.0, help="bf16 tensor-core peak (H200: 790)")
    parser.add_argument("--read-gbs", type=float, default=4634.0, help="HBM read bandwidth in GB/s (H200: 4634)")
    args = parser.parse_args()
    if args.peak_tflops <= 0 or args.read_gbs <= 0:
        sys.exit("bench_table: --peak-tflops and --read-gbs must be positive")
    runs = []
    if not args.files:
        runs = read_runs(sys.stdin.read().splitlines(), "stdin")
    for path in args.files:
        try:
            with open(path) as f:
                runs += read_runs(f.read().splitlines(), path)
        except OSError as e:
            sys.exit(f"bench_table: cannot read {path}: {e.strerror}")
    if not runs:
        sys.exit("bench_table: no `lmx bench --json` lines in the input")
    print(table(runs, args.peak_tflops, args.read_gbs))


if __name__ == "__main__":
    main()
