"""The report of a live recording (``kpurgatory record-broker --judge``, or `write_report`): per purgatory, how many
ops it had and how they ended (completed by which route, or still waiting at the end), how late expirations fired
after their deadline and how long ops took from watch to completion, what the purges removed, the ops entering each
purgatory per second and the watch lists' and the timer's size over time; the broker's run and the load's settings
and throughput; and the judge's verdicts when the recording was judged (``judged/summary.json``,
``judged/verdicts.parquet``), with a link to each failing window's page. Written as ``report.json`` and a
self-contained ``index.html``: tables and definition lists in words and units, the plots as inline PNGs (matplotlib).
Every text the recording brings (purgatory names, the load's client failure, agent options, window ids, the judge's
messages) is HTML-escaped: the page has no script.

An expiration's lateness is measured from its deadline as Kafka's timer set it: the wall clock in whole milliseconds
when the op entered the timer (its ``timer_add``, else its watch's call) plus its delay, to the nanoTime at which its
expiry's ``onComplete`` began (``onExpiration`` runs after it, however long that takes).
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import urllib.parse
from collections import Counter, defaultdict
from pathlib import Path

import attrs

from kpurgatory.conformance.live.recording import Recording, read_recording
from kpurgatory.model.contract import RealTime

PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
#: a distribution's columns in the report
STATISTICS = ("count", "min", *(name for name, _ in PERCENTILES), "max")
#: the routes an op completes by, as the report names them and in its order: in its own watch's tries
#: (tryCompleteElseWatch), in a check (checkAndComplete), by expiry on the timer's executor, or forced by other code
#: outside any purgatory call; a route not listed (a completion inside the reaper's advance) follows under its name
ROUTES = {"watch": "its watch", "check": "a check", "expire": "expiry", "other": "other code"}
DASH = "–"

#: the words and unit of each field of load.json: its settings, then what it did (fields not listed follow under
#: their own names)
LOAD_SETTINGS = {"seconds": ("ran for", "s"), "producers": ("producers", ""), "consumers": ("consumers", ""),
                 "rate_per_producer": ("rate per producer (0: unthrottled)", "records/s"),
                 "record_bytes": ("record size", "B")}
LOAD_RESULTS = {"records_sent": ("records sent", ""), "records_acked": ("records acknowledged", ""),
                "acked_per_s": ("acknowledged", "records/s"), "records_consumed": ("records consumed", ""),
                "consumed_per_s": ("consumed", "records/s"), "producer_requests": ("produce requests", ""),
                "fetch_requests": ("fetch requests", ""), "delete_records_requests": ("DeleteRecords requests", ""),
                "churn_joins": ("extra consumers that joined the group", ""),
                "errors": ("failed sends and DeleteRecords", ""),
                "client_failures": ("clients stopped by an exception", ""),
                "first_failure": ("first client failure", "")}
#: record.json, what ran (its load is load.json's)
BROKER = {"agent": ("agent loaded", ""), "agent_options": ("agent options", ""),
          "purge_interval": ("purge interval", "requests"), "broker_start_s": ("broker answered after", "s"),
          "broker_cpu_s_during_load": ("broker CPU during the load", "s"), "broker_stop_s": ("broker stopped in", "s"),
          "broker_exit": ("broker exit status (143: stopped by SIGTERM)", ""),
          "event_files": ("event files", ""), "event_bytes": ("events written", "B")}
RECORDING = {"recording": ("folder", ""), "kafka_version": ("Apache Kafka release", ""),
             "faults": ("faults the agent planted", ""), "events": ("events", ""),
             "dropped": ("events the agent dropped", ""), "ended_cleanly": ("ended cleanly (not cut)", "")}
ALLOWANCES = {"clock_granularity_ms": ("clock granularity", "ms"), "executor_lag_ms": ("executor lag", "ms"),
              "reaper_ms": ("reaper's advance timeout", "ms")}
#: validate-traces' summary.json
JUDGE = {"verdicts": ("windows by verdict", ""), "properties": ("failing windows by property", ""),
         "findings": ("windows with a Kafka finding", ""), "quarantined_traces": ("windows quarantined", ""),
         "quarantine": ("quarantined rows by reason", ""), "failing_files": ("failing windows written", ""),
         "level": ("level", ""), "files": ("history files", ""), "input_rows": ("rows read", ""),
         "checked_rows": ("rows checked", ""), "quarantined_rows": ("rows quarantined", ""),
         "steps_checked": ("steps checked", ""), "seconds": ("judged in", "s"),
         "events_per_second": ("judged", "rows/s")}


@attrs.define
class Purgatory:
    """What one purgatory did in a recording."""

    name: str
    ops: int = 0
    completed: Counter = attrs.Factory(Counter)  # route (ROUTES) -> ops
    pending: int = 0  # ops watched that never completed: still waiting at the end
    checks: int = 0
    purges: int = 0
    purged: int = 0
    lateness_ms: list[float] = attrs.Factory(list)
    latency_ms: list[float] = attrs.Factory(list)  # watch to completion
    entered_s: list[float] = attrs.Factory(list)  # each op's first watch, in s since the recording started
    gauges: list[tuple[float, int, int]] = attrs.Factory(list)  # (s, watched, delayed) at each reaper return

    def to_json(self) -> dict:
        return {"ops": self.ops, "completed": dict(self.completed), "pending": self.pending, "checks": self.checks,
                "purges": self.purges, "purged_entries": self.purged,
                "expiry_lateness_ms": distribution(self.lateness_ms),
                "completion_latency_ms": distribution(self.latency_ms)}


def distribution(values: list[float]) -> dict[str, float] | None:
    """count, min, the PERCENTILES and max of ``values`` (ms, to the µs)."""
    if not values:
        return None
    ordered = sorted(values)
    at = {name: ordered[min(len(ordered) - 1, int(q * len(ordered)))] for name, q in PERCENTILES}
    return {"count": len(ordered)} | {name: round(value, 3)
                                      for name, value in {"min": ordered[0], **at, "max": ordered[-1]}.items()}


def summarize(recording: Recording) -> dict[str, Purgatory]:
    """Per purgatory, from the raw events."""
    found: dict[str, Purgatory] = {}
    watched_at: dict[str, int] = {}  # op -> its first watch's call (ns)
    watched_in: dict[str, Purgatory] = {}
    deadline: dict[str, int] = {}  # op -> its deadline in wall ms
    delay: dict[str, int] = {}
    route: dict[tuple[str, str], str] = {}  # (purgatory, op) -> the call it completed in, or expire/other
    open_calls: dict[str, list[str]] = defaultdict(list)  # thread -> the kinds of its calls in flight
    done: dict[str, int] = {}  # op -> when its (first) onComplete began
    for event in recording.events:
        kind, phase = event["ev"], event.get("phase")
        if kind == "timer_add" and event.get("op") in delay and event["op"] not in deadline:
            deadline[event["op"]] = recording.ms(event["t_ns"]) + event["delay_ms"]
            continue
        if "purgatory" not in event:
            continue
        purgatory = found.setdefault(event["purgatory"], Purgatory(event["purgatory"]))
        calls = open_calls[event["thread"]]
        if kind in ("watch", "check", "advance") and phase == "call":
            calls.append(kind)
            if kind == "watch" and event["op"] not in watched_at:
                purgatory.ops += 1
                purgatory.entered_s.append((event["t_ns"] - recording.t0) / 1e9)
                watched_at[event["op"]], delay[event["op"]] = event["t_ns"], event["delay_ms"]
                watched_in[event["op"]] = purgatory
            purgatory.checks += kind == "check"
        elif kind in ("watch", "check", "advance") and phase == "return":
            if calls:
                calls.pop()
            if kind == "advance":
                purgatory.gauges.append(((event["t_ns"] - recording.t0) / 1e9, event["watched"], event["delayed"]))
                if "purged" in event:
                    purgatory.purges += 1
                    purgatory.purged += event["purged"]
        elif kind == "complete" and event["op"] not in done:
            done[event["op"]] = event["t_ns"]
            how = calls[-1] if calls else "other"
            route[event["purgatory"], event["op"]] = how
            if event["op"] in watched_at:
                purgatory.latency_ms.append((event["t_ns"] - watched_at[event["op"]]) / 1e6)
        elif kind == "expire":
            if route.get((event["purgatory"], event["op"])) == "other":
                route[event["purgatory"], event["op"]] = "expire"
            op = event["op"]
            due = deadline.get(op, recording.ms(watched_at.get(op, event["t_ns"])) + delay.get(op, 0))
            fired = done.get(op, event["t_ns"])  # onComplete began: onExpiration follows it, however long it runs
            purgatory.lateness_ms.append((fired - recording.t0 // 1_000_000 * 1_000_000) / 1e6 - due)
    for (name, _), how in route.items():
        found[name].completed[how] += 1
    for op, purgatory in watched_in.items():
        purgatory.pending += op not in done
    return found


def colours(purgatories: dict[str, Purgatory]) -> dict[str, str]:
    """One colour per purgatory with ops, the same in every plot and beside its name in the tables."""
    from matplotlib.colors import to_hex

    return {name: to_hex(f"C{number % 10}")
            for number, name in enumerate(sorted(name for name, p in purgatories.items() if p.ops))}


def per_second(purgatory: Purgatory) -> tuple[list, list] | None:
    if not purgatory.entered_s:
        return None
    counts = Counter(int(s) for s in purgatory.entered_s)
    seconds = list(range(max(counts) + 2))
    return seconds, [counts[s] for s in seconds]


def cdf(values: list[float]) -> tuple[list, list] | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered, [(i + 1) / len(ordered) for i in range(len(ordered))]


def gauge(column: int):
    """A purgatory's watched() (1) or numDelayed() (2) at each reaper's advance."""
    return lambda p: ([row[0] for row in p.gauges], [row[column] for row in p.gauges]) if p.gauges else None


#: the plots, each (caption, x label, y label, its series per purgatory, drawn as steps, symlog axis and threshold)
PLOTS = (
    ("Ops entering each purgatory per second (their first watch).", "s since the recording started", "ops/s",
     per_second, True, ("y", 1)),
    ("Expiry lateness: from the deadline Kafka's timer set to the expiry's onComplete, as the fraction of "
     "expirations at most so late (negative: early).", "ms after the deadline", "fraction of expirations",
     lambda p: cdf(p.lateness_ms), True, ("x", 1)),
    ("Latency from an op's watch to its completion, by any route, as the fraction of ops done within it.", "ms",
     "fraction of ops", lambda p: cdf(p.latency_ms), True, ("x", 0.01)),
    ("watched(): watch-list entries, completed ones not yet purged included, at each reaper's advance.",
     "s since the recording started", "entries", gauge(1), False, None),
    ("numDelayed(): ops in the timer, at each reaper's advance.", "s since the recording started", "ops", gauge(2),
     False, None),
)


def plots(purgatories: dict[str, Purgatory], colour: dict[str, str]) -> list[tuple[str, str]]:
    """The PLOTS the recording has data for, each (caption, PNG as base64), a line per purgatory with ops."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for caption, xlabel, ylabel, series, step, symlog in PLOTS:
        lines = [(name, drawn) for name in colour if (drawn := series(purgatories[name]))]
        if not lines:
            continue
        figure, axis = plt.subplots(figsize=(6.4, 3.4), dpi=110, constrained_layout=True)
        for name, (xs, ys) in lines:
            # a purgatory's name is the recording's text: a $ in it would start matplotlib's mathtext
            style = {"color": colour[name], "linewidth": 1, "label": name.replace("$", r"\$")}
            if step:
                axis.step(xs, ys, where="post", **style)
            else:
                axis.plot(xs, ys, **style)
        if symlog:
            which, threshold = symlog
            getattr(axis, f"set_{which}scale")("symlog", linthresh=threshold)
        axis.set(xlabel=xlabel, ylabel=ylabel)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        plt.close(figure)
        made.append((caption, base64.b64encode(buffer.getvalue()).decode()))
    return made


