"""Commands write nothing outside --out unless asked: no .hypothesis/ from a passing check, no prove-out/ from prove."""

import os

from click.testing import CliRunner

from kpurgatory.conformance.cli import main


def test_check_and_prove_leave_the_working_directory_alone(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    runner = CliRunner()
    check = runner.invoke(main, ["check", "--examples", "5", "--steps", "10", "--seed", "1", "--out",
                                 str(tmp_path / "out")])
    assert check.exit_code == 0, check.output
    prove = runner.invoke(main, ["prove", "--jobs", "1", "--only", "wheel.kafka.expiration_wraps"])
    assert prove.exit_code == 0, prove.output
    assert os.listdir(cwd) == []
