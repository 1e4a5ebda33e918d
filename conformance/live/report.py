"""The report of a live recording (``kpurgatory record-broker --judge``, or `write_report`): per purgatory, how many
ops it had and how they ended (completed by which route, or expired), how late expirations fired after their deadline,
what the purges removed, and the watch lists' size over time; the load's throughput; and the judge's verdicts when
the recording was judged (``judged/summary.json``, ``judged/verdicts.parquet``). Written as ``report.json`` and a
self-contained ``index.html`` with the plots (matplotlib, PNG inline).

An expiration's lateness is measured from its deadline as Kafka's timer set it: the wall clock in whole milliseconds
when the op entered the timer (its ``timer_add``, else its watch's call) plus its delay, to the nanoTime at which its
expiry's ``onComplete`` began (``onExpiration`` runs after it, however long that takes).
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import Counter, defaultdict
from pathlib import Path

import attrs

from kpurgatory.conformance.live.recording import Recording, read_recording
from kpurgatory.model.contract import RealTime

PERCENTILES = (0.5, 0.9, 0.99, 1.0)


@attrs.define
class Purgatory:
    """What one purgatory did in a recording."""

    name: str
    ops: int = 0
    completed: Counter = attrs.Factory(Counter)  # route -> ops: watch (its own tries), check, expire, other
    checks: int = 0
    purges: int = 0
    purged: int = 0
    lateness_ms: list[float] = attrs.Factory(list)
    latency_ms: list[float] = attrs.Factory(list)  # watch to completion
    gauges: list[tuple[float, int, int]] = attrs.Factory(list)  # (s, watched, delayed) at each reaper return

    def to_json(self) -> dict:
        return {"ops": self.ops, "completed": dict(self.completed), "checks": self.checks, "purges": self.purges,
                "purged_entries": self.purged, "expiry_lateness_ms": percentiles(self.lateness_ms),
                "completion_latency_ms": percentiles(self.latency_ms)}


def percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {f"p{round(q * 100)}": round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)
            for q in PERCENTILES} | {"count": len(ordered)}


def summarize(recording: Recording) -> dict[str, Purgatory]:
    """Per purgatory, from the raw events."""
    found: dict[str, Purgatory] = {}
    watched_at: dict[str, int] = {}  # op -> its first watch's call (ns)
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
                watched_at[event["op"]], delay[event["op"]] = event["t_ns"], event["delay_ms"]
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
    return found


def plot(purgatories: dict[str, Purgatory]) -> bytes:
    """Four panels as a PNG: watched() and delayed over time, expiry lateness and completion latency CDFs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ((watched, delayed), (late, latency)) = plt.subplots(2, 2, figsize=(14, 9), constrained_layout=True)
    for number, purgatory in enumerate(p for p in purgatories.values() if p.ops):
        colour = f"C{number % 10}"  # one colour per purgatory in every panel
        times = [s for s, _, _ in purgatory.gauges]
        watched.plot(times, [w for _, w, _ in purgatory.gauges], linewidth=0.8, color=colour, label=purgatory.name)
        delayed.plot(times, [d for _, _, d in purgatory.gauges], linewidth=0.8, color=colour, label=purgatory.name)
        for axis, values in ((late, purgatory.lateness_ms), (latency, purgatory.latency_ms)):
            if values:
                ordered = sorted(values)
                axis.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post",
                          color=colour, label=f"{purgatory.name} ({len(ordered)})")
    watched.set(title="watched(): watch-list entries, stale ones included (at each reaper return)",
                xlabel="s since the recording started", ylabel="entries")
    delayed.set(title="numDelayed(): ops in the timer", xlabel="s since the recording started", ylabel="ops")
    late.set(title="expiration lateness: the expiry's onComplete - deadline", xlabel="ms",
             ylabel="fraction of expirations")
    latency.set(title="latency from watch to completion", xlabel="ms", xscale="symlog", ylabel="fraction of ops")
    for axis in (watched, delayed, late, latency):
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def verdicts(judged: Path) -> dict | None:
    """The judge's summary and per-window verdicts, if the recording was judged."""
    summary = judged / "summary.json"
    if not summary.is_file():
        return None
    result = {"summary": json.loads(summary.read_text()), "windows": []}
    table = judged / "verdicts.parquet"
    if table.is_dir():
        import pyarrow.parquet as pq

        rows = pq.read_table(table, columns=["trace", "verdict", "steps", "properties", "failures"]).to_pylist()
        result["windows"] = sorted(rows, key=lambda row: row["trace"])
    return result


