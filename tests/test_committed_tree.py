"""Committed files name no machine: no path of the checkout, of the home directory or of a test's temporary folder
that a command run here would write (the matrix's data and page, traces, READMEs' examples). A command that writes
a committed output writes relative or symbolic names; this reads every text file git tracks."""

import getpass
import re
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine_paths(root: Path) -> re.Pattern:
    """This machine's names as a written path would carry them: the checkout ``root``, the home directory (whose
    Maven repository and caches commands resolve into) and pytest's temporary folders."""
    names = sorted({str(root), str(Path.home()), str(Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}")}
                   - {"/"}, key=len, reverse=True)
    return re.compile("|".join(re.escape(name) + r"(?=/)" for name in names))


def machine_names(paths: list[Path], root: Path = ROOT) -> list[str]:
    """``path:line: text`` (relative to the checkout ``root``) of every line of ``paths`` (text files) that names
    this machine."""
    pattern = machine_paths(root)
    found = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError):
            continue  # a binary file (an image) or a submodule
        found += [f"{path.relative_to(root)}:{number}: {line.strip()[:160]}"
                  for number, line in enumerate(text.splitlines(), start=1) if pattern.search(line)]
    return found


def tracked() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_committed_file_names_this_machine():
    assert machine_names(tracked()) == []


def test_a_planted_path_of_this_machine_is_found(tmp_path):
    planted = tmp_path / "matrix.json"
    planted.write_text('{"target": "kafka 4.4.0"}\n'
                       f'{{"jar": "{Path.home()}/.m2/repository/org/apache/kafka/kafka-server-common-4.4.0.jar"}}\n')
    trace = tmp_path / "trace.jsonl"
    trace.write_text(f'{{"path": "{tmp_path}/out/check-timer-1.jsonl"}}\n')
    assert machine_names([planted, trace], root=tmp_path) == [
        f"matrix.json:2: {planted.read_text().splitlines()[1]}",
        f"trace.jsonl:1: {trace.read_text().strip()}"]
