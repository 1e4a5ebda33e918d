"""The page of a compliance matrix (``kpurgatory matrix``): one self-contained HTML file, with no script and nothing
to load, made from matrix.json and the counterexamples' traces beside it; every text from a system or a trace is
escaped.

It opens on the releases' grid, which answers "which of Kafka's known bugs does my release have": a row per Kafka
release, a column per known bug — Kafka's races (`check.concurrent`), each release rule whose sides an answer tells
apart (`model.releases`), each finding (`check.findings`) that not every release has — and one column for the
findings every release has (the timer's edges at Long.MAX_VALUE), so that they do not drown the others. A cell says
whether the release *has* the bug, from the rules' and findings' release ranges as they are when the page is made
(the source of truth), and apart from that whether the runs *met* it. The last column sums up the release's checks,
a failure or a system that broke in colours of their own. Other systems (ports, drivers' results) get a summary row
each.

After it, folded: the verdict of every system and check, each cell's findings and failures with its figures, and
every counterexample as a step table, shown once for all the cells whose counterexample has the same steps, beside
the link to each cell's own trace and the command that writes its page (``kpurgatory view``).
"""

from __future__ import annotations

import html
import re
import shlex
from pathlib import Path
from typing import Callable
from urllib.parse import quote

import attrs

from kpurgatory.conformance.check.concurrent import STALE_TRY, TRYLOCK_LOST_WAKEUP, KafkaRace
from kpurgatory.conformance.check.findings import FINDINGS
from kpurgatory.conformance.traces.codec import Trace, TraceFormatError, params_to_json, read_traces
from kpurgatory.conformance.traces.replay import format_command, format_observation
from kpurgatory.conformance.traces.view import asset
from kpurgatory.model import vocabulary as v
from kpurgatory.model.releases import RULES, RULES_BY_TICKET, Release, version_key

#: verdict -> what it means, in the order of the legend
VERDICTS = {
    "pass": "nothing found: every run agrees with the model (and scenario replays)",
    "finding": "only Kafka's own known misbehaviours: the release does what Kafka does (a finding passes)",
    "failure": "the system differs from the model, or breaks a property, where Kafka does not",
    "broke": "the system could not be driven: it crashed, hung or wrote garbage, or its adapter could not be built",
    "n/a": "does not apply: a profile the system does not declare, threads without the concurrent feature, a release "
           "the Kafka adapter does not drive",
    "skipped": "not run: the system broke before this check",
}
#: the verdicts whose cells get an entry in the details (the others' note says it all)
DETAILED = ("finding", "failure", "broke")
#: the verdicts that are not what the system's release does: each stands out in a colour of its own
FAILING = ("failure", "broke")
#: css classes of the verdicts
CSS = {"pass": "pass", "finding": "finding", "failure": "failure", "broke": "broke", "n/a": "na",
       "skipped": "skipped"}
#: where ``kpurgatory matrix`` writes when no --out is given
DEFAULT_OUT = "kpurgatory-out/matrix"

#: Kafka's races, each with the rule that brought it (None: every release before its fix has it): before the tryLock
#: of KAFKA-5970 a check waited for the op's lock, so it could not skip a ready op (`check.concurrent.kafka_race`)
RACES: tuple[tuple[KafkaRace, str | None], ...] = ((STALE_TRY, None), (TRYLOCK_LOST_WAKEUP, "KAFKA-5970"))
#: what the findings every release has are (`check.findings`: the timer's long arithmetic, which never changed)
EVERY_RELEASE = "timer edges at Long.MAX_VALUE"
#: what a grid cell says, by its state: the words of the legend
STATES = {
    "met": ("met", "the release has it, and these runs met it (the cell links to where)"),
    "unmet": ("not met", "the release has it, but these runs did not meet it: it is there all the same"),
    "fixed": ("fixed", "the release has the fix"),
    "unaffected": ("not affected", "the bug came after the release"),
    "odd": ("met?", "met, though by the rules the release does not have it: the rules or the model are wrong"),
}


def e(text: object) -> str:
    return html.escape(str(text), quote=True)


