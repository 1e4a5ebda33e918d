"""The adapter over Kafka's own classes (conformance/kafka), compiled and driven here against the stand-in
classes beside it: kpurgatory's own re-statements of Kafka's purgatory and wheel with Kafka's class names, public API
and private field names, since CI cannot download Kafka. The same adapter runs against a real Kafka build (README)."""

import json
import os
import re
import select
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main

pytestmark = pytest.mark.skipif(shutil.which("javac") is None, reason="a JDK (javac) is not installed")

ADAPTER_DIR = Path(__file__).parents[2] / "conformance" / "kafka"
#: the scenarios outside the model's domain, where Kafka's wheel is known to misbehave
OUTSIDE_THE_DOMAIN = ("model.domain.delay-out-of-range", "model.domain.watch-delay-out-of-range",
                      "model.domain.overflow-chain-top-level")


@pytest.fixture(scope="module", autouse=True)
def adapter_cache(tmp_path_factory):
    """run.sh compiles the adapter into a fresh cache, not the user's."""
    os.environ["KPURGATORY_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    del os.environ["KPURGATORY_CACHE"]


def over(sources: Path, classes: Path) -> str:
    """Compiles the stand-ins in ``sources`` into ``classes``, and the adapter against them (run.sh with no input
    compiles, starts and exits), so no check waits for javac; returns the adapter's command."""
    subprocess.run(["javac", "-nowarn", "-d", str(classes), *map(str, sorted(sources.glob("**/*.java")))], check=True)
    subprocess.run([ADAPTER_DIR / "run.sh", classes], stdin=subprocess.DEVNULL, check=True)
    return f"{ADAPTER_DIR / 'run.sh'} {classes}"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory) -> str:
    return over(ADAPTER_DIR / "standins", tmp_path_factory.mktemp("standins"))


