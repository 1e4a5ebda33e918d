"""A pytest plugin (registered through the ``pytest11`` entry point) for implementers who want kpurgatory inside
their own test run:

    def test_my_timer_passes_the_corpus(kpurgatory_scenarios, kpurgatory_replay):
        for trace in kpurgatory_scenarios.values():
            if trace.header.profile == "timer":
                assert kpurgatory_replay(trace, MyAdapter()).ok

    def test_my_timer_passes_the_check(kpurgatory_check):
        kpurgatory_check(MyAdapter, profile="timer")   # fails with the counterexample's step table and path

    def test_my_purgatory_is_thread_safe(kpurgatory_check_concurrently):
        kpurgatory_check_concurrently(MyAdapter, threads=4)   # fails with the violations and the history

    def test_my_timer_passes_the_vectors(kpurgatory_vector):   # one test per case of a vector tree
        kpurgatory_vector(MyAdapter, level="exact")   # skips what MyAdapter cannot run; fails naming the case

The vectors mode is the Python driver of specs/vectors.md: the tree is ``--kpurgatory-vectors DIR`` or
$KPURGATORY_VECTORS, failing cases write their observed trace to $KPURGATORY_VECTORS_OUT (default: the test's
tmp_path), $KPURGATORY_VECTORS_CALL_TIMEOUT_MS bounds each call, and $KPURGATORY_VECTORS_RESULTS, if set, receives the
results file at the end of the session. A session in which no case ran fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import attrs
import pytest

from kpurgatory.conformance.check.sequential import CheckResult, run_check
from kpurgatory.conformance.check.concurrent import ConcurrentResult, render, run_concurrent_check
from kpurgatory.conformance.traces.replay import ReplayReport, replay, scenarios
from kpurgatory.conformance.adapters.sut import SystemUnderTest
from kpurgatory.conformance.traces.codec import Trace
from kpurgatory.conformance.tools import vectors

RESULTS = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("kpurgatory").addoption(
        "--kpurgatory-vectors", metavar="DIR", help=f"The vector tree the kpurgatory_vector fixture runs (default: "
                                                   f"${vectors.ENV_TREE}).")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test asking for ``kpurgatory_vector`` runs once per case of the tree, named by the case's id."""
    if "kpurgatory_vector" not in metafunc.fixturenames:
        return
    root = metafunc.config.getoption("kpurgatory_vectors") or os.environ.get(vectors.ENV_TREE)
    if not root:
        raise pytest.UsageError(f"kpurgatory_vector: {vectors.NO_TREE}, or pass --kpurgatory-vectors DIR")
    try:
        index = vectors.read_index(Path(root))
        vectors.call_timeout_s()
    except ValueError as error:
        raise pytest.UsageError(f"kpurgatory_vector: {error}") from None
    if not index["cases"]:
        raise pytest.UsageError(f"kpurgatory_vector: the vector tree {root} has no case, so none can run; make one "
                                f"with `kpurgatory vectors DIR`")
    tree = Tree(Path(root), index.get("kafka_version"), vectors.families_of(index))
    metafunc.parametrize("kpurgatory_vector", [(tree, entry) for entry in index["cases"]], indirect=True,
                         ids=[entry["id"] for entry in index["cases"]])


@attrs.frozen
class Tree:
    """The vector tree a session runs: where it is, the release it is for and its failure families."""

    root: Path
    kafka_version: str | None
    families: dict[str, tuple[str, ...]]


@pytest.fixture
def kpurgatory_vector(request: pytest.FixtureRequest, tmp_path: Path):
    """``run(factory, level="exact")``: run this test's case of the vector tree on a system ``factory`` makes,
    judged from the case alone (specs/vectors.md). Each call may take $KPURGATORY_VECTORS_CALL_TIMEOUT_MS (an
    in-process system runs in a process of its own, killed when a call hangs). A case the system cannot run is
    skipped with the reason; a failure fails the test with the case path, the step, expected vs observed, the
    observed trace and the command that replays it."""
    tree, entry = request.param

    def run(factory: Callable[[], SystemUnderTest], level: str = "exact") -> vectors.CaseResult:
        system = vectors.bounded(factory)()
        try:
            hello = system.hello()
            out_dir = Path(os.environ.get(vectors.ENV_OUT) or tmp_path)
            result, report = vectors.run_case(tree.root, entry, system, hello, level, out_dir, tree.families)
        finally:
            system.close()
        request.config.stash.setdefault(RESULTS, []).append((hello, level, result))
        request.node.user_properties.append((VECTOR, (result.verdict, result.reason,
                                                      hello.declarations.kafka_version, tree.kafka_version)))
        if result.verdict == "skip":
            pytest.skip(result.reason)
        if result.verdict == "fail":
            pytest.fail(report, pytrace=False)
        if report:
            print(report)  # a pass as Kafka does: shown with the test's output
        return result

    return run