def tickets(text: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"KAFKA-\d+", text)))


def lacking(ticket: str) -> str:
    """The releases that lack a rule, in words."""
    rule = RULES_BY_TICKET[ticket]
    backports = f" ({', '.join(rule.backports)} and later on their lines have it)" if rule.backports else ""
    return f"releases before {rule.since}{backports}"


def shipped(ticket: str) -> str:
    """Where a rule shipped, in words: its release, and the older lines it was backported to."""
    rule = RULES_BY_TICKET[ticket]
    lines = "its line" if len(rule.backports) == 1 else "their lines"
    return rule.since + (f"; {', '.join(rule.backports)} on {lines}" if rule.backports else "")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "-"


def href(path: str) -> str:
    """A path relative to the page as a link's target: every character a URL gives a meaning (# ? %) escaped."""
    return e(quote(path))


def budget_words(budget: dict) -> str:
    """A run's budget in words (a matrix before thread_runs ran as many concurrent runs as sequential ones)."""
    return (f"{budget['examples']} runs of up to {budget['steps']} steps per sequential check, "
            f"{budget.get('thread_runs', budget['examples'])} runs of {budget['threads']} threads in the concurrent "
            f"check")


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


# ---------------------------------------------------------------------------------------------------------------
# The known bugs: the grid's columns
# ---------------------------------------------------------------------------------------------------------------


@attrs.frozen
class Bug:
    """A column of the grid: one known bug, or the findings every release has (``members``, each met or not).
    ``keys`` are what a finding met is called when it shows the bug: a finding's name or a rule's ticket;
    ``state`` says whether a release has it ("has"), has its fix ("fixed") or predates it ("unaffected")."""

    id: str
    head: str
    sub: str
    what: str
    releases: str
    keys: tuple[str, ...]
    state: Callable[[Release], str]
    members: tuple[tuple[str, str], ...] = ()
    #: the rule whose two sides the column is (a race's fix, a rule's own), if any
    ticket: str | None = None


def known_bugs(releases: list[Release]) -> list[Bug]:
    """The grid's columns for these releases: those of the known bugs some of them have."""

    def some(state: Callable[[Release], str]) -> bool:
        return any(state(release) == "has" for release in releases)

    every = [finding for finding in FINDINGS if all(finding.applies_to(r.version) for r in releases)]
    ranges = {finding.releases for finding in every}
    bugs = [Bug("bug-every-release", EVERY_RELEASE, f"{len(every)}, every release",
                "the timer's arithmetic wraps at Long.MAX_VALUE, as it has since "
                + min((finding.since for finding in every), key=version_key),
                ranges.pop() if len(ranges) == 1 else "every release here", tuple(finding.name for finding in every),
                lambda release: "has", tuple((finding.name, finding.summary) for finding in every))] if every else []
    for finding in FINDINGS:
        def state(release: Release, finding=finding) -> str:
            return "has" if finding.applies_to(release.version) else "unaffected"

        if finding not in every and some(state):
            bugs.append(Bug(f"bug-{slug(finding.name)}", finding.name, finding.ticket, finding.summary,
                            finding.releases, (finding.name,), state))
    for race, brought in RACES:
        def state(release: Release, race=race, brought=brought) -> str:
            return ("fixed" if release.has(race.ticket) else
                    "has" if brought is None or release.has(brought) else "unaffected")

        if some(state):
            since = "" if brought is None else f"with {brought} ({shipped(brought)}) and "
            bugs.append(Bug(f"bug-{slug(race.name)}", race.name, race.ticket, race.description,
                            f"releases {since}before {race.ticket} ({shipped(race.ticket)})",
                            (race.name,), state, ticket=race.ticket))
    raced = {race.ticket for race, _ in RACES}
    for rule in RULES:
        def state(release: Release, ticket=rule.ticket) -> str:
            return "fixed" if release.has(ticket) else "has"

        if rule.seen in ("sequential", "threads") and rule.ticket not in raced and some(state):
            bugs.append(Bug(f"bug-{rule.ticket}", f"before {rule.ticket}", f"until {rule.since}",
                            f"{rule.title}; before it, {rule.before}", lacking(rule.ticket), (rule.ticket,), state,
                            ticket=rule.ticket))
    return bugs