def start(adapter: str) -> subprocess.Popen:
    return subprocess.Popen(adapter.split(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def send(process: subprocess.Popen, *requests: dict) -> None:
    for request in requests:
        process.stdin.write(json.dumps({"args": {}, **request}) + "\n")
    process.stdin.flush()


def receive(process: subprocess.Popen, count: int) -> dict[int, dict]:
    """The next ``count`` responses, by the seq they echo (concurrent commands answer in any order)."""
    responses = [json.loads(process.stdout.readline()) for _ in range(count)]
    return {response["seq"]: response for response in responses}


def answers_within(process: subprocess.Popen, seconds: float) -> bool:
    return bool(select.select([process.stdout], [], [], seconds)[0])


INIT = {"cmd": "init", "args": {"profile": "purgatory",
                                "params": {"tick_ms": 1, "wheel_size": 20, "start_ms": 0, "purge_interval": 1000}}}


def test_hello_names_the_kafka_build_and_lists_both_profiles_and_every_feature(adapter):
    process = start(adapter)
    send(process, {"seq": 0, "cmd": "hello", "args": {"protocol_version": 1}})
    hello = receive(process, 1)[0]["result"]
    process.stdin.close()
    assert process.wait(10) == 0
    assert hello["profiles"] == ["timer", "purgatory"]
    assert set(hello["features"]) == {"concurrent", "barrier", "gates", "wheel", "watcher_keys", "delay_queue",
                                      "batch", "scheduler"}
    assert adapter.split()[-1] in hello["implementation"]


def test_kafkas_unit_tests_replay_exactly(adapter):
    skips = [option for scenario in OUTSIDE_THE_DOMAIN for option in ("--skip", scenario)]
    result = CliRunner().invoke(main, ["scenarios", "--adapter", adapter, *skips], terminal_width=200)
    assert result.exit_code == 0, result.output
    passed = int(result.output.strip().splitlines()[-1].split()[0])
    assert passed >= 30, result.output


def test_outside_the_models_domain_the_adapter_shows_kafkas_behaviour_unmasked(adapter):
    """Kafka wraps now + delay past Long.MAX_VALUE and runs the task at once; the adapter does not reject it, and
    the scenario names what it shows as Kafka's finding rather than passing it or failing it."""
    result = CliRunner().invoke(main, ["scenarios", "--adapter", adapter, "--only", OUTSIDE_THE_DOMAIN[0]],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "finding deadline-wraps" in result.output and "delay_out_of_range" in result.output
    assert result.output.strip().endswith("0 passed, 0 failed, 1 Kafka finding")


def test_a_short_check_passes_with_kafkas_overflow_bugs_reported_as_findings(adapter, tmp_path):
    """The stand-ins share Kafka's wheel arithmetic, so they share its known misbehaviours past Long.MAX_VALUE: the
    check names them and goes on, and everything else agrees with the model exactly."""
    result = CliRunner().invoke(main, ["check", "--adapter", adapter, "--examples", "10", "--steps", "20",
                                       "--seed", "1", "--out", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Kafka finding (interval-" in result.output


def test_the_concurrent_check_and_its_race_schedules_pass_through_kafkas_locks(adapter, tmp_path):
    result = CliRunner().invoke(main, ["check", "--adapter", adapter, "--threads", "4", "--examples", "3",
                                       "--seed", "1", "--out", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "ran while another did" in result.output


def test_under_the_scheduler_the_adapters_threads_stop_at_kafkas_op_locks(adapter, tmp_path):
    result = CliRunner().invoke(main, ["check", "--adapter", adapter, "--threads", "4", "--scheduler", "pct",
                                       "--examples", "3", "--steps", "20", "--seed", "1", "--out", str(tmp_path)],
                                terminal_width=300)
    assert result.exit_code == 0, result.output
    reached = next(line for line in result.output.splitlines() if line.startswith("switch points reached: "))
    assert "acquire op in safeTryComplete" in reached and "3 distinct under PCT" in result.output


def without_times(history: str) -> str:
    """A history file without the execution times its adapter measured."""
    return re.sub(r',"exec_ns":\[\d+,\d+\]', "", history)


def unguarded(tmp_path: Path) -> str:
    """An adapter over the stand-ins with KAFKA-17848's guard removed: safeTryComplete calls tryComplete even on an
    op that completed (under its lock) while the check waited for that lock."""
    sources = tmp_path / "standins"
    shutil.copytree(ADAPTER_DIR / "standins", sources)
    operation = sources / "org/apache/kafka/server/purgatory/DelayedOperation.java"
    guarded = "return !isCompleted() && tryComplete();"
    assert guarded in operation.read_text()
    operation.write_text(operation.read_text().replace(guarded, "return tryComplete();"))
    return over(sources, tmp_path / "classes")


def test_a_build_whose_check_tries_completed_ops_is_caught_by_a_race_schedule(tmp_path):
    """Only a race shows the missing guard; a schedule makes that race happen every time."""
    result = CliRunner().invoke(main, ["check", "--adapter", unguarded(tmp_path), "--threads", "4",
                                       "--examples", "1", "--seed", "1", "--out", str(tmp_path / "out")],
                                terminal_width=200)
    assert result.exit_code == 1, result.output
    assert "(KAFKA-17848)" in result.output


@pytest.mark.slow
def test_under_the_scheduler_a_seed_gives_the_same_interleavings_and_a_failure_replays_call_for_call(adapter,
                                                                                                     tmp_path):
    """The adapter's threads run one at a time at the harness's go, stopping at the op locks: the same seed twice
    gives the same interleavings (the digest of every run's), the missing guard is caught, and the written history,
    replayed through the same adapter, is the same history, call for call; through the guarded one it passes."""
    broken = unguarded(tmp_path)
    outputs = [CliRunner().invoke(main, ["check", "--adapter", broken, "--threads", "4", "--scheduler", "random",
                                         "--examples", "30", "--steps", "20", "--seed", "0", "--out",
                                         str(tmp_path / f"out{attempt}")], terminal_width=200)
               for attempt in range(2)]
    for result in outputs:
        assert result.exit_code == 1, result.output
        assert "(KAFKA-17848)" in result.output
    digests = [line for result in outputs for line in result.output.splitlines() if "(digest " in line]
    assert len(digests) == 2 and digests[0] == digests[1]
    [history] = (tmp_path / "out0").glob("*.jsonl")
    [again] = (tmp_path / "out1").glob("*.jsonl")
    assert without_times(again.read_text()) == without_times(history.read_text())
    replayed = CliRunner().invoke(main, ["replay", str(history), "--adapter", broken], terminal_width=200)
    assert replayed.exit_code == 1 and "the same history, call for call" in replayed.output, replayed.output
    fixed = CliRunner().invoke(main, ["replay", str(history), "--adapter", adapter], terminal_width=200)
    assert fixed.exit_code == 0 and "differs from the recording" in fixed.output, fixed.output


def test_a_start_barrier_holds_its_requests_until_every_party_arrived(adapter):
    process = start(adapter)
    send(process, {"seq": 0, "cmd": "init", **INIT})
    receive(process, 1)
    barrier = {"id": "b", "parties": 3}
    send(process, {"seq": 1, "cmd": "watch", "args": {"op": "a", "keys": ["k"], "delay_ms": 5, "ready_on": None},
                   "barrier": barrier},
         {"seq": 2, "cmd": "watched", "barrier": barrier})
    assert not answers_within(process, 0.5)
    send(process, {"seq": 3, "cmd": "delayed", "barrier": barrier})
    responses = receive(process, 3)
    process.stdin.close()
    assert process.wait(10) == 0
    assert responses[1]["result"] is False
    for response in responses.values():
        start_ns, end_ns = response["exec_ns"]
        assert start_ns <= end_ns


def test_a_gate_stops_a_watch_inside_tryComplete_while_a_force_completes_the_op(adapter):
    """The watch's first tryComplete finds the op ready, then waits at the gate holding the op's lock; a force (which
    takes no lock) wins meanwhile, so the watch completes nothing and reports false."""
    process = start(adapter)
    send(process, {"seq": 0, "cmd": "init", **INIT})
    receive(process, 1)
    send(process, {"seq": 1, "cmd": "watch", "args": {"op": "a", "keys": ["k"], "delay_ms": 5, "ready_on": 1},
                   "gate": {"id": "g", "try": 1}},
         {"seq": 2, "cmd": "await_gate", "args": {"gate": "g"}})
    assert receive(process, 1) == {2: {"seq": 2, "result": True, "events": []}}
    send(process, {"seq": 3, "cmd": "force", "args": {"op": "a"}})
    forced = receive(process, 1)[3]
    send(process, {"seq": 4, "cmd": "open_gate", "args": {"gate": "g"}})
    responses = receive(process, 2)
    process.stdin.close()
    assert process.wait(10) == 0
    assert (forced["result"], forced["events"]) == (True, [{"event": "complete", "op": "a", "via": "force"}])
    assert (responses[1]["result"], responses[1]["events"]) == (False, [])
    assert responses[4] == {"seq": 4, "result": None, "events": []}


def test_a_given_kafka_version_is_declared_and_named(adapter):
    """run.sh --kafka-version V (what --kafka passes): the model is to follow release V; not V's jar, so named by path."""
    *run_sh, classes = adapter.split()
    process = start(" ".join([*run_sh, "--kafka-version", "4.1.0", classes]))
    send(process, {"seq": 0, "cmd": "hello", "args": {"protocol_version": 1}})
    hello = receive(process, 1)[0]["result"]
    process.stdin.close()
    assert process.wait(10) == 0
    assert hello["declarations"] == {"kafka_version": "4.1.0",
                                     "watcher_shards": {"count": 512, "hash": "java-string-hashcode"}}
    assert classes in hello["implementation"] and "unsupported_commands" not in hello


def test_an_unknown_era_is_a_usage_error(tmp_path):
    result = subprocess.run([str(ADAPTER_DIR / "run.sh"), "--era", "kafka-0.8", str(tmp_path)], capture_output=True,
                            text=True)
    assert result.returncode == 2 and "unknown era 'kafka-0.8'" in result.stderr


def test_a_classpath_without_kafka_is_a_clear_error(tmp_path):
    result = subprocess.run([str(ADAPTER_DIR / "run.sh"), str(tmp_path)], capture_output=True, text=True,
                            env={**os.environ, "KPURGATORY_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 3
    assert f"the adapter does not compile against {tmp_path}" in result.stderr


def test_set_ready_false_overrides_ready_on(adapter):
    process = start(adapter)
    send(process, {"seq": 0, "cmd": "init", **INIT})
    receive(process, 1)
    steps = [("watch", {"op": "a", "keys": ["k"], "delay_ms": 50, "ready_on": 3}, False),
             ("set_ready", {"op": "a", "ready": False}, None),
             ("check", {"key": "k"}, 0),  # the third try: ready_on would hold, the last set_ready says no
             ("set_ready", {"op": "a"}, None),
             ("check", {"key": "k"}, 1)]
    for seq, (cmd, args, result) in enumerate(steps, start=1):
        send(process, {"seq": seq, "cmd": cmd, "args": args})
        assert receive(process, 1)[seq]["result"] == result, cmd
    process.stdin.close()
    assert process.wait(10) == 0


LONG_MAX = 2**63 - 1
#: the stand-ins share Kafka's wheel arithmetic, so its hangs past the model's domain (conformance/check/findings.py)
HANGS = {
    # the overflow intervals of an odd wheel wrap without ever covering the deadline: the add climbs without end
    "odd-wheel-recursion": [{"cmd": "init", "args": {"profile": "timer", "params": {
        "tick_ms": 1, "wheel_size": 3, "start_ms": 0, "purge_interval": 1000}}},
        {"cmd": "timer_add", "args": {"task": "t", "delay_ms": LONG_MAX}}],
    # the entry lands in a bucket whose wrapped expiration is due at once, and its flush re-inserts it there forever
    "reinsertion-livelock": [{"cmd": "init", "args": {"profile": "purgatory", "params": {
        "tick_ms": 3, "wheel_size": 6, "start_ms": 0, "purge_interval": 1000}}},
        {"cmd": "watch", "args": {"op": "a", "keys": ["k"], "delay_ms": 2**62 - 1, "ready_on": None}},
        {"cmd": "advance", "args": {"to_ms": 0}}],
}
#: runs of every kind of answer: observations (an error too), Kafka's own exception, both hangs, each followed by what
#: a batch skips, and a run after them
BATCH = [
    INIT, {"cmd": "watch", "args": {"op": "a", "keys": ["k", "j"], "delay_ms": 15, "ready_on": None}},
    {"cmd": "watch", "args": {"op": "b", "keys": [], "delay_ms": 5, "ready_on": None}},
    {"cmd": "watch", "args": {"op": "c", "keys": ["k"], "delay_ms": 50, "ready_on": 3}},
    {"cmd": "watcher_keys"}, {"cmd": "wheel"}, {"cmd": "delay_queue"}, {"cmd": "check", "args": {"key": "k"}},
    {"cmd": "set_ready", "args": {"op": "a", "ready": False}}, {"cmd": "advance", "args": {"to_ms": 15}},
    {"cmd": "watched"}, {"cmd": "shutdown"},
    {"cmd": "init", "args": {"profile": "timer", "params": {
        "tick_ms": 1, "wheel_size": 2, "start_ms": 0, "purge_interval": 1000}}},
    {"cmd": "timer_add", "args": {"task": "t", "delay_ms": LONG_MAX}},  # Kafka's / by zero: a failure
    {"cmd": "size"},
    *HANGS["odd-wheel-recursion"], {"cmd": "size"},
    *HANGS["reinsertion-livelock"], {"cmd": "watched"},
    {"cmd": "init", "args": {"profile": "timer", "params": {
        "tick_ms": 1, "wheel_size": 20, "start_ms": 0, "purge_interval": 1000}}},
    {"cmd": "timer_add", "args": {"task": "t", "delay_ms": 8}}, {"cmd": "advance", "args": {"to_ms": 8}},
    {"cmd": "size"}]


def one_at_a_time(adapter: str, requests: list[dict]) -> list[dict]:
    """Each request's answer sent alone, as a batch answers it: without seq and exec_ns, and skipped after a failure
    or hang until the next init."""
    process = start(adapter)
    answers, skipping = [], False
    for seq, request in enumerate(requests):
        if skipping and request["cmd"] != "init":
            answers.append({"skipped": True})
            continue
        send(process, {"seq": seq, **request})
        answer = receive(process, 1)[seq]
        del answer["seq"]
        answer.pop("exec_ns", None)
        skipping = "failure" in answer or "hung" in answer
        answers.append(answer)
    process.stdin.close()
    assert process.wait(10) == 0
    return answers


def test_a_batch_answers_each_request_as_it_is_answered_alone(adapter):
    process = start(adapter)
    send(process, {"seq": 0, "cmd": "batch", "args": {"requests": [{"args": {}, **request} for request in BATCH]}})
    response = receive(process, 1)[0]
    process.stdin.close()
    assert process.wait(10) == 0
    assert response["events"] == [] and "exec_ns" not in response
    answers = response["result"]
    assert answers == one_at_a_time(adapter, BATCH)
    kinds = [next(iter({"failure", "hung", "skipped"} & answer.keys()), "observed") for answer in answers]
    assert kinds.count("hung") == 2 and kinds.count("failure") == 1 and kinds.count("skipped") == 3
    assert answers[2] == {"result": None, "events": [], "error": "empty_keys"}
    assert answers[-2] == {"result": None, "events": [{"event": "run", "task": "t"}]}


def test_a_batch_holds_a_runs_commands_only(adapter):
    process = start(adapter)
    requests = [INIT, {"cmd": "hello", "args": {"protocol_version": 1}}, {"cmd": "watched", "args": {}}, INIT,
                {"cmd": "watched", "args": {}, "gate": {"id": "g", "try": 1}}]
    send(process, {"seq": 0, "cmd": "batch", "args": {"requests": requests}})
    answers = receive(process, 1)[0]["result"]
    process.stdin.close()
    assert process.wait(10) == 0
    assert [next(iter(answer)) for answer in answers] == ["result", "failure", "skipped", "result", "failure"]


@pytest.mark.parametrize("hang", sorted(HANGS))
def test_a_known_hang_is_answered_hung_and_the_adapter_takes_the_next_run(adapter, hang):
    """Past the model's domain Kafka's wheel climbs overflow wheels or re-inserts an entry without end: the adapter
    stops the call itself and says so, rather than leaving the harness to wait out its timeout and kill it."""
    process = start(adapter)
    answers = []
    for seq, request in enumerate(HANGS[hang]):
        send(process, {"seq": seq, **request})
        answers.append(receive(process, 1)[seq])
    *answered, last = answers
    assert all("result" in answer for answer in answered)
    assert last.keys() == {"seq", "hung"}, last
    send(process, {"seq": 10, **INIT}, {"seq": 11, "cmd": "watched"})
    assert receive(process, 2)[11]["result"] == 0
    process.stdin.close()
    assert process.wait(10) == 0
