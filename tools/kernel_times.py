#!/usr/bin/env python3
"""Summarises an Nsight Compute CSV of kernel durations (ncu --metrics gpu__time_duration.sum --csv)
from an `lmx bench --device cuda` run: splits the kernel sequence into forward steps (each ends with
the argmax kernel, or its merge kernel), averages the last decode steps, and prints per kernel name and grid the launches
per step, µs per step and share of the step's kernel time, then the same per kernel name. Used by scripts/profile_gpu.sh.
With --prefill the table is the first forward step's instead (the prompt's prefill; lmx bench's untimed
warm-up prefill when it warms up, which runs the same kernels).

Usage: kernel_times.py FILE.csv [--steps N] [--prefill]   (N = decode steps to average, from the end; default 3)
"""
import argparse
import collections
import csv
import re
import sys

UNIT_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
              "second": 1e6, "s": 1e6}


def read_kernels(path):
    """(name, µs) per profiled kernel, in launch order."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"kernel_times: no ncu CSV header in {path}")
    kernels = []
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "nsecond")
        if unit not in UNIT_TO_US:
            sys.exit(f"kernel_times: unknown duration unit {unit!r}")
        try:
            value = float(row["Metric Value"].replace(",", ""))
        except ValueError:
            sys.exit(f"kernel_times: bad duration {row['Metric Value']!r} for kernel {row.get('Kernel Name')!r}")
        grid = row.get("Grid Size", "").replace(" ", "")
        kernels.append((f'{short_name(row["Kernel Name"])} {grid}', value * UNIT_TO_US[unit]))
    return kernels


def short_name(name):
    """Kernel name without namespaces, argument lists and long template arguments."""
    name = re.sub(r"\(.*\)$", "", name.strip())
    name = re.sub(r"<unnamed>::|\(anonymous namespace\)::", "", name)
    base = name.split("<", 1)[0].split("::")[-1]
    args = name[len(name.split("<", 1)[0]):]
    args = re.sub(r"lmx::cuda::(linear::)?", "", args)
    return base + (args if len(args) <= 60 else args[:57] + "...")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prefill", action="store_true", help="summarise the first (prefill) step")
    args = parser.parse_args()
    kernels = read_kernels(args.csv)
    steps, current = [], []
    for name, us in kernels:
        current.append((name, us))
        if name.startswith(("argmax_rows", "argmax_merge")):  # a step's last kernel (wide rows: parts, then merge)
            steps.append(current)
            current = []
    if len(steps) < 2:
        sys.exit(f"kernel_times: found {len(steps)} forward steps (need a prefill and a decode step)")
    decode = steps[1:][-args.steps:]
    chosen = [steps[0]] if args.prefill else decode
    per_name = collections.defaultdict(lambda: [0, 0.0])
    for step in chosen:
        for name, us in step:
            per_name[name][0] += 1
            per_name[name][1] += us
    n = len(chosen)
    total = sum(us for _, us in per_name.values()) / n
    print(f"decode steps averaged: {len(decode)}; kernels per step: "
          f"{sum(len(s) for s in decode) / len(decode):.0f}; kernel time per step: "
          f"{sum(us for s in decode for _, us in s) / len(decode):.1f} µs (prefill step: "
          f"{sum(us for _, us in steps[0]):.1f} µs, {len(steps[0])} kernels)")
    if args.prefill:
        print("table: the prefill step")
    by_base = collections.defaultdict(lambda: [0, 0.0])
    for name, (count, us) in per_name.items():
        by_base[name.rsplit(" ", 1)[0]][0] += count
        by_base[name.rsplit(" ", 1)[0]][1] += us
    for table in (per_name, by_base):
        print(f"\n{'kernel':<84} {'per step':>8} {'µs/step':>9} {'share':>6}")
        for name, (count, us) in sorted(table.items(), key=lambda kv: -kv[1][1]):
            print(f"{name:<84} {count / n:>8.0f} {us / n:>9.1f} {100 * us / n / total:>5.1f}%")


if __name__ == "__main__":
    main()
