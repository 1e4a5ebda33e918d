"""purgatory.step for any number of ops and keys (specs/uniform.py): sums over a symbolic number of keys, the uniform
run of the loops, the projection proved for every N and K, and what catches a step that couples ops or keys."""

import pytest
import z3

from kpurgatory.specs import core, uniform
from kpurgatory.specs import purgatory as spec
from kpurgatory.specs.core import PROVED, REFUTED

ABSTRACTED = frozenset({spec.OTHERS_ABSTRACTED})


@pytest.fixture(autouse=True)
def fresh_context():
    core.fresh_z3_context()


def test_the_sum_lemmas_are_proved_and_a_false_one_is_not():
    assert {lemma.name: lemma.proved() for lemma in uniform.SUM_LEMMAS} == dict.fromkeys(
        ["linear", "difference", "scaled", "constant", "case", "point", "non_negative"], PROVED)
    dropped_term = uniform.SumLemma("wrong", "the sum of a + b is the sum of a",
                                    lambda n, a, b, j, **_: uniform.TOTAL(z3.Lambda([j], a[j] + b[j]), n)
                                    == uniform.TOTAL(a, n))
    off_by_one = uniform.SumLemma("wrong", "the point rule without its range check",
                                  lambda n, a, b, e, j, **_: uniform.TOTAL(z3.Lambda([j], z3.If(j == e, a[j], b[j])), n)
                                  == uniform.TOTAL(b, n) + a[e] - b[e])
    assert dropped_term.proved() == REFUTED and off_by_one.proved() == REFUTED


@pytest.mark.parametrize("count", [0, 1, 3])
def test_key_total_equals_the_sum_it_rewrites(count):
    j, e, p = z3.Int("j"), z3.Int("e"), z3.Bool("p")
    row, other = z3.Array("row", z3.IntSort(), z3.IntSort()), z3.Array("other", z3.IntSort(), z3.IntSort())
    terms = [row[j] + 2 * other[j], row[j] - z3.If(p, row[j], 0), z3.If(j == e, row[j] - 5, row[j]),
             z3.If(e == j, 7, 0), -row[j], z3.IntVal(4), z3.If(j > e, row[j], 0)]
    for term in terms:
        rewritten = uniform.key_total(term, j, z3.IntVal(count))
        by_definition = uniform.TOTAL(z3.Lambda([j], term), z3.IntVal(count))
        assert core.prove([], rewritten == by_definition).status == PROVED, term


def test_a_uniform_run_leaves_the_accumulations_over_ops_unknown_and_the_op_fields_exact():
    with uniform.uniformly() as u:
        s, c = uniform.Arrays.symbolic(u, "s"), uniform.uniform_cmd(spec.WATCH, "c")
        n, _ = spec.step(s, c, ABSTRACTED)
    # numDelayed's counter, the estimate, the entry counter and the watchers map sum over the ops
    assert n.unknown == {"nd_ctr", "est", "w_ctr", "present"}
    o = z3.Int("o")
    assert core.prove([c.op != o], n[("created", o)] == s[("created", o)]).status == PROVED
    assert core.prove([c.op == o], n[("created", o)]).status == PROVED


def test_a_write_at_another_index_than_the_loops_is_refused():
    with uniform.uniformly() as u:
        s = uniform.Arrays.symbolic(u, "s")
        with pytest.raises(ValueError, match="writes completed at"):
            s[("completed", 0)] = True


def test_the_projection_is_proved_for_any_number_of_ops_and_keys_and_catches_a_check_that_couples_ops():
    assert uniform.projection_obligation().status == PROVED
    outcome = uniform.projection_obligation(mutated=True)
    assert outcome.status == REFUTED and "check(key=" in outcome.detail
    # the coupling is invisible to the one-op abstraction itself: only the projection shows it
    assert spec.one_op_one_key("check_wins_one").status == PROVED


def test_a_check_that_couples_keys_is_caught(monkeypatch):
    # a check and cancelForKey that visit the op's entries on the key they name and on the next one
    def visited(s, c, o):
        return spec.key_sum(lambda k: spec.If(spec.Or(spec.Eq(c.key, k), spec.Eq(c.key + 1, k)), s[("cnt", k, o)], 0))

    monkeypatch.setattr(spec, "visited", visited)
    for kind in (spec.CHECK, spec.CANCEL_KEY):
        status, detail = uniform.commutes(kind, ABSTRACTED)
        assert status == REFUTED and detail.startswith(f"{spec.KIND_NAMES[kind]}(key="), detail
        assert "?" not in detail  # the sums over the keys shown as numbers


def test_a_value_carried_between_ops_but_not_declared_is_caught_by_the_loop_check(monkeypatch):
    # a check that stops after its first completion carries "won before" from op to op; undeclared, the one body
    # sees it as never set, and only the comparison with the loops shows what the body hides
    monkeypatch.setattr(spec, "carried", lambda value: value)
    coupled = ABSTRACTED | {"check_wins_one"}
    assert uniform.commutes(spec.CHECK, coupled) == (PROVED, "")
    status, detail = uniform.agrees_with_the_loops(spec.CHECK, coupled)
    assert status == REFUTED and detail.startswith("check: ") and "completed." in detail
    assert uniform.agrees_with_the_loops(spec.CHECK, ABSTRACTED) == (PROVED, "")
