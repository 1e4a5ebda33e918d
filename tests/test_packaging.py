"""Installs: a plain (non-editable) install gives working imports under kpurgatory and claims no generic top-level
names, and a seed fixes a check's run and the vector tree whatever the install (editable or not) and the working
directory. The wheel carries what its commands run besides Python (the Kafka adapter, the bench's JVM driver, the
live agent's Maven project), so that installed, away from any checkout, they run from its files and build only into
the user's cache.

The venvs made here see the packages of the environment running the tests, never the base interpreter's: the
README's test command runs inside a virtualenv, whose base interpreter may lack every dependency."""

import os
import re
import shlex
import shutil
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
    ours = [entry for entry in sys.path if entry.endswith(("site-packages", "dist-packages")) and Path(entry).is_dir()]
    (site_packages(python) / "outer-environment.pth").write_text("".join(f"{entry}\n" for entry in ours))
    return python


def site_packages(python: Path) -> Path:
    return Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())


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
    site = site_packages(python)
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


def tracked(folder: str) -> set[str]:
    """The files git tracks under the checkout's ``folder``, relative to it."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", folder], cwd=ROOT, capture_output=True, check=True).stdout
    return {Path(name).relative_to(folder).as_posix() for name in listed.decode().split("\0") if name}


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed in a venv outside the checkout; the venv."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    python = venv_with_our_dependencies(venv)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    return venv


def run_outside(venv: Path, tmp_path: Path, *command: str, cwd: Path | None = None,
                **variables: str) -> subprocess.CompletedProcess:
    """``command`` with the venv first on PATH and ``variables`` set, from a folder outside the checkout (or
    ``cwd``), building into a cache of the test's own."""
    where = cwd or tmp_path / "cwd"
    where.mkdir(exist_ok=True)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"} | variables
    env |= {"PATH": f"{venv / 'bin'}:{env['PATH']}", "KPURGATORY_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    return subprocess.run(command, capture_output=True, text=True, cwd=where, env=env, timeout=900)


def package_files(venv: Path) -> set[str]:
    """The installed package's files, bytecode aside."""
    package = site_packages(venv / "bin" / "python") / "kpurgatory"
    return {path.relative_to(package).as_posix() for path in package.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts}


@pytest.mark.slow
def test_the_wheel_carries_the_kafka_adapter_and_the_live_project_and_no_build_output(wheel, installed, tmp_path):
    names = zipfile.ZipFile(wheel).namelist()

    def shipped(folder: str) -> set[str]:
        prefix = f"kpurgatory/{folder}/"
        return {name.removeprefix(prefix) for name in names if name.startswith(prefix)}

    # all of the adapter and the bench's driver but the stand-ins for Kafka's classes, which only the tests compile
    assert shipped("conformance/kafka") == {path for path in tracked("conformance/kafka")
                                            if not path.startswith("standins/")}
    assert shipped("conformance/live") == tracked("conformance/live") - {".gitignore"}
    assert [name for name in names if re.search(r"node_modules/|target/|\.class$|standins/|drivers/", name)] == []
    located = run_outside(installed, tmp_path, "python", "-c",
                          "from kpurgatory.conformance.adapters.kafka import ADAPTER; print(ADAPTER)")
    assert located.stdout.startswith(str(installed)), located.stdout + located.stderr
    helped = run_outside(installed, tmp_path, "kpurgatory", "record-broker", "--help")
    assert helped.returncode == 0 and "Record a real Kafka broker's purgatories" in helped.stdout, helped.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mvn") is None or shutil.which("javac") is None,
                    reason="resolving and compiling a Kafka release needs Maven (mvn) and a JDK (javac)")
def test_an_installed_wheel_checks_and_benchmarks_a_kafka_release(installed, tmp_path):
    """--kafka resolves the release through the pom the wheel carries and compiles the adapter and the bench's driver
    from the sources it carries into the cache, writing nothing beside them (site-packages may be read-only)."""
    before = package_files(installed)
    scenarios = run_outside(installed, tmp_path, "kpurgatory", "scenarios", "--kafka", "4.4.0")
    assert scenarios.returncode == 0, scenarios.stdout + scenarios.stderr
    assert re.search(r"^\d+ passed, 0 failed", scenarios.stdout, re.MULTILINE), scenarios.stdout
    check = run_outside(installed, tmp_path, "kpurgatory", "check", "--kafka", "4.4.0", "--examples", "20", "--steps",
                        "15", "--seed", "1")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "checking Apache Kafka 4.4.0" in check.stdout and "PASS seed 1" in check.stdout
    bench = run_outside(installed, tmp_path, "kpurgatory", "bench", "--kafka", "4.4.0", "--scale", "0.01")
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert re.search(r"│ kafka 4\.4\.0 \(JVM\) *│ *[\d,]+ *│", bench.stdout), bench.stdout
    assert {path.name for path in (tmp_path / "cache").iterdir()} >= {"kafka-releases", "kafka-adapter", "kafka-bench"}
    assert package_files(installed) == before


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("go") is None, reason="needs the go command")
def test_the_go_driver_passes_an_installed_wheels_vectors_through_its_stdio_adapter(installed, tmp_path):
    vectors = tmp_path / "vectors"
    written = run_outside(installed, tmp_path, "kpurgatory", "vectors", str(vectors), "--quick")
    assert written.returncode == 0, written.stdout + written.stderr
    assert re.search(r"^\d+ cases for current Kafka, [\d,]+ bytes", written.stdout, re.MULTILINE), written.stdout
    assert (vectors / "index.json").is_file()
    adapter = shlex.join([str(installed / "bin" / "python"), "-m", "kpurgatory.conformance.adapters.stdio",
                          "kpurgatory.conformance.adapters.builtin:factory"])
    sys.path.insert(0, str(ROOT / "tests" / "examples"))  # test_driver_go.py: a user's module using the driver
    from test_driver_go import user_module

    driven = run_outside(installed, tmp_path, "go", "test", "-count=1", ".", cwd=user_module(tmp_path),
                         KPURGATORY_VECTORS=str(vectors), KPURGATORY_ADAPTER=adapter)
    assert driven.returncode == 0, driven.stdout + driven.stderr
    assert re.match(r"ok\s+\S+\s+[\d.]+s$", driven.stdout.strip()), driven.stdout  # not "[no test files]"
