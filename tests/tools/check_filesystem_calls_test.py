#!/usr/bin/env python3
"""Tests of tools/check_filesystem_calls.py: throwing std::filesystem calls are reported with their line,
error-code forms, comments and strings are not."""
import os
import sys
import unittest

from tool_runner import TOOLS, run_tool

sys.path.insert(0, TOOLS)
import check_filesystem_calls as lint  # noqa: E402


def problems(code):
    return lint.check_text(code)


class CheckFilesystemCalls(unittest.TestCase):
    def test_throwing_forms_are_reported(self):
        code = ("#include <filesystem>\nnamespace fs = std::filesystem;\nvoid f() {\n"
                "  fs::exists(\"a\");\n  std::filesystem::remove_all(p);\n  fs::copy(a, b, fs::copy_options::recursive);\n}\n")
        self.assertEqual([line for line, _ in problems(code)], [4, 5, 6])

    def test_error_code_forms_pass(self):
        code = ("std::error_code ec;\nstd::filesystem::exists(p, ec);\nfs::copy(a, b, fs::copy_options::recursive, ec);\n"
                "for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {\n"
                "  if (it->is_regular_file(ec)) {}\n}\n")
        self.assertEqual(problems(code), [])

    def test_an_argument_that_is_not_an_error_code_is_reported(self):
        self.assertEqual(len(problems("int ec;\nstd::filesystem::exists(p, ec);\n")), 1)

    def test_iterators_and_entry_members(self):
        code = ("std::error_code ec;\nfor (auto& e : fs::directory_iterator(d, ec)) {\n  e.is_regular_file();\n}\n"
                "using namespace std::filesystem;\n")
        messages = [m for _, m in problems(code)]
        self.assertEqual(len(messages), 3, messages)

    def test_aliases_are_followed(self):
        self.assertEqual(len(problems("namespace stdfs = std::filesystem;\nstdfs::remove(p);\n")), 1)

    def test_comments_and_strings_are_ignored(self):
        code = '// fs::exists(p)\n/* std::filesystem::remove(p) */\nconst char* s = "fs::exists(p)";\nauto r = R"(fs::copy(a))";\n'
        self.assertEqual(problems(code), [])

    def test_command_line_exit_status(self):
        bad = run_tool("check_filesystem_calls.py", "void f() { std::filesystem::exists(p); }\n", ".cpp")
        self.assertEqual(bad.returncode, 1)
        self.assertIn(":1: exists()", bad.stdout)
        good = run_tool("check_filesystem_calls.py", "void f() {}\n", ".cpp")
        self.assertEqual(good.returncode, 0, good.stdout)


if __name__ == "__main__":
    unittest.main()