def verdicts(judged: Path, out: Path) -> dict | None:
    """The judge's summary and per-window verdicts, if the recording was judged; each failing window with the path of
    its page relative to ``out``."""
    summary = judged / "summary.json"
    if not summary.is_file():
        return None
    result = {"summary": json.loads(summary.read_text()), "windows": []}
    table = judged / "verdicts.parquet"
    if table.is_dir():
        import pyarrow.parquet as pq

        from kpurgatory.conformance.spark.validate import failing_name
        from kpurgatory.conformance.traces.view import page_path

        rows = pq.read_table(table, columns=["trace", "verdict", "steps", "properties", "failures"]).to_pylist()
        for row in rows:
            page = page_path(judged / "failing" / failing_name(row["trace"]))
            row["page"] = os.path.relpath(page, out) if page.is_file() else None
        result["windows"] = sorted(rows, key=lambda row: row["trace"])
    return result


def write_report(folder: Path, out: Path, allowances: RealTime | None = None, judged: Path | None = None) -> Path:
    """The report of the recording in ``folder`` into ``out``: report.json and index.html, with the verdicts in
    ``judged`` (default: folder/judged); the page's path."""
    recording = read_recording(folder)
    purgatories = dict(sorted(summarize(recording).items()))

    def read(name: str) -> dict | None:
        return json.loads((folder / name).read_text()) if (folder / name).is_file() else None

    broker = read("record.json")
    document = {"recording": str(folder), "kafka_version": recording.kafka_version, "faults": recording.faults,
                "events": len(recording.events), "dropped": sum(count for _, count in recording.drops),
                "ended_cleanly": recording.ended, "allowances": attrs.asdict(allowances or RealTime()),
                "broker": broker and {key: value for key, value in broker.items() if key != "load"},
                "load": read("load.json"), "purgatories": {name: p.to_json() for name, p in purgatories.items()},
                "verdicts": verdicts(judged or folder / "judged", out)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(document, indent=2) + "\n")
    colour = colours(purgatories)
    page = out / "index.html"
    page.write_text(html_page(document, colour, plots(purgatories, colour)))
    return page