def grid_state(bug: Bug, release: Release, met: dict[str, list[str]]) -> tuple[str, list[str], list[str]]:
    """What a grid cell says (a key of `STATES`), what of the bug the runs met (`met_in`) and in which checks."""
    shown = [key for key in bug.keys if key in met]
    checks = list(dict.fromkeys(check for key in shown for check in met[key]))
    has = bug.state(release)
    return ("met" if shown else "unmet") if has == "has" else "odd" if shown else has, shown, checks


def met_names(row: dict) -> list[str]:
    """The findings a row's cells met, by name, once each."""
    return list(dict.fromkeys(f["name"] for result in row["cells"].values() for f in result["findings"]))


def met_in(row: dict) -> dict[str, list[str]]:
    """What a row's cells met: each finding's name and tickets -> the checks that met it, in column order."""
    met: dict[str, list[str]] = {}
    for column_id, result in row["cells"].items():
        for finding in result["findings"]:
            for key in (finding["name"], *tickets(finding["ticket"] or "")):
                checks = met.setdefault(key, [])
                if column_id not in checks:
                    checks.append(column_id)
    return met


# ---------------------------------------------------------------------------------------------------------------
# The page's parts
# ---------------------------------------------------------------------------------------------------------------


class Ids:
    """The page's anchors: a row's, a cell's, a finding's, each distinct however names slug."""

    def __init__(self):
        self.given: dict[tuple, str] = {}
        self.taken: set[str] = set()

    def __call__(self, *key: str) -> str:
        if key not in self.given:
            base = "--".join(map(slug, key))
            name, number = base, 1
            while name in self.taken:
                number += 1
                name = f"{base}-{number}"
            self.given[key] = name
            self.taken.add(name)
        return self.given[key]

    def row(self, row: dict) -> str:
        return self("row", row["name"])

    def cell(self, row: dict, column_id: str) -> str:
        return self("cell", row["name"], column_id)

    def finding(self, name: str) -> str:
        return self("f", name)


def checks_html(row: dict, columns: list[dict], ids: Ids) -> str:
    """A row's checks summed up: each failing cell named in its colour, linked to its details; then how many agree
    (passed or met only Kafka's known bugs) and how many did not apply."""
    results = [(column["id"], row["cells"][column["id"]]) for column in columns if column["id"] in row["cells"]]
    failing = [f'<a class="badge {CSS[result["verdict"]]}" href="#{ids.cell(row, column_id)}" '
               f'title="{e(result["note"])}">{e(result["verdict"])}: {e(column_id)}</a>'
               for column_id, result in results if result["verdict"] in FAILING]
    agree = sum(result["verdict"] in ("pass", "finding") for _, result in results)
    idle = len(results) - agree - len(failing)
    words = [f"{agree} agree"] * bool(agree) + [f"{idle} n/a"] * bool(idle)
    return " ".join(failing + [f'<span class="agree">{e(", ".join(words))}</span>'])


def grid_html(rows: list[dict], columns: list[dict], bugs: list[Bug], ids: Ids) -> str:
    head = "".join(f'<th title="{e(bug.what)}"><a href="#{bug.id}">{e(bug.head)}</a>'
                   f'<span class="sub">{e(bug.sub)}</span></th>' for bug in bugs)
    body = []
    for row in rows:
        release, met = Release.parse(row["release"]), met_in(row)
        cells = []
        for bug in bugs:
            has = bug.state(release)
            state, shown, checks = grid_state(bug, release, met)
            word = f"met {len(shown)} of {len(bug.keys)}" if bug.members and state == "met" else STATES[state][0]
            title = f"{row['name']}, {bug.head}: " + {"fixed": "has the fix", "unaffected": "predates it"}.get(
                has, "has it")
            if shown:
                title += f"; met in {', '.join(checks)}"
            if bug.members and shown and len(shown) < len(bug.keys):
                title += f"; not met in these runs: {', '.join(key for key in bug.keys if key not in met)}"
            # a finding is met only in a cell with findings, whose details the verdict links to
            text = f'<a href="#{ids.cell(row, checks[0])}">{e(word)}</a>' if checks else e(word)
            cells.append(f'<td class="{state}" data-state="{state}" title="{e(title)}">{text}</td>')
        body.append(f'<tr data-row="{e(row["name"])}"><th><a href="#{ids.row(row)}">{e(row["name"])}</a></th>'
                    f'{"".join(cells)}<td class="checks">{checks_html(row, columns, ids)}</td></tr>')
    return (f'<table class="grid" id="grid"><caption>Which of Kafka\'s known bugs each release has, and whether '
            f'these runs met it</caption><thead><tr><th>release</th>'
            f'{head}<th>checks ({len(columns)})</th></tr></thead><tbody>{"".join(body)}</tbody></table>')


