#!/usr/bin/env python3
"""Tests of tools/kernel_times.py (the ncu CSV summariser behind scripts/profile_gpu.sh): a well-formed
CSV is split into steps at the argmax kernel and averaged; malformed inputs exit non-zero with a message
naming the problem."""
import unittest

from tool_runner import run_tool

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(i, name, grid, unit, value):
    return (f'"{i}","1","lmx","h","{name}","1","7","(256, 1, 1)","{grid}","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"')


GEMV = "void lmx::cuda::linear::q4_gemv_kernel<__nv_bfloat16>(lmx::cuda::linear::Problem)"
NORM = "void lmx::cuda::<unnamed>::residual_norm_kernel<float4>(float4 *, const float4 *, int)"
ARGMAX = "void lmx::cuda::<unnamed>::argmax_rows_kernel<true>(const float *, long, int, int *)"


def run(text, *args):
    return run_tool("kernel_times.py", text, ".csv", *args)


class KernelTimes(unittest.TestCase):
    def test_averages_decode_steps(self):
        lines = ["==PROF== Connected to process 1", HEADER,
                 # prefill step
                 row(0, GEMV, "(1, 80, 1)", "usecond", "50.0"), row(1, ARGMAX, "(1, 1, 1)", "usecond", "2"),
                 # two decode steps: 4 + 1 + 2 µs and 6 + 1 + 2 µs (one duration in ns with a thousands comma)
                 row(2, GEMV, "(1, 80, 1)", "usecond", "4.0"), row(3, NORM, "(1, 1, 1)", "usecond", "1"),
                 row(4, ARGMAX, "(1, 1, 1)", "nsecond", "2,000"),
                 row(5, GEMV, "(1, 80, 1)", "usecond", "6.0"), row(6, NORM, "(1, 1, 1)", "usecond", "1"),
                 row(7, ARGMAX, "(1, 1, 1)", "usecond", "2")]
        result = run("\n".join(lines) + "\n", "--steps", "2")
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertIn("decode steps averaged: 2; kernels per step: 3; kernel time per step: 8.0 µs", out)
        self.assertIn("prefill step: 52.0 µs, 2 kernels", out)
        gemv = next(line for line in out.splitlines() if line.startswith("q4_gemv_kernel<__nv_bfloat16> (1,80,1)"))
        self.assertEqual(gemv.split()[-3:], ["1", "5.0", "62.5%"])

    def test_prefill_table(self):
        lines = [HEADER, row(0, GEMV, "(1, 80, 1)", "usecond", "50.0"), row(1, NORM, "(1, 1, 1)", "usecond", "30"),
                 row(2, ARGMAX, "(1, 1, 1)", "usecond", "20"),
                 row(3, GEMV, "(1, 80, 1)", "usecond", "4.0"), row(4, ARGMAX, "(1, 1, 1)", "usecond", "2")]
        result = run("\n".join(lines) + "\n", "--prefill")
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertIn("decode steps averaged: 1; kernels per step: 2; kernel time per step: 6.0 µs", out)
        self.assertIn("prefill step: 100.0 µs, 3 kernels", out)
        self.assertIn("table: the prefill step", out)
        gemv = next(line for line in out.splitlines() if line.startswith("q4_gemv_kernel<__nv_bfloat16> (1,80,1)"))
        self.assertEqual(gemv.split()[-3:], ["1", "50.0", "50.0%"])

    def expect_error(self, csv_text, message):
        result = run(csv_text)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(message, result.stderr)

    def test_missing_header(self):
        self.expect_error(row(0, GEMV, "(1, 1, 1)", "usecond", "1") + "\n", "no ncu CSV header")

    def test_unknown_unit(self):
        self.expect_error("\n".join([HEADER, row(0, GEMV, "(1, 1, 1)", "furlong", "1")]) + "\n",
                          "unknown duration unit 'furlong'")

    def test_too_few_steps(self):
        self.expect_error("\n".join([HEADER, row(0, GEMV, "(1, 1, 1)", "usecond", "1"),
                                     row(1, ARGMAX, "(1, 1, 1)", "usecond", "1")]) + "\n",
                          "found 1 forward steps")

    def test_bad_number(self):
        self.expect_error("\n".join([HEADER, row(0, GEMV, "(1, 1, 1)", "usecond", "n/a")]) + "\n",
                          "bad duration")

if __name__ == "__main__":
    unittest.main()
