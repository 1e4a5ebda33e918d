"""Text on its way to a terminal: the console the commands print to, and untrusted text made safe for it.

Trace ids, adapter names, an adapter's stderr and the messages built from them come from outside (traces are meant
to be shared), so they never reach the terminal as they are: `safe` shows control characters — ANSI escape
sequences, carriage returns, bells, the C1 controls some terminals obey, bidirectional overrides, and lone surrogates
(which JSON's ``\\ud800`` can carry but no terminal encoding can print) — as visible ``\\x1b``-style escapes, keeping
only newlines and tabs; `markup` also escapes Rich's markup (``[bold]``, ``[/]``), for text inserted into a
string that Rich parses.
"""

from __future__ import annotations

import os
import re
import sys

from rich.console import Console
from rich.markup import escape

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def safe(text: object) -> str:
    """``text`` with every control character but newline and tab shown as an escape."""
    return CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), str(text))


def counted(count: int, noun: str) -> str:
    """``1 step``, ``2 steps``, ``1,000 steps``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def markup(text: object) -> str:
    """`safe`, and escaped for Rich markup: the text prints as itself inside a markup string."""
    return escape(safe(text))


#: the width of output that goes to a file or a pipe (a CI log): wide enough for every table the commands print,
#: where Rich's default of 80 columns would cut their numbers short
PIPED_WIDTH = 160


def command_console() -> Console:
    """The console a command prints to: the terminal's width, or `PIPED_WIDTH` when the output is not a terminal
    and ``COLUMNS`` does not say otherwise."""
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(width=PIPED_WIDTH if piped else None)
