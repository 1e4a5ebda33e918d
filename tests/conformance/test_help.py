"""`kpurgatory --help` lists every command once, under the section of its task, each with a whole one-sentence
summary on one line of an 80-column terminal."""

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