# ---------------------------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------------------------


def escape(value: object) -> str:
    return html.escape(str(value), quote=True)


def decimal(value: float) -> str:
    return f"{value:,.{3 if abs(value) < 1 else 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0}f}"


def words(key: str) -> str:
    return key.replace("_", " ")


def value_html(value: object, unit: str = "") -> str:
    """A value for a reader: a number with its unit, yes or no, a dict (one row) or a list of dicts as a small table
    with their fields as columns, another list item by item; a dash for none."""
    if value is None or value == "":
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if unit == "B" and value >= 1e6:
            value, unit = value / 1e6, "MB"
        return escape(f"{f'{value:,}' if isinstance(value, int) else decimal(value)} {unit}".rstrip())
    if isinstance(value, dict):
        value = [value] if value else []
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        keys = list(dict.fromkeys(key for item in value for key in item))
        return table([(words(key), ()) for key in keys], [[cell(item.get(key)) for key in keys] for item in value])
    if isinstance(value, list):
        return ", ".join(value_html(item) for item in value) or "none"
    return escape(value)


def cell(value: object) -> str:
    """A table cell's value: in a table a dash is a zero count (or nothing)."""
    return DASH if type(value) is int and value == 0 else value_html(value)


def table(head: list[tuple[str, tuple[str, ...]]], rows: list[list[str]], numbers: bool = False) -> str:
    """``rows`` of HTML cells under ``head``: (title, its columns) each, a title without columns one column of its
    own; ``numbers``: every column but the first right-aligned."""
    grouped = any(columns for _, columns in head)
    top = "".join(f'<th colspan="{len(columns)}">{escape(title)}</th>' if columns else
                  f'<th{" rowspan=2" if grouped else ""}>{escape(title)}</th>' for title, columns in head)
    sub = "".join(f"<th>{escape(column)}</th>" for _, columns in head for column in columns)
    body = "".join(f"<tr>{''.join(f'<td>{item}</td>' for item in row)}</tr>" for row in rows)
    return (f'<table{" class=numbers" if numbers else ""}><thead><tr>{top}</tr>{f"<tr>{sub}</tr>" if grouped else ""}'
            f"</thead><tbody>{body}</tbody></table>")