def legend_html(bugs: list[Bug], data: dict, releases: list[Release], checks: int) -> str:
    words = "".join(f'<li><span class="key {state}">{e(word)}</span> {e(meaning)}</li>'
                    for state, (word, meaning) in STATES.items() if state != "odd")
    columns = "".join(
        f'<dt id="{bug.id}">{e(bug.head)} <span class="muted">({e(bug.sub)})</span></dt><dd>{e(bug.what)}. '
        f'<i>{e(bug.releases[0].upper() + bug.releases[1:])}.</i>'
        + (f'<details><summary>the {len(bug.members)} findings</summary><ul>'
           + "".join(f"<li><b>{e(name)}</b>: {e(summary)}</li>" for name, summary in bug.members)
           + "</ul></details>" if bug.members else "") + "</dd>" for bug in bugs)
    columned = {bug.ticket for bug in bugs}
    left = [rule for rule in RULES if rule.ticket not in columned]
    every = [rule for rule in left if all(release.has(rule.ticket) for release in releases)]
    # the scheduled column, when these runs had it, tells the sides of the lock rules with a point apart
    scheduled = any(column["id"] == "purgatory/scheduled" for column in data["columns"])
    kinds = {"every release here has them": [rule.ticket for rule in every],
             "they change only which lock a call takes and whether it waits, which no answer shows; the "
             "scheduled column tells their sides apart by the locks' points":
                 [rule.ticket for rule in left if rule.seen == "locks" and rule.points and scheduled
                  and rule not in every],
             "they change only which lock a call takes and whether it waits, which no answer shows":
                 [rule.ticket for rule in left if rule.seen == "locks" and not (rule.points and scheduled)
                  and rule not in every],
             "a release without it has no such call, so no check sends it":
                 [f"{rule.ticket} ({rule.title})" for rule in left if rule.seen == "commands" and rule not in every]}
    rest = "; ".join(f"{', '.join(named)}: {why}" for why, named in kinds.items() if named)
    return (f'<aside class="legend" id="legend"><ul class="words">{words}<li><span class="key agree">{checks} agree'
            f'</span> its checks passed, or met only Kafka\'s known bugs</li><li><span class="key failure">failure'
            f'</span> a check differs from the model where Kafka does not: a bug in the model or the adapter</li>'
            f'<li><span class="key broke">broke</span> the release could not be driven</li></ul>'
            f'<p class="muted">Has: the release rules (<code>model/releases.py</code>) and the findings\' release '
            f'ranges (<code>conformance/check/findings.py</code>); met: the runs of '
            f'{e(data["environment"]["date"][:10])}. Hover a cell for more.</p><dl class="columns">{columns}</dl>'
            + (f'<p class="muted">Rules without a column: {e(rest)} (<a href="#rules">every rule</a>).</p>'
               if rest else "") + "</aside>")


