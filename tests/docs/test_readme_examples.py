"""The README's worked examples are what their commands print now (`readme_examples.py`)."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def test_the_readmes_examples_are_what_their_commands_print():
    done = subprocess.run([sys.executable, "-m", "cogapp", "--check", "--diff", "-I", str(HERE), "README.md"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (f"a worked example in README.md is stale; regenerate it with "
                                  f"`cog -r -I tests/docs README.md`:\n{done.stdout}{done.stderr}")