def facts(values: dict, known: dict[str, tuple[str, str]]) -> str:
    """``values`` as a definition list: the fields ``known`` names, in its order, in words with their units, then
    any others."""
    keys = [key for key in known if key in values] + [key for key in values if key not in known]
    items = []
    for key in keys:
        name, unit = known.get(key, (words(key), ""))
        items.append(f"<dt>{escape(name)}</dt><dd>{value_html(values[key], unit)}</dd>")
    return f"<dl>{''.join(items)}</dl>"


def block(title: str, body: str, level: int = 2) -> str:
    return f"<div><h{level}>{escape(title)}</h{level}>{body}</div>"


def named(name: str, colour: dict[str, str]) -> str:
    """A purgatory's name, after the colour of its lines in the plots."""
    swatch = f'<span class="swatch" style="background:{colour[name]}"></span>' if name in colour else ""
    return swatch + escape(name)


def outcome_table(purgatories: dict[str, dict], colour: dict[str, str]) -> str:
    routes = [*ROUTES, *sorted({route for p in purgatories.values() for route in p["completed"]} - set(ROUTES))]
    head = [("purgatory", ()), ("ops", ()), ("completed by", tuple(ROUTES.get(route, route) for route in routes)),
            ("still waiting at the end", ()), ("checks", ()), ("purges", ()), ("entries purged", ())]
    rows = [[named(name, colour), cell(p["ops"]), *(cell(p["completed"].get(route, 0)) for route in routes),
             cell(p["pending"]), cell(p["checks"]), cell(p["purges"]), cell(p["purged_entries"])]
            for name, p in purgatories.items()]
    return table(head, rows, numbers=True)