def failures_html(rows: list[dict], columns: list[dict], ids: Ids) -> str:
    failing = [(row, column["id"], row["cells"][column["id"]]) for row in rows for column in columns
               if column["id"] in row["cells"] and row["cells"][column["id"]]["verdict"] in FAILING]
    if not failing:
        return ""
    items = "".join(f'<li><span class="badge {CSS[result["verdict"]]}">{e(result["verdict"])}</span> '
                    f'<a href="#{ids.cell(row, column_id)}">{e(row["name"])} · {e(column_id)}</a>: '
                    f'{e(result["note"].splitlines()[0] if result["note"] else "")}</li>'
                    for row, column_id, result in failing)
    return (f'<section id="failures"><h2>{counted(len(failing), "cell")} failed or broke: the system differs from '
            f'the model where Kafka does not, or could not be driven</h2><ul>{items}</ul></section>')


def systems_html(rows: list[dict], columns: list[dict], ids: Ids, heading: str) -> str:
    """A summary row per system (beside a grid of releases: each that is not one): its checks and the known bugs
    it met."""
    if not rows:
        return ""
    body = "".join(
        f'<tr data-row="{e(row["name"])}"><th><a href="#{ids.row(row)}">{e(row["name"])}</a>'
        f'<div class="muted impl">{e(row["implementation"] or row["note"] or "")}</div></th>'
        f'<td class="checks">{checks_html(row, columns, ids)}</td><td>'
        + ", ".join(f'<a href="#{ids.finding(name)}">{e(name)}</a>' for name in met_names(row)) + "</td></tr>"
        for row in rows)
    return (f'<section id="systems"><h2>{heading}</h2><table class="systems"><thead><tr><th>system</th>'
            f'<th>checks</th><th>Kafka\'s known bugs met</th></tr></thead><tbody>{body}</tbody></table></section>')


def figures(result: dict, steps: bool = True) -> str:
    parts = [counted(len(result["findings"]), "finding")] * bool(result["findings"])
    parts += [counted(len(result["failures"]), "failure")] * bool(result["failures"])
    parts += [f"{result['runs']} runs"] * bool(result["runs"])
    parts += [f"{result['steps']:,} steps"] * bool(steps and result["steps"])
    parts += [f"{result['seconds']:.0f} s"] * bool(result["seconds"])
    return " · ".join(parts)


def verdicts_html(rows: list[dict], columns: list[dict], ids: Ids) -> str:
    """The verdict of every cell: a table for each set of checks that rows share (Kafka's releases, drivers'
    results of the test vectors), so that no row is padded with checks it did not have."""
    what = {column["id"]: column["what"] for column in columns}
    groups: dict[tuple[str, ...], list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(column["id"] for column in columns if column["id"] in row["cells"]), []).append(row)
    tables = []
    for checks, grouped in groups.items():
        body = []
        for row in grouped:
            cells = []
            for column_id in checks:
                result = row["cells"][column_id]
                verdict = result["verdict"]
                word = (f'<a class="word" href="#{ids.cell(row, column_id)}">{e(verdict)}</a>' if verdict in DETAILED
                        else f'<span class="word">{e(verdict)}</span>')
                cells.append(f'<td class="cell {CSS[verdict]}" data-verdict="{e(verdict)}" title="{e(result["note"])}">'
                             f'{word} <span class="figures">{e(figures(result, steps=False))}</span></td>')
            ran = row["budget"]
            title = (f'{row["target"] or ""}\n' + (f'joined {row["date"]}' if ran is None else
                                                   f'run {row["date"]}: seed {ran["seed"]}, {budget_words(ran)}'))
            body.append(f'<tr id="{ids.row(row)}" data-row="{e(row["name"])}"><th class="row" title="{e(title)}">'
                        f'{e(row["name"])}<div class="muted impl">{e(row["implementation"] or row["note"] or "")}'
                        f'</div></th>{"".join(cells)}</tr>')
        head = "".join(f'<th title="{e(what[column_id])}">{e(column_id)}</th>' for column_id in checks)
        tables.append(f'<div class="scrollx"><table class="matrix"><thead><tr><th>system</th>{head}</tr></thead>'
                      f'<tbody>{"".join(body)}</tbody></table></div>')
    checks = "".join(f"<li><b>{e(column['id'])}</b>: {e(column['what'])}</li>" for column in columns)
    verdicts = "".join(f'<li><span class="badge {CSS[verdict]}">{e(verdict)}</span> {e(words)}</li>'
                       for verdict, words in VERDICTS.items())
    return (f'<details id="verdicts"><summary>Verdicts per check: {len(rows)} systems, {len(columns)} checks'
            f'</summary><ul class="two">{verdicts}</ul><ul class="two">{checks}</ul>{"".join(tables)}</details>')