def write_report(folder: Path, out: Path, allowances: RealTime | None = None, judged: Path | None = None) -> Path:
    """The report of the recording in ``folder`` into ``out``: report.json and index.html, with the verdicts in
    ``judged`` (default: folder/judged); the page's path."""
    recording = read_recording(folder)
    purgatories = summarize(recording)
    load = json.loads((folder / "load.json").read_text()) if (folder / "load.json").is_file() else None
    judged = verdicts(judged or folder / "judged")
    document = {"recording": str(folder), "kafka_version": recording.kafka_version, "faults": recording.faults,
                "events": len(recording.events), "dropped": sum(count for _, count in recording.drops),
                "ended_cleanly": recording.ended, "allowances": attrs.asdict(allowances or RealTime()),
                "load": load, "purgatories": {name: p.to_json() for name, p in sorted(purgatories.items())},
                "verdicts": judged}
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(document, indent=2) + "\n")
    image = base64.b64encode(plot(purgatories)).decode()
    page = out / "index.html"
    page.write_text(html_page(document, image))
    return page


def html_page(document: dict, image: str) -> str:
    escape = html.escape
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{p['ops']:,}</td><td>{escape(json.dumps(p['completed']))}</td>"
        f"<td>{p['checks']:,}</td><td>{p['purges']:,} ({p['purged_entries']:,} entries)</td>"
        f"<td>{escape(json.dumps(p['expiry_lateness_ms']))}</td></tr>"
        for name, p in document["purgatories"].items())
    judged = document["verdicts"]
    verdict_html = "<p>not judged (record-broker --judge, or kpurgatory judge-recording)</p>"
    if judged:
        windows = "".join(
            f"<tr><td>{escape(w['trace'])}</td><td>{escape(w['verdict'])}</td><td>{w['steps']:,}</td>"
            f"<td>{escape(', '.join(w['properties'] or []))}</td><td>{escape((w['failures'] or '')[:400])}</td></tr>"
            for w in judged["windows"])
        verdict_html = (f"<pre>{escape(json.dumps(judged['summary'], indent=2))}</pre><table><tr><th>window</th>"
                        f"<th>verdict</th><th>steps</th><th>properties</th><th>why</th></tr>{windows}</table>"
                        f"<p>Failing windows: judged/failing/ (each .jsonl with its .html page).</p>")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>kpurgatory live recording</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 6px;font-size:13px;text-align:left}}</style></head><body>
<h1>Live recording: Apache Kafka {escape(str(document['kafka_version']))}</h1>
<p>{escape(document['recording'])}: {document['events']:,} events, {document['dropped']:,} dropped,
faults: {escape(str(document['faults']))}, {'ended cleanly' if document['ended_cleanly'] else 'cut'}.
Allowances: {escape(json.dumps(document['allowances']))}.</p>
<h2>Load</h2><pre>{escape(json.dumps(document['load'], indent=2))}</pre>
<h2>Purgatories</h2><table><tr><th>purgatory</th><th>ops</th><th>completed by</th><th>checks</th><th>purges</th>
<th>expiry lateness (ms)</th></tr>{rows}</table>
<img alt="plots" src="data:image/png;base64,{image}">
<h2>Verdicts</h2>{verdict_html}
</body></html>
"""
