"""Shared by the tests of tools/*.py: runs a tool on a temporary file holding the given text."""
import os
import subprocess
import sys
import tempfile

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")


def run_tool(tool, text, suffix, *args):
    """The finished process of `python3 tools/<tool> FILE *args`, FILE holding `text` (output captured)."""
    with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, os.path.join(TOOLS, tool), f.name, *args], capture_output=True,
                              text=True)
    finally:
        os.unlink(f.name)
