"""A plain (non-editable) install gives working imports under kpurgatory and claims no generic top-level names."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_only_the_kpurgatory_namespace(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True)
    wheel = next(tmp_path.glob("kpurgatory-*.whl"))
    top_level = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"kpurgatory"}
    names = zipfile.ZipFile(wheel).namelist()
    assert "kpurgatory/specs/kpurgatory.schema.json" in names
    assert any(name.startswith("kpurgatory/conformance/scenarios/") for name in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)], check=True)
    probe = ("import kpurgatory.model, kpurgatory.conformance, kpurgatory.impl, kpurgatory.specs; "
             "print(kpurgatory.model.__file__)")
    located = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path)
    assert str(venv) in located.stdout
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    assert not (site / "model").exists() and not (site / "impl").exists()
    for command in (["scenarios", "--only", "seed.cascade"],
                    ["check", "--examples", "3", "--steps", "10", "--seed", "1", "--out", str(tmp_path / "out")]):
        run = subprocess.run([venv / "bin" / "kpurgatory", *command], capture_output=True, text=True, cwd=tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
