#!/usr/bin/env python3
"""Checks that C++ sources call no throwing std::filesystem operation.

std::filesystem's operations without a std::error_code argument throw filesystem_error, which lmx
code does not catch: an unreadable directory or a symbolic-link loop would end the process in
std::terminate. Every call must pass an error code (its last argument, a variable declared as
std::error_code in the same file); directory iterators must advance with increment(ec), never by
range-for or ++; directory_entry queries must take the error code too.

Usage: check_filesystem_calls.py PATH...   (files, or directories searched for C++ sources)
Prints one line per offending call (file:line: what) and exits 1 when there is any.
"""
import os
import re
import sys

SOURCE_SUFFIXES = (".cpp", ".h", ".hpp", ".cc", ".cu", ".cuh")
SKIP_DIRS = {"build", "node_modules", ".git", "fixtures"}

# Operations that throw filesystem_error unless given a std::error_code.
THROWING = {
    "absolute", "canonical", "weakly_canonical", "copy", "copy_file", "copy_symlink", "create_directory",
    "create_directories", "create_hard_link", "create_symlink", "create_directory_symlink", "current_path",
    "equivalent", "exists", "file_size", "hard_link_count", "is_block_file", "is_character_file",
    "is_directory", "is_empty", "is_fifo", "is_other", "is_regular_file", "is_socket", "is_symlink",
    "last_write_time", "permissions", "proximate", "read_symlink", "relative", "remove", "remove_all",
    "rename", "resize_file", "space", "status", "symlink_status", "temp_directory_path",
    "directory_iterator", "recursive_directory_iterator",
}
# directory_entry members that throw unless given a std::error_code.
ENTRY_MEMBERS = {"is_regular_file", "is_directory", "is_symlink", "is_fifo", "is_socket", "is_other",
                 "is_block_file", "is_character_file", "file_size", "status", "symlink_status", "refresh",
                 "hard_link_count", "last_write_time"}

CALL = re.compile(r"\b(?:std::filesystem|fs)::(\w+)\s*\(")
ALIAS = re.compile(r"namespace\s+(\w+)\s*=\s*std::filesystem\s*;")
USING = re.compile(r"using\s+namespace\s+std::filesystem\s*;")
RANGE_FOR = re.compile(r"for\s*\([^;)]*:\s*(?:std::filesystem|fs)::(?:recursive_)?directory_iterator\b")
ENTRY_CALL = re.compile(r"(?:\.|->)(" + "|".join(sorted(ENTRY_MEMBERS)) + r")\(\s*\)")
ERROR_CODE_DECL = re.compile(r"std::error_code\s+(\w+)")


def strip_comments_and_strings(text):
    """The text with comments and string/char literals blanked (newlines kept, so lines still count)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            if c == '"' and i > 0 and text[i - 1] == "R":  # raw string R"delim( ... )delim"
                open_paren = text.find("(", i)
                delim = text[i + 1:open_paren]
                j = text.find(")" + delim + '"', open_paren)
                j = n if j < 0 else j + len(delim) + 2
            else:
                j = i + 1
                while j < n and text[j] != c:
                    j += 2 if text[j] == "\\" else 1
                j = min(j + 1, n)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def arguments(text, open_index):
    """Top-level arguments of the call whose '(' is at open_index (stripped strings)."""
    depth, args, start = 0, [], open_index + 1
    for j in range(open_index, len(text)):
        c = text[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:j])
                break
        elif c == "," and depth == 1:
            args.append(text[start:j])
            start = j + 1
    return [a.strip() for a in args if a.strip()]


def check_text(text):
    """(line, message) for each throwing filesystem use in C++ source `text`."""
    code = strip_comments_and_strings(text)
    error_codes = set(ERROR_CODE_DECL.findall(code))
    aliases = set(ALIAS.findall(code)) | {"fs"}
    call = re.compile(r"\b(?:std::filesystem|" + "|".join(sorted(aliases)) + r")::(\w+)\s*\(")
    problems = []

    def line_of(index):
        return code.count("\n", 0, index) + 1

    for m in USING.finditer(code):
        problems.append((line_of(m.start()), "using namespace std::filesystem hides which calls throw"))
    for m in call.finditer(code):
        name = m.group(1)
        if name not in THROWING:
            continue
        args = arguments(code, m.end() - 1)
        if name.endswith("directory_iterator") and not args:
            continue  # the end iterator
        if not args or args[-1] not in error_codes:
            problems.append((line_of(m.start()), f"{name}() without a std::error_code argument throws"))
    for m in RANGE_FOR.finditer(code):
        problems.append((line_of(m.start()), "range-for over a directory iterator advances with a throwing ++"))
    for m in ENTRY_CALL.finditer(code):
        problems.append((line_of(m.start()), f"{m.group(1)}() on a directory entry without a std::error_code throws"))
    return sorted(set(problems))


def sources(paths):
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for f in sorted(files):
                if f.endswith(SOURCE_SUFFIXES):
                    yield os.path.join(root, f)


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    failures = 0
    for path in sources(argv[1:]):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line, message in check_text(f.read()):
                print(f"{path}:{line}: {message}")
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