# ---------------------------------------------------------------------------------------------------------------
# Counterexamples: each distinct step table once
# ---------------------------------------------------------------------------------------------------------------


def answer(observation: v.Observation | str | None) -> str:
    """An answer in a step table: an observation, or how the system failed to give one."""
    if observation is None:
        return ""
    return f"failed: {observation}" if isinstance(observation, str) else format_observation(observation)


def steps_html(trace: Trace) -> str:
    """A trace's steps as a table: the command and the answer the trace expects (the model's, or the recording's)
    beside the system's; a concurrent history's answers are the system's, each with its thread and logical times."""
    header, threads = trace.header, trace.header.threads is not None
    params = ", ".join(f"{name} {value}" for name, value in params_to_json(header.params).items())
    system = not threads and any(step.system is not None for step in trace.steps)
    heads = ["seq"] + ["thread", "invoked", "returned"] * threads + ["command", "answered" if threads else "expected"]
    rows = []
    for step in trace.steps:
        timing = step.timing
        said = ((f"raised {timing.failure}" if timing.failure else "never returned" if timing.returned is None
                 else answer(step.observation)) if threads and timing else answer(step.observation))
        cells = [str(step.seq)] + ([timing.thread, str(timing.invoked), str(timing.returned)] if threads and timing
                                   else [""] * 3 * threads) + [format_command(step.command), said]
        cells += [answer(step.system)] * system
        differs = ' class="differs"' if system and step.system is not None and answer(step.system) != said else ""
        rows.append(f"<tr{differs}>" + "".join(f"<td>{e(text)}</td>" for text in cells) + "</tr>")
    return (f'<p class="muted">{e(header.profile)}; {e(params)}' + (f"; {header.threads} threads" if threads else "")
            + f'</p><table class="steps"><thead><tr>{"".join(f"<th>{e(h)}</th>" for h in heads + ["system"] * system)}'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')


@attrs.define
class Table:
    """A distinct step table: its anchor, the traces that have these steps and what they show (findings' names,
    failures' signatures)."""

    id: str
    html: str
    steps: int
    traces: list[str] = attrs.Factory(list)
    shows: list[str] = attrs.Factory(list)


@attrs.define
class Counterexamples:
    """The distinct step tables of the matrix's traces (paths relative to the page, read under ``out``), in the
    order the cells name them; ``out_words`` is ``out`` as the matrix's command named it."""

    out: Path
    out_words: str
    of: dict[str, Table | None] = attrs.Factory(dict)
    tables: dict[str, Table] = attrs.Factory(dict)

    def add(self, path: str, shows: str) -> Table | None:
        if path not in self.of:
            try:
                traces = read_traces(self.out / path)
            except TraceFormatError:
                traces = []  # a trace the page cannot read is linked, not shown
            steps = "".join(steps_html(trace) for trace in traces)
            if steps and steps not in self.tables:
                self.tables[steps] = Table(f"cx-{len(self.tables) + 1}", steps, sum(len(t.steps) for t in traces))
            self.of[path] = self.tables.get(steps)
            if self.of[path] is not None:
                self.of[path].traces.append(path)
        table = self.of[path]
        if table is not None and shows not in table.shows:
            table.shows.append(shows)
        return table

    def html(self) -> str:
        parts = []
        for table in self.tables.values():
            parts.append(f'<section class="cx" id="{table.id}"><h3>{table.id}: {e(", ".join(table.shows))} '
                         f'<span class="muted">· {counted(table.steps, "step")} · the counterexample of '
                         f'{counted(len(table.traces), "trace")}</span></h3>{table.html}<p class="muted">Its page: '
                         f'<code>kpurgatory view {e(shlex.quote(f"{self.out_words}/{table.traces[0]}"))}</code>'
                         f'</p></section>')
        traces = len(self.of)
        return (f'<details id="counterexamples"><summary>Counterexamples: {counted(len(self.tables), "step table")}'
                f' for {counted(traces, "trace")}</summary><p class="muted">Each cell\'s details link to its '
                f'trace (kept beside this page) and to its steps here; <code>kpurgatory view TRACE</code> writes a '
                f'trace\'s own page, with the model\'s state at each step.</p>{"".join(parts)}</details>')


def details_html(rows: list[dict], columns: list[dict], ids: Ids, examples: Counterexamples) -> str:
    """One entry per cell that found something or broke: its note, each finding and failure with its steps and
    trace, its figures."""
    parts = []
    for row in rows:
        for column in columns:
            result = row["cells"].get(column["id"])
            if result is None or result["verdict"] not in DETAILED:  # the verdict table's note says why
                continue
            lines = [] if result["findings"] or result["failures"] else [f'<p class="note">{e(result["note"])}</p>']
            items = []
            for f in result["findings"]:
                scenario = f.get("scenario")
                detail = f.get("detail")
                filed = ", ".join(tickets(f["ticket"] or ""))
                items.append(f'<li><a href="#{ids.finding(f["name"])}">{e(f["name"])}</a>'
                             + (f' ({e(filed)})' if filed else "")
                             + (f" in scenario {e(scenario)}" if scenario not in (None, f["name"]) else "")
                             + (f", met again in {f['repeats']} runs" if f["repeats"] else "")
                             + traced(f, examples, f["name"])
                             + (f'<div class="clamp">{e(detail)}</div>' if detail else "") + "</li>")
            for f in result["failures"]:
                tag = "broke" if f["error"] else "failure"
                items.append(f'<li><span class="tag {tag}">{tag}</span> {e(f["signature"])}'
                             f'{traced(f, examples, f["signature"])}<div class="clamp">{e(f["summary"])}</div></li>')
            parts.append(f'<section class="detail {CSS[result["verdict"]]}" id="{ids.cell(row, column["id"])}">'
                         f'<h3>{e(row["name"])} · {e(column["id"])}: {e(result["verdict"])} '
                         f'<span class="muted">{e(figures(result))}</span></h3>{"".join(lines)}'
                         + (f'<ul>{"".join(items)}</ul>' if items else "") + "</section>")
    return (f'<details id="details"><summary>Each cell\'s findings and failures: {counted(len(parts), "cell")}'
            f'</summary>{"".join(parts) or "<p class=muted>Nothing found.</p>"}</details>')


def traced(entry: dict, examples: Counterexamples, shows: str) -> str:
    """Links to an entry's steps on this page and to its trace, when the matrix kept one."""
    path = entry.get("trace")
    if not path:
        return ""
    table = examples.add(path, shows)
    return (f' · <a href="#{table.id}">steps</a>' if table else "") + f' · <a href="{href(path)}">trace</a>'


def findings_html(data: dict, ids: Ids) -> str:
    items = "".join(
        f'<li id="{ids.finding(f["name"])}"><b>{e(f["name"])}</b>'
        + (f' <span class="ticket">{e(f["ticket"])}</span>' if f["ticket"] else "")
        + f": {e(f['description'])}" + (f" <i>Releases: {e(f['releases'])}.</i>" if f["releases"] else "")
        + f' <span class="muted" title="{e(", ".join(f["rows"]))}">(met by {counted(len(f["rows"]), "system")})'
          f'</span></li>' for f in data["findings"])
    return (f'<details id="findings"><summary>Findings met: Kafka\'s own known bugs, in words</summary>'
            f'<ul>{items or "<li class=muted>none met</li>"}</ul></details>')


def rules_html(data: dict) -> str:
    rules = "".join(f'<tr id="rule-{e(rule["ticket"])}"><td>{e(rule["ticket"])}</td><td>{e(rule["since"])}'
                    + (f" ({e(', '.join(rule['backports']))})" if rule["backports"] else "")
                    + f"</td><td>{e(rule['title'])}</td><td>{e(rule['before'])}</td><td>{e(rule['seen'])}</td></tr>"
                    for rule in data["rules"])
    return ('<details id="rules"><summary>Release rules: how releases differ</summary><p class="muted">A release '
            "lacks every rule shipped after it. The model follows the release a system declares, so what a rule "
            "explains is not a failure: a scenario the release answers as it did, or a race it shipped, is a "
            'finding.</p><table class="rules"><thead><tr><th>ticket</th><th>since</th><th>what changed</th>'
            f"<th>before it</th><th>seen</th></tr></thead><tbody>{rules}</tbody></table></details>")


def out_of(command: str) -> str:
    """The --out of the command that made the matrix, as its user typed it."""
    try:
        words = shlex.split(command)
    except ValueError:
        return DEFAULT_OUT
    for index, word in enumerate(words):
        if word == "--out" and index + 1 < len(words):
            return words[index + 1].rstrip("/")
        if word.startswith("--out="):
            return word.removeprefix("--out=").rstrip("/")
    return DEFAULT_OUT


def page(data: dict, out: Path) -> str:
    """The page of a matrix (`matrix.matrix_data`) written to ``out``, made from the data and the traces it names
    there (the repository keeps them): a committed matrix.json renders again."""
    columns, rows, env, budget = data["columns"], data["rows"], data["environment"], data["budget"]
    ids, out_words = Ids(), out_of(data["command"])
    releases = [row for row in rows if row["kind"] == "release"]
    others = [row for row in rows if row["kind"] != "release"]
    parsed = [Release.parse(row["release"]) for row in releases]
    bugs = known_bugs(parsed) if releases else []
    checked = [column for column in columns if any(column["id"] in row["cells"] for row in releases)]
    total = data["totals"]
    failing = sum(result["verdict"] in FAILING for row in rows for result in row["cells"].values())  # as listed
    systems = (f"{len(releases)} Kafka releases" + f" and {counted(len(others), 'other system')}" * bool(others)
               if releases else counted(len(rows), "system"))
    summary = (f"{e(systems)}, {len(columns)} checks: "
               + ", ".join(f"{total[verdict]} {e(verdict)}" for verdict in VERDICTS
                           if total[verdict] and verdict not in FAILING)
               + (f' · <a class="alarm" href="#failures">{counted(failing, "cell")} failed or broke</a>' if failing
                  else "") + f' · generated {e(env["date"][:10])} (<a href="#about">how</a>)')
    top = (f'<div class="top">{grid_html(releases, checked, bugs, ids)}{legend_html(bugs, data, parsed, len(checked))}'
           f'</div>'
           if releases else "")
    examples = Counterexamples(out, out_words)
    details = details_html(rows, columns, ids, examples)  # names the counterexamples, in the cells' order
    about = (f"Generated {env['date']} on {env['cores']} cores ({env['machine']}) at load "
             f"{' '.join(map(str, env['load_average']))} (at the end: "
             f"{' '.join(map(str, env.get('load_average_end', ())))}); kpurgatory {env['kpurgatory']}, Python "
             f"{env['python']}" + (f", {env['java']}" if env.get("java") else "")
             + f"; seed {budget['seed']}, {budget_words(budget)}; {total['seconds']:.0f} s of cells"
             + (f", {duration(env['wall_s'])} wall time {env.get('runner', '')}".rstrip() if env.get("wall_s")
                else ""))
    parts = {
        "style": asset("matrix.css"),
        "summary": summary,
        "top": top,
        "failures": failures_html(rows, columns, ids),
        "systems": systems_html(others, columns, ids, "Other systems") if releases else
                   systems_html(rows, columns, ids, "Systems"),
        "folded": (verdicts_html(rows, columns, ids) + details + examples.html() + findings_html(data, ids)
                   + (rules_html(data) if releases else "")),
        "about": (f'{e(about)}.<br>Regenerate: <code id="command">{e(data["command"])}</code>; the page alone, from '
                  f'matrix.json and the traces: <code>kpurgatory matrix --page-only --out '
                  f'{e(shlex.quote(out_words))}</code>'),
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda match: parts[match.group(1)], asset("matrix.html"))