#: the user property a vector test's report carries (also to pytest-xdist's controller): its verdict and reason,
#: the release its implementation declares and the tree's
VECTOR = "kpurgatory_vector"


class NoCaseRan:
    """Fails a run of vector tests in which no case ran (specs/vectors.md §3), from every vector test's verdict
    (pytest-xdist's controller gets them with its workers' reports)."""

    def __init__(self) -> None:
        self.verdicts: list[tuple] = []
        self.failure: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.verdicts += [value for name, value in report.user_properties if name == VECTOR]

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.verdicts and not hasattr(session.config, "workerinput"):
            declared, tree = self.verdicts[-1][2:]
            self.failure = vectors.no_case_ran([verdict[:2] for verdict in self.verdicts], declared, tree)
            if self.failure is not None:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.failure is not None:
            terminalreporter.write_sep("=", "kpurgatory vectors: FAILED", red=True)
            terminalreporter.write_line(self.failure)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(NoCaseRan(), "kpurgatory-no-case-ran")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the results file (specs/vectors.md) where $KPURGATORY_VECTORS_RESULTS says, if it does. Under
    pytest-xdist each worker writes its part next to it, and the controller joins the parts."""
    write_results(session, getattr(session.config, "workerinput", {}).get("workerid"))


def write_results(session: pytest.Session, worker: str | None) -> None:
    target = os.environ.get(vectors.ENV_RESULTS)
    if not target:
        return
    target, results = Path(target), session.config.stash.get(RESULTS, [])
    parts = [] if worker is not None else sorted(target.parent.glob(f"{target.name}.part-*"))
    documents = [json.loads(part.read_text()) for part in parts]
    if results:
        hello, level, _ = results[-1]
        documents.append(vectors.results_document("python", hello, level, [result for _, _, result in results]))
    if not documents:
        return
    document = {**documents[-1], "cases": sorted((case for each in documents for case in each["cases"]),
                                                  key=lambda case: case["path"])}
    target.parent.mkdir(parents=True, exist_ok=True)
    written = target if worker is None else target.with_name(f"{target.name}.part-{worker}")
    written.write_text(json.dumps(document, indent=1) + "\n")
    for part in parts:
        part.unlink()


@pytest.fixture(scope="session")
def kpurgatory_scenarios() -> dict[str, Trace]:
    """The bundled scenario corpus by stable id."""
    return scenarios()


@pytest.fixture
def kpurgatory_replay():
    """``replay(trace, system, level="exact")``: the system is initialised, replayed and closed; the report is
    returned (``.ok``, ``.first_failure``)."""

    def run(trace: Trace, system: SystemUnderTest, level: str = "exact") -> ReplayReport:
        hello = system.hello()
        try:
            return replay(trace, system, level, features=hello.features)
        finally:
            system.close()

    return run


@pytest.fixture
def kpurgatory_check(tmp_path: Path):
    """``check(factory, profile=..., level="exact", examples=..., steps=..., seed=None)``: run the conformance check
    (`kpurgatory.conformance.check.sequential.run_check`) on the systems ``factory`` makes. A failure fails the test with the
    step table, the seed and the path of the counterexample trace (under the test's tmp_path) to replay with
    ``kpurgatory replay``; a pass returns the `CheckResult` (coverage, distinct states, ...)."""

    def check(factory: Callable[[], SystemUnderTest], *, profile: str, **options) -> CheckResult:
        result = run_check(factory, profile=profile, out_dir=tmp_path / "kpurgatory", **options)
        if not result.passed:
            pytest.fail(result.failure_report(), pytrace=False)
        return result

    return check


@pytest.fixture
def kpurgatory_check_concurrently(tmp_path: Path):
    """``check(factory, threads=4, runs=100, steps=60, seed=None)``: the concurrent check
    (`kpurgatory.conformance.check.concurrent.run_concurrent_check`). A failure fails the test with the violations, the
    whole history and the path of its file (under the test's tmp_path); a pass returns the `ConcurrentResult`."""

    def check(factory: Callable[[], SystemUnderTest], *, threads: int = 4, runs: int = 100, steps: int = 60,
              **options) -> ConcurrentResult:
        result = run_concurrent_check(factory, threads=threads, runs=runs, steps=steps,
                                      out_dir=tmp_path / "kpurgatory", **options)
        if not result.passed:
            pytest.fail(f"{result.implementation} fails the concurrent check (seed {result.seed}); history: "
                        f"{result.history_path}\n{render(result.history, result.violations)}", pytrace=False)
        return result

    return check
