"""`kpurgatory --help` lists every command once, under the section of its task, each with a whole one-sentence
summary on one line of an 80-column terminal, without importing any (nor their optional dependencies); a command whose
optional dependency is missing says what to install."""

import subprocess
import sys

from click.testing import CliRunner

from kpurgatory.conformance.cli import SECTIONS, SUBCOMMANDS, main


def test_every_command_is_listed_once_under_its_section_with_a_whole_summary():
    result = CliRunner().invoke(main, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert all(len(line) <= 80 for line in lines)
    listed: dict[str, list[str]] = {}
    section = None
    for line in lines:
        if line.rstrip(":") in SECTIONS:
            section = line.rstrip(":")
        elif section is not None and line.startswith("  ") and line.split()[0] in SUBCOMMANDS:
            name, summary = line.split(maxsplit=1)
            listed.setdefault(name, []).append(section)
            assert summary.endswith(".") and not summary.endswith("..."), line  # whole, not cut by click
        elif line.startswith("  Exit codes"):
            section = None
        elif line.strip():
            assert section is None, f"a summary that does not fit its line: {line!r}"
    assert listed == {name: [next(title for title, commands in SECTIONS.items() if name in commands)]
                      for name in SUBCOMMANDS}


def test_the_list_imports_no_command():
    """So it shows whatever extras are installed: a plain install lacks PySpark and pyarrow."""
    listing = ("import sys; from kpurgatory.conformance.cli import SUBCOMMANDS, main\n"
               "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
               "print(sorted(m for m in (sub.target.split(':')[0] for sub in SUBCOMMANDS.values()) if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "[]", done.stdout[-2000:] + done.stderr[-2000:]


def test_a_command_whose_extra_is_missing_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "kpurgatory.conformance.spark.record", raising=False)
    result = CliRunner().invoke(main, ["record", "--help"])
    assert result.exit_code == 3
    assert result.output.strip() == ("Error: kpurgatory record needs pyarrow, which is not installed: pip install "
                                     "'kpurgatory[all]' (or the extra that has it, pyproject.toml)")
