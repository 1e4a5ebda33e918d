"""The README's worked examples, written by running their commands: each block between cog's markers in README.md is
a command and what it prints now, so the text cannot drift from the product. Regenerate them with

    cog -r -I tests/docs README.md

and `test_readme_examples.py` fails when a block is stale (`cog --check`)."""

import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import cog

ROOT = Path(__file__).resolve().parents[2]
#: what the clock decides, which no seed fixes
TIMINGS = (re.compile(r"after \d+(?:\.\d+)? s"), "after … s")
WIDTH = 116  # the README's code blocks stay within its 120 columns


def example(command: str, *, start: str | None = None, pythonpath: str | None = None) -> None:
    """``command`` as a user types it, run in an empty folder, then its output (stdout and stderr, as a terminal
    shows them) from the first line containing ``start``; ``pythonpath`` is a folder of this checkout to import
    from, shown as typed from its top."""
    env = dict(os.environ, COLUMNS=str(WIDTH), NO_COLOR="1", TERM="dumb")
    env.pop("FORCE_COLOR", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(ROOT / pythonpath)
    with tempfile.TemporaryDirectory(prefix="kpurgatory-readme-") as folder:
        done = subprocess.run(shlex.split(command), cwd=folder, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=600)
    lines = done.stdout.splitlines()
    if start is not None:
        first = next(index for index, line in enumerate(lines) if start in line)
        lines = ["…", *lines[first:]]
    typed = f"PYTHONPATH={pythonpath} {command}" if pythonpath is not None else command
    cog.outl("```")
    cog.outl(f"$ {typed}")
    for line in lines:
        cog.outl(TIMINGS[0].sub(TIMINGS[1], line.rstrip()))
    cog.outl("```")