def timing_table(purgatories: dict[str, dict], colour: dict[str, str]) -> str:
    measured = {"expiry_lateness_ms": ("expiry lateness after the deadline (ms)", "expired"),
                "completion_latency_ms": ("watch to completion (ms)", "completed")}
    head = [("purgatory", ())] + [(title, (counted, *STATISTICS[1:])) for title, counted in measured.values()]
    rows = [[named(name, colour), *(cell((p[key] or {}).get(statistic)) for key in measured
                                    for statistic in STATISTICS)]
            for name, p in purgatories.items() if any(p[key] for key in measured)]
    return table(head, rows, numbers=True) if rows else "<p>No op completed.</p>"


def headline(judged: dict | None) -> str:
    """The verdict in one line."""
    if judged is None:
        return '<p class="verdict">Not judged (record-broker --judge, or kpurgatory judge-recording).</p>'
    summary = judged["summary"]
    counts = summary["verdicts"]
    windows = sum(counts.values()) + summary["quarantined_traces"]
    if counts.get("fail"):
        broken = ", ".join(f"{name} in {count:,}" for name, count in summary["properties"].items())
        return (f'<p class="verdict fail">Fails: {counts["fail"]:,} of {windows:,} windows break a property '
                f"({escape(broken)}).</p>")
    also = "".join(f", {count:,} {what}" for count, what in ((counts.get("finding", 0), "with a Kafka finding"),
                                                            (summary["quarantined_traces"], "quarantined")) if count)
    return (f'<p class="verdict pass">Passes: {counts.get("pass", 0):,} of {windows:,} windows hold every '
            f"property{also}.</p>")


def property_meanings() -> dict[str, str]:
    """Each property in the words it is stated in: the concurrent ones, with what the live judge adds."""
    from kpurgatory.conformance.check import concurrent
    from kpurgatory.conformance.live import judge
    from kpurgatory.conformance.traces.view import property_words

    meaning = property_words(concurrent)
    for name, text in property_words(judge).items():
        meaning[name] = f"{meaning[name]} {text}" if name in meaning else text
    return meaning


