"""``kpurgatory record-broker``: record a real Kafka broker's purgatories under client load, and optionally judge
and report the recording.

The Java side (conformance/live/README.md) does the recording: ``kpurgatory.live.Record`` starts a single-node KRaft
broker of the release (with the agent, or without it for the overhead comparison), runs the load, stops everything
and writes ``DIR/events-<n>.jsonl``, ``DIR/load.json``, ``DIR/record.json`` and ``DIR/broker.log``. This command
resolves what it needs with Maven (``mvn``, into ~/.m2), as ``--kafka`` does for the adapter: the broker's classpath
from ``broker-pom.xml`` and the agent jar from ``pom.xml``, both remembered under ``$KPURGATORY_CACHE`` (the jar
built once per version of its sources).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from kpurgatory.conformance.adapters.kafka import cache_dir
from kpurgatory.conformance.live.judge import allowance_options, judge_on_spark
from kpurgatory.conformance.spark.session import with_spark_options
from kpurgatory.conformance.terminal import safe
from kpurgatory.model.contract import RealTime

HERE = Path(__file__).parent
BROKER_POM = HERE / "broker-pom.xml"
AGENT_POM = HERE / "pom.xml"
MVN_TIMEOUT_S = 900
VERSION = re.compile(r"[0-9]+(\.[0-9]+){1,3}")
#: the agent's faults (its option fault=NAME)
FAULTS = ("double_complete", "early_expire", "skip_watcher_removal")


class ToolBroke(click.ClickException):
    """Maven, Java or the recorder failed: exit 3."""

    exit_code = 3


def maven(arguments: list[str], what: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ToolBroke(f"cannot {what}: Maven (mvn) is not installed")
    command = [mvn, "-q", "-B", *arguments]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=MVN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ToolBroke(f"cannot {what}: Maven took over {MVN_TIMEOUT_S} s") from None
    if done.returncode != 0:
        errors = [line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line][:6]
        raise ToolBroke(f"cannot {what} ({' '.join(map(shlex.quote, command))}):\n" + safe("\n".join(errors)))


def broker_classpath(version: str) -> str:
    """The release's broker classpath, resolved by Maven once and remembered (named after the pom and version)."""
    key = hashlib.sha256((BROKER_POM.read_text() + version).encode()).hexdigest()[:12]
    remembered = cache_dir().parent / "live-brokers" / f"{version}-{key}.classpath"
    if remembered.is_file():
        classpath = remembered.read_text().strip()
        if classpath and all(Path(jar).is_file() for jar in classpath.split(":")):
            return classpath
    remembered.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        output = Path(work) / "classpath"
        maven(["-f", str(BROKER_POM), "dependency:build-classpath", f"-Dmdep.outputFile={output}",
               f"-Dkafka.version={version}"], f"resolve Kafka {version}'s broker")
        classpath = output.read_text().strip()
    with tempfile.NamedTemporaryFile("w", dir=remembered.parent, delete=False) as written:
        written.write(classpath + "\n")
    os.replace(written.name, remembered)
    return classpath


def agent_jar() -> Path:
    """The agent and recorder jar of the sources as they are, built by Maven in a copy of the project (the build
    others run in target/ is left alone) and kept under ``$KPURGATORY_CACHE``, named after the sources."""
    sources = sorted([AGENT_POM, *(HERE / "src").rglob("*.java")])
    digest = hashlib.sha256()
    for path in sources:
        digest.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes() + b"\0")
    jar = cache_dir().parent / "live-agent" / f"kpurgatory-live-{digest.hexdigest()[:12]}.jar"
    if jar.is_file():
        return jar
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        shutil.copy(AGENT_POM, Path(work) / "pom.xml")
        shutil.copytree(HERE / "src", Path(work) / "src")
        maven(["-f", str(Path(work) / "pom.xml"), "package", "-DskipTests"], "build the live agent")
        with tempfile.NamedTemporaryFile("wb", dir=jar.parent, delete=False) as written:
            written.write((Path(work) / "target" / "kpurgatory-live.jar").read_bytes())
    os.replace(written.name, jar)
    return jar


