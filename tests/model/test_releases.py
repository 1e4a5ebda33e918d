"""The release rules: which releases have each, how the model follows a release, and each sequential rule's
scenario passing on its side and failing, named by its ticket, on the other."""

import pytest

from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.traces.codec import model_trace
from kpurgatory.conformance.traces.replay import replay, scenarios
from kpurgatory.model import CommandError, Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import Declarations
from kpurgatory.model.releases import COVERED, CURRENT, RULES, Release

RELEASE_SCENARIOS = {trace_id: trace for trace_id, trace in scenarios().items()
                     if trace_id.startswith("kafka.releases.")}


@pytest.mark.parametrize("version, ticket, has", [
    ("0.10.1.0", "KAFKA-3994", False), ("0.10.1.1", "KAFKA-3994", True),  # a backport to the 0.10.1 line
    ("0.10.2.0", "KAFKA-3994", True),
    ("0.11.0.1", "KAFKA-5970", False), ("0.11.0.2", "KAFKA-5970", True), ("1.0.0", "KAFKA-5970", True),
    ("1.0.2", "KAFKA-6653", False), ("1.1.0", "KAFKA-6653", True),
    ("2.6.3", "KAFKA-8334", False), ("2.7.0", "KAFKA-8334", True),
    ("3.9.2", "KAFKA-17848", False), ("3.9.2", "KAFKA-18027", False), ("4.0.0", "KAFKA-18027", True),
    ("4.0.2", "KAFKA-19312", False), ("4.1.0", "KAFKA-19312", True),
    ("0.9.0.1", "KAFKA-1952", True), ("0.9.0.1", "KAFKA-3470", False),
])
def test_a_release_has_the_rules_it_shipped(version, ticket, has):
    assert Release.parse(version).has(ticket) is has


def test_current_kafka_has_every_rule_and_no_release_is_ahead_of_it():
    assert all(CURRENT.has(rule.ticket) for rule in RULES)
    assert Release.parse(None) is CURRENT
    assert Release.parse(COVERED[-1]).differences() == ()


@pytest.mark.parametrize("bad, reason", [("abc", "not a Kafka release number"), ("", "not a Kafka release number"),
                                         ("3.7.1-rc1", "not a Kafka release number"),
                                         ("3.7.1.1.1", "not a Kafka release number"),
                                         ("0.8.2.2", "predates the hierarchical timing wheel")])
def test_a_bad_or_too_old_release_is_refused_with_the_reason(bad, reason):
    with pytest.raises(ValueError, match=reason):
        Declarations(kafka_version=bad)


def test_cancel_key_does_not_exist_before_cancel_for_key_was_added():
    old = Model("purgatory", v.Params(), Release.parse("0.10.2.2"))
    with pytest.raises(CommandError, match="cancel_key: Kafka 0.10.2.2 has no such call"):
        old.step(v.CancelKey("k"))
    assert Model("purgatory", v.Params(), Release.parse("0.11.0.0")).step(v.CancelKey("k")).result == []


def test_every_sequential_rule_has_its_scenario_and_every_scenario_a_rule():
    sequential = {rule.separated_by for rule in RULES if rule.seen == "sequential"}
    assert sequential == set(RELEASE_SCENARIOS)


@pytest.mark.parametrize("trace_id", sorted(RELEASE_SCENARIOS))
def test_a_release_scenario_is_what_the_model_of_its_release_answers(trace_id):
    trace = RELEASE_SCENARIOS[trace_id]
    assert model_trace(trace.header, [step.command for step in trace.steps]) == trace


def side_of(trace, release: Release) -> bool:
    """Whether ``release`` answers ``trace`` (pinned at its rule's first release) as the trace records."""
    system = ModelSystem(release)
    report = replay(trace, system, "exact", features=v.OPTIONAL, declarations=system.hello().declarations)
    assert report.error is None
    return report.ok, report.explanation


@pytest.mark.parametrize("rule", [rule for rule in RULES if rule.seen == "sequential"], ids=lambda rule: rule.ticket)
def test_a_rule_scenario_passes_on_its_side_and_fails_named_on_the_other(rule):
    trace = RELEASE_SCENARIOS[rule.separated_by]
    pinned = Release.parse(trace.header.declarations.kafka_version)
    for version in (*COVERED, None):
        release = Release.parse(version)
        ok, explanation = side_of(trace, release)
        # the other side is the releases that differ from the pinned one in this rule; KAFKA-18027 restored, for a
        # single thread, what releases before KAFKA-8334 did, so those read as its side
        other = release.has(rule.ticket) != pinned.has(rule.ticket)
        if rule.ticket == "KAFKA-18027":
            other = other and release.has("KAFKA-8334")
        assert ok is not other, (version, explanation)
        if other:
            assert rule.ticket in explanation and str(release) in explanation


def contract_verdicts(version: str, commands: list[v.Command]) -> tuple[list[v.Observation], dict]:
    """What the model of ``version`` answers, and the first property the contract finds broken in those answers
    when the system declares that release, and when it declares none (current Kafka)."""
    from kpurgatory.model.contract import ContractMonitor
    model = Model("purgatory", v.Params(), Release.parse(version))
    observations = [model.step(command) for command in commands]
    verdicts = {}
    for declared in (version, None):
        monitor = ContractMonitor("purgatory", v.Params(), Declarations(kafka_version=declared))
        verdicts[declared] = [violation.prop for command, observation in zip(commands, observations)
                              for violation in monitor.observe(command, observation)][:1]
    return observations, verdicts


def test_before_kafka_18027_a_rewatched_completed_op_is_listed_again_and_the_contract_allows_it():
    observations, verdicts = contract_verdicts("3.9.2", [
        v.Watch("o", ("k1",), 100, None), v.Force("o"), v.Check("k1"), v.Watch("o", ("k1", "k2")), v.Watched(),
        v.CancelKey("k1")])
    assert observations[4].result == 2 and observations[5].result == ["o"]
    assert verdicts == {"3.9.2": [], None: ["watcher_cleanup"]}


def test_before_kafka_3470_a_rewatch_keeps_the_first_deadline_in_the_contract_too():
    observations, verdicts = contract_verdicts("0.9.0.1", [
        v.Watch("o", ("k1",), 10, None), v.Advance(5), v.Watch("o", ("k1",)), v.Advance(10)])
    assert observations[3].events == (v.Complete("o", "expire"), v.Expire("o"))
    assert verdicts == {"0.9.0.1": [], None: ["on_time"]}


def test_scenarios_count_a_release_on_the_other_side_of_a_rule_apart_from_failures():
    from kpurgatory.conformance.traces.replay import scenario_verdict
    system = ModelSystem(Release.parse("3.9.2"))
    trace = RELEASE_SCENARIOS["kafka.releases.KAFKA-18027"]
    report = replay(trace, system, "exact", features=v.OPTIONAL, declarations=system.hello().declarations)
    assert report.exit_code == 1 and report.other_side_of == ("KAFKA-18027",)
    assert scenario_verdict(report)[1] == "other side"
    broken = ModelSystem(Release.parse("4.0.0"))  # declares 4.0.0 but answers as 3.9.2: not its release's answer
    broken.release = Release.parse("3.9.2")
    report = replay(trace, broken, "exact", features=v.OPTIONAL,
                    declarations=Declarations(kafka_version="4.0.0"))
    assert report.other_side_of == () and scenario_verdict(report)[1] == "failed"
