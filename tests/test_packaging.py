"""Installs: a plain (non-editable) install gives working imports under kpurgatory and claims no generic top-level
names, and a seed fixes a check's run and the vector tree whatever the install (editable or not) and the working
directory.

The venvs made here see the packages of the environment running the tests, never the base interpreter's: the
README's test command runs inside a virtualenv, whose base interpreter may lack every dependency."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def venv_with_our_dependencies(path: Path) -> Path:
    """A venv at ``path`` that sees this environment's packages but not its kpurgatory; its python. A path file
    lists this environment's site directories: their own .pth files (an editable kpurgatory's import hook) are not
    run from there."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    python = path / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    ours = [entry for entry in sys.path if entry.endswith(("site-packages", "dist-packages")) and Path(entry).is_dir()]
    (site / "outer-environment.pth").write_text("".join(f"{entry}\n" for entry in ours))
    return python


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(folder), str(ROOT)], check=True)
    return next(folder.glob("kpurgatory-*.whl"))


@pytest.mark.slow
def test_wheel_installs_only_the_kpurgatory_namespace(wheel, tmp_path):
    top_level = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"kpurgatory"}
    names = zipfile.ZipFile(wheel).namelist()
    assert "kpurgatory/specs/kpurgatory.schema.json" in names
    assert any(name.startswith("kpurgatory/conformance/scenarios/") for name in names)

    venv = tmp_path / "venv"
    python = venv_with_our_dependencies(venv)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
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


@pytest.mark.slow
def test_a_seed_gives_the_same_outputs_in_an_editable_and_a_regular_install(wheel, tmp_path):
    """The same `kpurgatory check --seed` and `kpurgatory vectors --seed` in two installs and two working
    directories: the same examples, steps and distinct states, the same vector tree byte for byte, and nothing
    written to the working directory."""
    runs, trees = [], []
    for name, install in (("editable", ["-e", str(ROOT)]), ("regular", [str(wheel)])):
        venv = tmp_path / name
        python = venv_with_our_dependencies(venv)
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", *install], check=True)
        where = tmp_path / f"cwd-{name}"
        where.mkdir()

        def kpurgatory(*args: str) -> subprocess.CompletedProcess:
            done = subprocess.run([venv / "bin" / "kpurgatory", *args], capture_output=True, text=True, cwd=where,
                                  env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"})
            assert done.returncode == 0, done.stdout + done.stderr
            return done

        run = kpurgatory("check", "--profile", "timer", "--seed", "5", "--examples", "60",
                         "--out", str(tmp_path / "out"))
        row = re.search(r"timer\s*│\s*pass\s*│\s*(\d+)\s*│\s*(\d+)\s*│\s*(\d+)", run.stdout)
        assert row, run.stdout
        runs.append(row.groups())
        tree = tmp_path / f"vectors-{name}"
        kpurgatory("vectors", str(tree), "--quick", "--seed", "0")
        trees.append({path.relative_to(tree).as_posix(): path.read_bytes() for path in sorted(tree.rglob("*"))
                      if path.is_file()})
        assert list(where.iterdir()) == []  # no .hypothesis/ or anything else
    assert runs[0] == runs[1], runs
    assert trees[0] == trees[1] and len(trees[0]) > 50