def record(version: str, out: Path, seconds: int, agent: bool, fault: str | None, load: dict[str, int]) -> dict:
    """Run the Java recorder; its summary (record.json) as a dict."""
    java = shutil.which("java")
    if java is None:
        raise ToolBroke("cannot record: java is not installed")
    classpath, jar = broker_classpath(version), agent_jar()
    command = [java, "-cp", f"{jar}:{classpath}", "kpurgatory.live.Record", "--kafka-classpath", classpath,
               "--out", str(out), "--seconds", str(seconds),
               *(item for name, value in load.items() if value is not None
                 for item in (f"--{name.replace('_', '-')}", str(value)))]
    if agent:
        command += ["--agent", str(jar)] + (["--agent-options", f"fault={fault}"] if fault else [])
    # The recorder's standard input is a pipe only this process writes to, and never does: when this process ends,
    # even by SIGKILL, the recorder sees its end and stops, and its broker with it (Lifeline.java).
    lifeline, held = os.pipe()
    try:
        process = subprocess.Popen([*command, "--until-stdin-closes"], stdin=lifeline, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
    finally:
        os.close(lifeline)
    try:
        stdout, stderr = process.communicate(timeout=seconds + 300)
    except BaseException:  # a timeout or an interruption: the recorder stops its broker on SIGTERM
        process.terminate()
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
        raise
    finally:
        os.close(held)
    if process.returncode == 2:
        raise click.UsageError(f"the recorder refused its arguments: {safe(stderr.strip()[-2000:])}")
    if process.returncode != 0:
        raise ToolBroke(f"the recorder failed (exit {process.returncode}): {safe(stderr.strip()[-2000:])}")
    summary = out / "record.json"
    return json.loads(summary.read_text()) if summary.is_file() else json.loads(stdout.strip().splitlines()[-1])


@click.command("record-broker")
@click.option("--kafka", "version", default="3.9.1", show_default=True,
              help="The Apache Kafka release whose broker is recorded (resolved from Maven Central).")
@click.option("--seconds", type=click.IntRange(1), default=300, show_default=True, help="How long the load runs.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The recording folder (events, load and broker log; judged/ and report/ with --judge).")
@click.option("--no-agent", is_flag=True, help="Run the broker without the agent (the overhead comparison).")
@click.option("--fault", type=click.Choice(FAULTS), default=None,
              help="A purgatory bug the agent plants in the broker (conformance/live/README.md).")
@click.option("--producers", type=click.IntRange(0), default=None, help="Producer clients [recorder's default].")
@click.option("--consumers", type=click.IntRange(0), default=None, help="Consumer clients [recorder's default].")
@click.option("--rate", type=click.IntRange(0), default=None, help="Records/s per producer [recorder's default].")
@click.option("--purge-interval", type=click.IntRange(1), default=None,
              help="The broker's produce and fetch purgatories' purge interval (Kafka: 1000) [recorder's default].")
@click.option("--churn-every-ms", type=click.IntRange(0), default=None,
              help="A consumer joins the group and leaves every this many ms, so 3.x's Rebalance ops wait "
                   "[recorder's default: off].")
@click.option("--judge/--no-judge", default=False, show_default=True,
              help="Judge the recording on Spark and write its report.")
@allowance_options
@with_spark_options
def record_broker_command(version, seconds, out, no_agent, fault, producers, consumers, rate, purge_interval,
                          churn_every_ms, judge, window, executor_lag_ms, clock_granularity_ms, reaper_ms, master,
                          conf):
    """Record a real Kafka broker's purgatories under client load (a single-node KRaft broker on loopback, with the
    live agent), then, with --judge, judge the recording against the concurrent properties on Spark and write its
    report (OUT/report/index.html).

    Exits 0 when the recording was made (and, judged, passes), 1 when a judged window fails, 2 on bad usage or
    windows not judged (events dropped), 3 when Maven, Java or the broker broke."""
    if not VERSION.fullmatch(version):
        raise click.BadParameter(f"{version!r} is not a release number (e.g. 3.9.1)", param_hint="--kafka")
    if no_agent and (judge or fault):
        raise click.UsageError("--no-agent records nothing to judge or fault: drop --judge and --fault")
    if out.exists() and any(out.iterdir()):
        raise click.UsageError(f"{safe(out)} is not empty: give a new folder")
    summary = record(version, out, seconds, not no_agent, fault,
                     {"producers": producers, "consumers": consumers, "rate": rate, "purge_interval": purge_interval,
                      "churn_every_ms": churn_every_ms})
    click.echo(json.dumps(summary.get("load", summary), separators=(", ", ": ")))
    if not judge:
        sys.exit(0)
    allowances = RealTime(clock_granularity_ms, executor_lag_ms, reaper_ms)
    code = judge_on_spark(out, out / "judged", allowances, window, master, conf)
    from kpurgatory.conformance.live.report import write_report

    click.echo(f"report: {safe(write_report(out, out / 'report', allowances))}")
    sys.exit(code)
