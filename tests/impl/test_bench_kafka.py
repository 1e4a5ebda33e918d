"""`kpurgatory bench --kafka`'s JVM driver (conformance/kafka/bench): it compiles against a Kafka-shaped
classpath, replays the plans the bench writes, and its counts are the model's for the same plan. Correctness only:
nothing here is timed and no figure is asserted.

Every test runs on the stand-in classes beside the adapter (kpurgatory's own code with Kafka's class names, which CI
can compile without downloading Kafka); the last one also runs on Kafka 4.4.0's real classes when Maven can fetch
them."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import attrs
import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.tools import bench

pytestmark = pytest.mark.skipif(shutil.which("javac") is None, reason="a JDK (javac) is not installed")

STANDINS = Path(__file__).parents[2] / "conformance" / "kafka" / "standins"


@pytest.fixture(scope="module", autouse=True)
def driver_cache(tmp_path_factory):
    """run.sh compiles the driver into a fresh cache, not the user's."""
    os.environ["KPURGATORY_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    del os.environ["KPURGATORY_CACHE"]


@pytest.fixture(scope="module")
def standins(tmp_path_factory) -> str:
    classes = tmp_path_factory.mktemp("standins")
    subprocess.run(["javac", "-nowarn", "-d", str(classes), *map(str, sorted(STANDINS.glob("**/*.java")))], check=True)
    return str(classes)


def plans() -> dict[str, bench.TimerPlan | bench.PurgatoryPlan]:
    """Small plans that still cancel, cascade down the wheel's levels, expire and purge (P1: 3 000 ops, a purge
    interval of 1 000)."""
    return {"T1": bench.plan_t1(random.Random(7), 1.0, arrival_ms=300, per_ms=5, max_delay=9_000),
            "T2": bench.plan_t2(random.Random(7), 1.0, tasks=2_000, max_delay=1_000),
            "P1": bench.plan_p1(random.Random(7), 1.0, arrival_ms=300, per_ms=10, key_count=50)}


def model_counts(plan: bench.TimerPlan | bench.PurgatoryPlan) -> dict[str, int]:
    """What the model does with the plan, in the driver's terms."""
    counts = {"completed": 0, "expired": 0, "purges": 0}
    if isinstance(plan, bench.TimerPlan):
        outcome = bench.replay_timer(plan, bench.TIMER_RIGS["model"])
        assert not outcome.failures
        return {"fired": outcome.ops - len(plan.delays) - plan.cancel_count, "fired_at_wrong_time": 0, "pending": 0}

    def rig(on_complete, on_expire) -> bench.PurgatoryRig:
        def complete() -> None:
            counts["completed"] += 1
            on_complete()

        def expire() -> None:
            counts["expired"] += 1
            on_expire()

        model = bench.PURGATORY_RIGS["model"](complete, expire)

        def advance_to(to_ms: int) -> int | None:
            purged = model.advance_to(to_ms)
            counts["purges"] += purged is not None
            return purged

        return attrs.evolve(model, advance_to=advance_to)

    assert not bench.replay_purgatory(plan, rig).failures
    return {**counts, "pending": 0}


@pytest.mark.parametrize("workload", ["T1", "T2", "P1"])
def test_the_driver_replays_a_plan_with_the_models_counts(standins, tmp_path, workload):
    plan = plans()[workload]
    expected = model_counts(plan)
    if workload == "P1":
        assert expected["purges"] > 0 and expected["expired"] > 0  # the plan reaches the purge and the timer
    driver = bench.KafkaDriver("java-purgatory", standins, plan, tmp_path)
    try:
        for _ in range(2):  # a second replay starts from a fresh timer or purgatory, not from the first one's
            answer = driver.request("run")
            assert {name: answer[name] for name in expected} == expected
        driver.warm_up(0, memory=True)
        outcome = driver.measure(first=True)
    finally:
        driver.close()
    assert not outcome.failures
    assert outcome.bytes_per_pending > 0


def test_a_classpath_without_kafka_is_the_tools_failure(tmp_path):
    with pytest.raises(bench.KafkaDriverBroke, match="does not compile") as broke:
        bench.KafkaDriver("java-purgatory", str(tmp_path), plans()["T2"], tmp_path)
    assert broke.value.exit_code == 3


def test_bench_prints_the_kafka_row_beside_the_others(standins, monkeypatch):
    release = SimpleNamespace(version="4.4.0", era="java-purgatory", classpath=standins)
    monkeypatch.setattr(bench, "kafka_release", lambda version: release)
    result = CliRunner().invoke(main, ["bench", "--scale", "0.001", "--rounds", "1", "--impl", "compiled", "--impl",
                                       "heapq", "--no-advance-cost", "--kafka", "4.4.0", "--kafka-warmup", "1"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "kafka 4.4.0 (JVM)" in line and "│" in line]
    assert [row.split("│")[1].strip() for row in rows] == ["T1", "T2", "P1"]
    assert "vs compiled" in result.output and "load average" in result.output and "FAIL" not in result.output


def test_a_release_with_the_scala_timer_is_refused_before_maven_runs(monkeypatch):
    monkeypatch.setattr(bench.kafka, "run_maven", lambda version: pytest.fail("Maven ran"))
    result = CliRunner().invoke(main, ["bench", "--kafka", "3.5.2", "--scale", "0.001"])
    assert result.exit_code == 2
    assert "Java timer (3.6.0 on)" in result.output


@pytest.mark.skipif(shutil.which("mvn") is None, reason="Maven (mvn) is not installed: no Kafka release to fetch")
@pytest.mark.parametrize("version", ["4.4.0", "3.9.2"])  # the Java purgatory; the Scala one on the Java timer
@pytest.mark.parametrize("workload", ["T1", "T2", "P1"])
def test_kafkas_own_classes_replay_a_plan_with_the_models_counts(tmp_path, version, workload):
    release = bench.kafka_release(version)
    plan = plans()[workload]
    driver = bench.KafkaDriver(release.era, release.classpath, plan, tmp_path)
    try:
        answer = driver.request("run")
    finally:
        driver.close()
    expected = model_counts(plan)
    assert {name: answer[name] for name in expected} == expected
