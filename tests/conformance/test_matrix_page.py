"""The matrix page (`tools.matrix_page`): its grid says what each release has by the release rules and the
findings' ranges, apart from what the runs met; and every link of the committed page resolves in a fresh clone: each
relative href to a file the repository keeps, each #fragment to an id of the page."""

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlsplit

import pytest

from kpurgatory.conformance.check.concurrent import STALE_TRY, TRYLOCK_LOST_WAKEUP, Violation, kafka_race
from kpurgatory.conformance.check.findings import FINDINGS
from kpurgatory.conformance.tools.matrix_page import EVERY_RELEASE, grid_state, known_bugs, met_in, page
from kpurgatory.conformance.traces.codec import Header, Step, Timing, Trace
from kpurgatory.model import vocabulary as v
from kpurgatory.model.releases import COVERED, RULES, Release

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "matrix"


class Links(HTMLParser):
    """A page's link targets (href, src) and ids."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.targets: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "id":
                self.ids.add(value)
            elif name in ("href", "src"):
                self.targets.append(value or "")


def broken_links(page_path: Path, present: Callable[[Path], bool]) -> tuple[list[str], int]:
    """What of the page at ``page_path`` does not resolve (a fragment without its id, a relative path that is not
    ``present``, a link out of the repository), and how many links it has."""
    links = Links()
    links.feed(page_path.read_text())
    problems = []
    for target in links.targets:
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or parts.path.startswith("/"):
            problems.append(f"{target}: not relative")
        elif parts.path:
            if not present((page_path.parent / unquote(parts.path)).resolve()):
                problems.append(f"{target}: no such file")
        elif unquote(parts.fragment) not in links.ids:
            problems.append(f"{target}: no such id")
    return problems, len(links.targets)


def in_tree() -> Callable[[Path], bool]:
    """Whether a path is a file of the repository's tree, tracked or to be added (not one git ignores)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    files = {ROOT / name for name in listed if name}
    return lambda path: path in files and path.is_file()


def committed() -> dict:
    if not (COMMITTED / "matrix.json").exists():
        pytest.skip("no committed matrix")
    return json.loads((COMMITTED / "matrix.json").read_text())


def test_every_link_of_the_committed_page_resolves_in_a_fresh_clone():
    committed()
    problems, count = broken_links(COMMITTED / "index.html", in_tree())
    assert problems == [] and count > 1000  # each counterexample's trace and steps, each cell's details


def test_a_broken_link_is_found(tmp_path):
    """A small page made from two releases of the committed matrix: whole, it resolves; a trace gone, a fragment
    with no id and a path out of the repository do not."""
    data = committed()
    data["rows"] = data["rows"][:2]
    out = tmp_path / "matrix"
    for row in data["rows"]:
        shutil.copytree(COMMITTED / row["name"], out / row["name"])
    (out / "index.html").write_text(page(data, out))
    problems, count = broken_links(out / "index.html", Path.is_file)
    assert problems == [] and count > 50
    gone = data["rows"][1]["cells"]["purgatory/threads"]["findings"][0]["trace"]
    (out / gone).unlink()
    planted = page(data, out).replace("</main>", '<a href="#nowhere">x</a><a href="/etc/hosts">y</a></main>')
    (out / "index.html").write_text(planted)
    assert broken_links(out / "index.html", Path.is_file)[0] == [f"{gone}: no such file", "#nowhere: no such id",
                                                                 "/etc/hosts: not relative"]


def lost_wakeup_history() -> tuple[Violation, Trace]:
    """A check that left op a behind while a try of a ran beside it: a lost wake-up the tryLock could cause."""
    steps = (Step(1, v.Watch("a", ("k",), 10), v.Observation(False), Timing("w0", 0, 1)),
             Step(2, v.Check("k"), v.Observation(0), Timing("w1", 2, 5)),
             Step(3, v.Try("a"), v.Observation(True), Timing("w0", 3, 4)))
    return Violation("no_lost_wakeup", "op a waits", (1, 2)), Trace(Header("h", "purgatory", v.Params(), threads=2),
                                                                    steps)


def test_the_grid_has_a_column_per_known_bug_and_what_each_release_has_follows_the_rules():
    releases = [Release.parse(version) for version in COVERED]
    bugs = {bug.head: bug for bug in known_bugs(releases)}
    every = bugs.pop(EVERY_RELEASE)
    assert every.keys == tuple(finding.name for finding in FINDINGS)  # every release has the timer's edges
    stale, lost = bugs.pop(STALE_TRY.name), bugs.pop(TRYLOCK_LOST_WAKEUP.name)
    stale_violation = Violation("justified", "stale", (1, 2), cause="stale_try")
    lost_violation, history = lost_wakeup_history()
    for release in releases:
        assert (stale.state(release) == "has") == (kafka_race(stale_violation, history, release) is STALE_TRY)
        assert (lost.state(release) == "has") == (kafka_race(lost_violation, history, release) is TRYLOCK_LOST_WAKEUP)
    assert [lost.state(Release.parse(version)) for version in ("0.11.0.1", "0.11.0.3", "1.0.2", "1.1.1")] == \
        ["unaffected", "has", "has", "fixed"]
    # the rules an answer tells apart and some release lacks; the lock changes show in none
    assert sorted(bugs) == ["before KAFKA-18027", "before KAFKA-3470", "before KAFKA-8334"]
    for bug in bugs.values():
        rule = next(rule for rule in RULES if rule.ticket == bug.ticket)
        assert [bug.state(release) == "has" for release in releases] == [not release.has(rule.ticket)
                                                                         for release in releases]


def test_the_committed_runs_met_only_what_the_releases_have():
    """A release met no bug it does not have, and one it has but the runs did not meet still reads as had: every
    release before 4.0.0 has stale-try, met or not."""
    data = committed()
    rows = [row for row in data["rows"] if row["kind"] == "release"]
    releases = [Release.parse(row["release"]) for row in rows]
    bugs = {bug.head: bug for bug in known_bugs(releases)}
    states = {row["name"]: {head: grid_state(bug, release, met_in(row))[0] for head, bug in bugs.items()}
              for row, release in zip(rows, releases)}
    assert not [(name, head) for name, row in states.items() for head, state in row.items() if state == "odd"]
    assert {states[name][STALE_TRY.name] for name in states if Release.parse(name).has("KAFKA-17848")} == {"fixed"}
    assert {states[name][STALE_TRY.name] for name in states if not Release.parse(name).has("KAFKA-17848")} <= \
        {"met", "unmet"}
    assert {row[EVERY_RELEASE] for row in states.values()} == {"met"}
    assert [name for name in states if states[name][TRYLOCK_LOST_WAKEUP.name] == "met"] == ["0.11.0.3", "1.0.2"]