def verdict_section(judged: dict | None) -> str:
    if judged is None:
        return headline(judged)

    def window(row: dict) -> str:
        if not row.get("page"):
            return escape(row["trace"])
        return f'<a href="{escape(urllib.parse.quote(row["page"]))}">{escape(row["trace"])}</a>'

    windows = judged["windows"]
    parts = [facts(judged["summary"], JUDGE)]
    failing = [[window(row), escape(row["verdict"]), cell(row["steps"]), value_html(row["properties"]),
                escape(shortened(row["failures"] or ""))] for row in windows if row["verdict"] != "pass"]
    if failing:
        head = [(title, ()) for title in ("window", "verdict", "steps", "properties", "why")]
        parts.append(f"<h3>Windows that did not pass</h3>{table(head, failing)}<p>Each failing window is a history "
                     f"in judged/failing/, with its page (linked).</p>")
    meaning = property_meanings()
    broken = "".join(f"<dt>{escape(name)}</dt><dd>{escape(meaning.get(name, ''))}</dd>"
                     for name in judged["summary"]["properties"])
    if broken:
        parts.append(f"<h3>The properties they break</h3><dl>{broken}</dl>")
    if windows:
        rows = [[window(row), escape(row["verdict"]), cell(row["steps"])] for row in windows]
        parts.append(f"<details><summary>All {len(windows):,} windows</summary>"
                     f"{table([('window', ()), ('verdict', ()), ('steps', ())], rows)}</details>")
    return "".join(parts)


def shortened(text: str, most: int = 400) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 6px} h2{font-size:18px;margin:26px 0 8px} h3{font-size:15px;margin:14px 0 6px}
.verdict{font-size:15px;padding:6px 10px;border-radius:4px;background:#eee;display:inline-block}
.verdict.fail{background:#fde2e1;color:#8a1c14} .verdict.pass{background:#e2f4e4;color:#1d5e26}
.facts{display:flex;flex-wrap:wrap;gap:4px 48px;align-items:flex-start} .facts>div{min-width:0;max-width:100%}
dl{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:3px 14px;margin:0}
dt{color:#555} dd{margin:0;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:4px 0 12px}
th,td{border:1px solid #ccc;padding:3px 7px;font-size:13px;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f4f4f4;font-weight:600}
table.numbers td+td{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
dd table{margin:0} dd th,dd td{padding:1px 6px}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,520px),1fr));gap:18px}
figure{margin:0} figure img{width:100%;height:auto} figcaption{font-size:13px;color:#444}
"""


def html_page(document: dict, colour: dict[str, str], figures: list[tuple[str, str]]) -> str:
    """The report's page: ``document`` (report.json) in tables and definition lists, and the ``figures`` (caption,
    PNG as base64)."""
    load = document["load"]
    about = [block("Recording", facts({key: document[key] for key in RECORDING}, RECORDING))]
    if document["broker"]:
        about.append(block("Broker", facts(document["broker"], BROKER)))
    about.append(block("Allowances judged with", facts(document["allowances"], ALLOWANCES)))
    if load:
        settings = {key: value for key, value in load.items() if key in LOAD_SETTINGS}
        results = {key: value for key, value in load.items() if key not in LOAD_SETTINGS}
        load_html = (f'<div class="facts">{block("Settings", facts(settings, LOAD_SETTINGS), 3)}'
                     f'{block("What it did", facts(results, LOAD_RESULTS), 3)}</div>')
    else:
        load_html = "<p>No load.json: the load did not finish.</p>"
    plotted = "".join(f'<figure><img alt="{escape(caption)}" src="data:image/png;base64,{image}">'
                      f"<figcaption>{escape(caption)}</figcaption></figure>" for caption, image in figures)
    release = escape(document["kafka_version"])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>kpurgatory live recording: Apache Kafka {release}</title><style>{STYLE}</style></head>
<body>
<h1>Live recording: Apache Kafka {release}</h1>
{headline(document["verdicts"])}
<div class="facts">{"".join(about)}</div>
<h2>Load</h2>{load_html}
<h2>Purgatories</h2>
<h3>How ops ended</h3>{outcome_table(document["purgatories"], colour)}
<h3>Timing</h3>{timing_table(document["purgatories"], colour)}
<div class="plots">{plotted}</div>
<h2>Verdicts</h2>{verdict_section(document["verdicts"])}
</body></html>
"""
