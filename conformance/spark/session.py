"""Starting Spark from the kpurgatory command line: quiet, friendly, sized for a small machine.

What a user of ``kpurgatory validate-traces`` should see is kpurgatory's output, not the JVM's: logs go through a
log4j2 file at ERROR, the UI and console progress bar are off, the driver binds loopback when every executor is on
this host (SPARK_LOCAL_IP, so no hostname warnings or DNS lookups; on a cluster the driver's address is the user's to
give, see `on_this_host`), and workers run this interpreter (PYSPARK_PYTHON), not whatever ``python3`` is on PATH.
A missing Java is one clear error before any JVM is attempted. Defaults suit a 2-core / 24 GiB machine; every setting
can be overridden with ``--conf key=value``. ``.master()`` is called only for ``--master``: under
spark-submit the submitter's master wins, and plain ``kpurgatory`` runs on ``local[2]``.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import ipaddress
import logging
import os
import shutil
import sys
import threading
import urllib.parse
from typing import Iterator

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

LOCAL_MASTER = "local[2]"

#: JVM-level settings apply only to the first session of a process (getOrCreate returns it afterwards)
DEFAULTS = {
    "spark.driver.memory": "4g",  # local mode runs executors in the driver's JVM; sorts spill to disk beyond this
    "spark.sql.shuffle.partitions": "8",  # 4 per core: no core idles on the last partition, the progress bar moves
    # replay costs CPU per row, not per byte: never merge the shuffle's partitions into fewer, busier ones
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


class SparkUnavailable(click.ClickException):
    """Spark cannot start here; the message says what to install. The tool cannot run: exit 3."""

    exit_code = 3


def java_executable() -> str:
    """The java Spark will launch: JAVA_HOME's if set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not candidate or not os.access(candidate, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no `java` on PATH and JAVA_HOME is not set"
        raise SparkUnavailable(f"Spark needs Java 17 or later, and {where}. Install a JDK (for example "
                               f"`apt-get install openjdk-17-jre-headless`) or point JAVA_HOME at one.")
    return candidate


def parse_conf(pairs: tuple[str, ...]) -> dict[str, str]:
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--conf")
        settings[key.strip()] = value
    return settings


def log4j_file() -> str:
    return str(importlib.resources.files("kpurgatory.conformance.spark").joinpath("log4j2.properties"))


def quiet_java_options() -> str:
    """The JVM options that send a driver's or executor's logs through `log4j_file`."""
    return f"-Dlog4j2.configurationFile=file:{log4j_file()}"


def on_this_host(master: str) -> bool:
    """Whether every executor of ``master`` runs on this host's loopback: local mode, or a standalone master at a
    loopback address. Only then may the driver bind loopback; executors elsewhere must reach it on the network."""
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    return all(loopback(urllib.parse.urlsplit(f"spark://{address}").hostname) for address in master[8:].split(","))


def loopback(host: str | None) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def get_session(master: str | None = None, conf: dict[str, str] | None = None, app: str = "kpurgatory"):
    """The process's SparkSession, created quietly on first use (see the module docstring)."""
    java_executable()
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailable("PySpark is not installed: pip install 'kpurgatory[spark]'") from None
    if on_this_host(master or LOCAL_MASTER) and not {"spark.driver.host", "spark.driver.bindAddress"} & set(conf or {}):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    settings = {**DEFAULTS,
                "spark.pyspark.python": sys.executable,
                "spark.driver.extraJavaOptions": quiet_java_options(),
                "spark.executor.extraJavaOptions": quiet_java_options(),
                **(conf or {})}
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.master(LOCAL_MASTER)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    # py4j reports a connection an interruption broke through the root logger, whose first use would give it a
    # stderr handler: tracebacks before the one line an interrupted command prints
    if not logging.root.handlers:
        logging.root.addHandler(logging.NullHandler())
    return session


spark_options = [
    click.option("--master", metavar="URL", help="Spark master (default: local[2], or spark-submit's)."),
    click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="A Spark setting (repeatable)."),
]


def with_spark_options(function):
    for option in reversed(spark_options):
        function = option(function)
    return function


@contextlib.contextmanager
def progress(session, description: str) -> Iterator[None]:
    """A progress bar of the running stages' tasks on stderr while the block runs (terminals only; it restarts with
    each stage)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    tracker = session.sparkContext.statusTracker()
    done = threading.Event()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(description, total=None)

        def poll() -> None:
            while not done.wait(0.5):
                stages = [info for info in map(tracker.getStageInfo, tracker.getActiveStageIds()) if info]
                if stages:
                    bar.update(task, total=sum(s.numTasks for s in stages),
                               completed=sum(s.numCompletedTasks for s in stages))

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            yield
        finally:
            done.set()
            poller.join()
