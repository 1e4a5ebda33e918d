"""An agent's event log written by hand in the agent's interface (conformance/live/README.md, "The event log"), for
the live recording's tests; and `busy`, a judged recording of a few seconds with the files a real one has beside its
events."""

import json
from pathlib import Path

T0 = 7_000_000_000_000  # a nanoTime origin, as a JVM might have it


class Log:
    """An agent's event log, written event by event at a wall-clock millisecond."""

    def __init__(self, kafka_version: str = "3.9.1"):
        self.files = [[{"ev": "begin", "format": "kpurgatory-live", "version": 1, "kafka_version": kafka_version,
                        "pid": 42, "file": 0, "t_ns": T0, "faults": ""}]]
        self.ns = T0

    def at(self, ms: float) -> "Log":
        self.ns = T0 + int(ms * 1_000_000)
        return self

    def ev(self, thread: str, ev: str, **fields) -> "Log":
        self.ns += 1000  # events of one millisecond keep their order
        self.files[-1].append({"t_ns": self.ns, "thread": thread, "tid": hash(thread) % 1000, "ev": ev, **fields})
        return self

    # purgatory calls, each as the agent records it
    def watch(self, thread, op, keys, delay_ms, result=False, tries=2, purgatory="Fetch", added=True):
        self.ev(thread, "watch", phase="call", purgatory=purgatory, op=op, opclass="DelayedFetch", keys=keys,
                delay_ms=delay_ms)
        for attempt in range(1 if result else tries):
            if result:
                self.ev(thread, "complete", purgatory=purgatory, op=op)
                self.ev(thread, "force", phase="return", purgatory=purgatory, op=op, result=True)
            self.ev(thread, "try", phase="return", purgatory=purgatory, op=op, result=result)
        if not result and added:
            self.ev(thread, "timer_add", timer=f"executor-{purgatory}", task=op, delay_ms=delay_ms, op=op)
        return self.ev(thread, "watch", phase="return", purgatory=purgatory, op=op, result=result)

    def check(self, thread, key, completes=(), purgatory="Fetch", twice=False):
        self.ev(thread, "check", phase="call", purgatory=purgatory, key=key)
        for op in completes:
            self.ev(thread, "complete", purgatory=purgatory, op=op)
            if twice:
                self.ev(thread, "complete", purgatory=purgatory, op=op)
            self.ev(thread, "force", phase="return", purgatory=purgatory, op=op, result=True)
            self.ev(thread, "try", phase="return", purgatory=purgatory, op=op, result=True)
        return self.ev(thread, "check", phase="return", purgatory=purgatory, key=key, result=len(completes))

    def expire(self, op, purgatory="Fetch", twice=False):
        thread = f"executor-{purgatory}"
        self.ev(thread, "complete", purgatory=purgatory, op=op)
        if twice:
            self.ev(thread, "complete", purgatory=purgatory, op=op)
        self.ev(thread, "force", phase="return", purgatory=purgatory, op=op, result=True)
        return self.ev(thread, "expire", purgatory=purgatory, op=op)

    def advance(self, start_ms, end_ms, delayed=0, watched=0, purged=None, purgatory="Fetch"):
        thread = f"ExpirationReaper-0-{purgatory}"
        self.at(start_ms).ev(thread, "advance", phase="call", purgatory=purgatory, timeout_ms=200, delayed=delayed,
                             watched=watched)
        extra = {} if purged is None else {"purged": purged}
        return self.at(end_ms).ev(thread, "advance", phase="return", purgatory=purgatory, timeout_ms=200,
                                  delayed=delayed, watched=watched, **extra)

    def end(self) -> "Log":
        self.files[-1].append({"ev": "end", "t_ns": self.ns + 1000})
        return self

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for number, lines in enumerate(self.files):
            (folder / f"events-{number}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        return folder


#: a purgatory name that is markup, with a $ that would start matplotlib's mathtext
STRANGE = "<script>alert(1)</script> $\\sqrt$"
#: the load's first client failure, as a client's exception message may carry markup
FAILURE = "java.lang.IllegalStateException: There are no in-flight requests for node <b>1</b>"


def busy(folder: Path, seconds: int = 4) -> Path:
    """A judged recording in ``folder``: per second more produces, each complete in its own watch; two fetches, one
    completed by a check, one expired 1 ms late, while the reaper's advances read the watch lists (a purge in the
    third second); an op of the STRANGE purgatory expired early; a DeleteRecords check that completes nothing; a
    Heartbeat op forced by other code; a fetch still waiting at the end. Beside it load.json, record.json, and
    judged/ with a summary, verdicts (the STRANGE purgatory's window failing on_time) and the failing window's page."""
    log = Log()
    for second in range(seconds):
        base = second * 1000
        for n in range(5 * (second + 1)):
            log.at(base + n * 10).watch("produce-handler", f"Produce-{second}-{n}", ["p-0"], 30_000, result=True,
                                        purgatory="Produce")
        log.at(base + 5).watch("fetch-handler", f"Fetch-{second}-a", [f"t-{second}"], 500)
        log.at(base + 7).watch("fetch-handler", f"Fetch-{second}-b", [f"u-{second}"], 300)
        log.at(base + 20).watch("strange-handler", f"S-{second}", ["k"], 50, purgatory=STRANGE)
        log.at(base + 30).check("delete-handler", f"t-{second}", purgatory="DeleteRecords")
        log.at(base + 40).expire(f"S-{second}", purgatory=STRANGE)
        log.at(base + 100).check("fetch-handler", f"t-{second}", [f"Fetch-{second}-a"])
        log.at(base + 308).expire(f"Fetch-{second}-b")
        log.advance(base + 400, base + 600, delayed=1, watched=second, purged=2 if second == 2 else None)
    log.at(50).watch("group-handler", "Heartbeat-1", ["member-1"], 3000, purgatory="Heartbeat")
    log.at(60).ev("group-coordinator", "complete", purgatory="Heartbeat", op="Heartbeat-1")
    log.ev("group-coordinator", "force", phase="return", purgatory="Heartbeat", op="Heartbeat-1", result=True)
    log.at(seconds * 1000 - 100).watch("fetch-handler", "Fetch-pending", ["t-9"], 30_000)
    log.end().write(folder)
    load = {"seconds": 20.373, "producers": 2, "consumers": 2, "rate_per_producer": 500, "record_bytes": 200,
            "records_sent": 19827, "records_acked": 19827, "records_consumed": 19750, "errors": 0,
            "delete_records_requests": 9, "producer_requests": 6132, "fetch_requests": 167, "acked_per_s": 973.2,
            "consumed_per_s": 969.4, "client_failures": 1, "first_failure": FAILURE, "churn_joins": 0}
    (folder / "load.json").write_text(json.dumps(load) + "\n")
    record = {"agent": True, "agent_options": "fault=early_expire", "purge_interval": 100, "broker_start_s": 7.807,
              "broker_stop_s": 1.215, "broker_exit": 143, "broker_cpu_s_during_load": 11.18,
              "event_files": [{"file": "events-0.jsonl", "bytes": 13327926}], "event_bytes": 13327926, "load": load}
    (folder / "record.json").write_text(json.dumps(record) + "\n")
    judged = folder / "judged"
    (judged / "failing").mkdir(parents=True)
    names = ["DeleteRecords", "Fetch", "Heartbeat", "Produce", "_script_alert_1___script___sqrt_"]
    windows = [{"trace": f"rec.{name}.0001", "verdict": "pass", "steps": 40, "properties": None, "failures": None}
               for name in names[:-1]]
    failure = (f"op S-0 expired while the clock read at most 40, before the start 70 of its deadline's tick "
               f"(purgatory {STRANGE})")
    windows.append({"trace": f"rec.{names[-1]}.0001", "verdict": "fail", "steps": 17, "properties": ["on_time"],
                    "failures": failure})
    (judged / "failing" / f"rec.{names[-1]}.0001.html").write_text("<!doctype html><title>window</title>\n")
    summary = {"level": "contract", "files": 1, "input_rows": 260, "checked_rows": 260, "quarantined_rows": 0,
               "verdicts": {"pass": 4, "fail": 1, "finding": 0}, "findings": {}, "properties": {"on_time": 1},
               "quarantine": {}, "quarantined_traces": 0, "steps_checked": 240, "seconds": 3.2, "failing_files": 1,
               "events_per_second": 81.3}
    (judged / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    (judged / "verdicts.parquet").mkdir()
    pq.write_table(pa.Table.from_pylist(windows), judged / "verdicts.parquet" / "part-00000.parquet")
    return folder
