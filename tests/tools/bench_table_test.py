#!/usr/bin/env python3
"""Tests of tools/bench_table.py (lmx bench JSON lines -> the benchmark table): percentages of the peak and of
the decode roofline from the fields, progress lines skipped, older lines without prefill_tflop_s shown as "—",
and malformed input rejected with a message naming the problem."""
import json
import os
import subprocess
import sys
import unittest

from tool_runner import TOOLS, run_tool



def bench_line(**fields):
    run = {"model": "/dev/shm/lmx-synth/gemma4-e4b-q4", "prompt_tokens": 2048, "prefill_tok_s": 45000.0,
           "prefill_tflop_s": 395.0, "decode_tok_s": 463.4, "weight_bytes_per_token": 2.317e9}
    run.update(fields)
    return json.dumps({k: v for k, v in run.items() if v is not None})


def run(text, *args):
    return run_tool("bench_table.py", text, ".txt", *args)


class BenchTable(unittest.TestCase):
    def test_percentages_from_the_fields(self):
        r = run("bench_gpu: synth gemma4-e4b took 24 s\n" + bench_line() + "\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = r.stdout.splitlines()
        self.assertEqual(len(rows), 3)
        # 395 / 790 = 50 %; roofline 4634e9 / 2.317e9 = 2000 tok/s, 463.4 of it = 23.2 %.
        self.assertEqual(rows[2], "| gemma4-e4b-q4 | 2048 | 45 000 | 395.0 | 50.0 % | 463.4 | 2.317 GB | 23.2 % |")

    def test_other_ceilings(self):
        r = run(bench_line(), "--peak-tflops", "500", "--read-gbs", "2317")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 79.0 % | 463.4 | 2.317 GB | 46.3 % |", r.stdout)

    def test_lines_without_flops_and_several_runs(self):
        r = run(bench_line(prefill_tflop_s=None, prompt_tokens=8192) + "\n" + bench_line(prompt_tokens=512))
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = r.stdout.splitlines()[2:]
        self.assertEqual(len(rows), 2)
        self.assertIn("| 8192 | 45 000 | — | — |", rows[0])
        self.assertIn("| 512 | 45 000 | 395.0 |", rows[1])

    def test_malformed_input(self):
        for text, message in [("", "no `lmx bench --json` lines"),
                              ("{not json\n", "not JSON"),
                              ('{"model": "m"}\n', "no prompt_tokens"),
                              (bench_line(decode_tok_s="fast"), "decode_tok_s is not a non-negative number"),
                              (bench_line(prefill_tflop_s=-1), "prefill_tflop_s is not a non-negative number")]:
            r = run(text)
            self.assertNotEqual(r.returncode, 0, text)
            self.assertIn(message, r.stderr, text)
        r = subprocess.run([sys.executable, os.path.join(TOOLS, "bench_table.py"), "/nonexistent/bench.txt"], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot read /nonexistent/bench.txt", r.stderr)
        r = run(bench_line(), "--peak-tflops", "0")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("must be positive", r.stderr)


if __name__ == "__main__":
    unittest.main()
