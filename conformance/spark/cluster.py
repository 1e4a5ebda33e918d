"""A Spark standalone cluster started from the installed PySpark: one master and N workers, for the tests and
``kpurgatory spark-bench``.

The pip package ships no ``start-master.sh``, so each daemon is ``$SPARK_HOME/bin/spark-class`` with the master's or
the worker's main class, SPARK_HOME being the pyspark package's folder. Each daemon binds the address of its `Host`
(SPARK_LOCAL_IP and SPARK_LOCAL_HOSTNAME set to it too, so nothing is advertised under a name another host may not
resolve, and no DNS lookup happens) and may be launched through a command prefix, such as ``ip netns exec NAME`` for a
host that is a network namespace. Ports are 0, chosen by the daemons themselves (no race with other programs on a
shared loopback): the master's URL is read from its log.

Ready means what the daemons say in their logs (kept in files, one per daemon): the master "I have been elected
leader", then every worker "Successfully registered with master". A daemon that exits first, or a cluster not ready in
time, is a `ClusterError` naming the daemon, its log file and the log's last lines (exit 3 on the command line).

The cluster owns its daemons' whole process trees: the worker's executors and the Python daemon under each executor,
which puts itself in a process group of its own, so killing process groups is not enough. `stop_tree` suspends a tree
top-down until no new process appears, then kills it, so nothing forks away or is reparented out of reach in between.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import attrs
import click
import psutil

from kpurgatory.conformance.spark.session import java_executable
from kpurgatory.conformance.terminal import safe

LOG_TAIL_LINES = 15
READY_TIMEOUT_S = 180.0
POLL_S = 0.2

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MASTER_URL = r"Starting Spark master at (spark://\S+)"
MASTER_UI = r"MasterWebUI.* started at (http://\S+)"
LEADER = "I have been elected leader"
REGISTERED = "Successfully registered with master"


class ClusterError(click.ClickException):
    """A daemon of the cluster failed to start or become ready: the tool cannot run (exit 3)."""

    exit_code = 3


@attrs.frozen
class Host:
    """Where a daemon runs: the address it binds and advertises, and the command prefix that puts it there."""

    address: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()


@attrs.define
class Daemon:
    name: str
    log: Path
    process: subprocess.Popen

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self) -> str:
        return safe("\n".join(self.text().splitlines()[-LOG_TAIL_LINES:]))


@attrs.frozen
class Cluster:
    url: str  # spark://ADDRESS:PORT, what drivers pass as --master
    status_url: str  # the master's JSON status (http://ADDRESS:PORT/json/), reachable from the master's host
    master: Daemon
    workers: list[Daemon]


def spark_home() -> Path:
    try:
        import pyspark
    except ImportError:
        raise ClusterError("PySpark is not installed: pip install 'kpurgatory[spark]'") from None
    return Path(pyspark.__file__).parent


def launch(name: str, host: Host, arguments: list[str], folder: Path) -> Daemon:
    """Start one daemon in a session of its own, its stdout and stderr into ``folder/NAME.log``."""
    home = spark_home()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": host.address,
           "SPARK_LOCAL_HOSTNAME": host.address, "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
           "PYSPARK_PYTHON": sys.executable}
    log = folder / f"{name.replace(' ', '-')}.log"
    command = [*host.prefix, str(home / "bin" / "spark-class"), *arguments]
    with open(log, "wb") as output:
        try:
            process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=output,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as error:
            raise ClusterError(f"cannot start the {name} ({' '.join(command)}): {error}") from None
    return Daemon(name, log, process)


def wait_for(daemon: Daemon, ready: str, deadline: float, everyone: list[Daemon]) -> re.Match:
    """The first match of ``ready`` in the daemon's log; a `ClusterError` if any daemon exits or time runs out."""
    pattern = re.compile(ready)
    while True:
        found = pattern.search(daemon.text())
        if found:
            return found
        for other in everyone:
            if other.process.poll() is not None:
                raise ClusterError(f"the Spark {other.name} exited with code {other.process.returncode} before the "
                                   f"cluster was ready; its log {other.log} ends:\n{other.tail()}")
        if time.monotonic() > deadline:
            raise ClusterError(f"the Spark {daemon.name} did not log {ready!r} in time; its log {daemon.log} "
                               f"ends:\n{daemon.tail()}")
        time.sleep(POLL_S)


@contextlib.contextmanager
def standalone(folder: Path, workers: list[Host], master: Host = Host(), cores: int = 1, memory: str = "1g",
               timeout: float = READY_TIMEOUT_S) -> Iterator[Cluster]:
    """A running master on ``master`` and one worker per host in ``workers`` (each offering ``cores`` cores and
    ``memory``), logs and work folders under ``folder``; every process tree it started is killed on the way out."""
    java_executable()
    folder.mkdir(parents=True, exist_ok=True)
    daemons: list[Daemon] = []
    deadline = time.monotonic() + timeout
    try:
        daemons.append(launch("master", master, [MASTER_CLASS, "--host", master.address, "--port", "0",
                                                 "--webui-port", "0"], folder))
        url = wait_for(daemons[0], MASTER_URL, deadline, daemons)[1]
        wait_for(daemons[0], LEADER, deadline, daemons)
        for number, host in enumerate(workers, 1):
            name = f"worker {number}"
            daemons.append(launch(name, host, [WORKER_CLASS, url, "--host", host.address, "--port", "0",
                                               "--webui-port", "0", "--cores", str(cores), "--memory", memory,
                                               "--work-dir", str(folder / f"worker-{number}")], folder))
        for daemon in daemons[1:]:
            wait_for(daemon, REGISTERED, deadline, daemons)
        status = wait_for(daemons[0], MASTER_UI, deadline, daemons)[1].rstrip("/") + "/json/"
        yield Cluster(url, status, daemons[0], daemons[1:])
    finally:
        for daemon in reversed(daemons):
            stop_tree(daemon.process)


def stop_tree(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """Kill ``process`` and all its descendants, wherever their process groups are; reap ``process`` and wait until
    the others are gone (or zombies their own parents, killed too, leave to init). A process that has exited has
    no descendants left to find: they were handed to init when it exited."""
    if process.poll() is not None:
        return
    try:
        root = psutil.Process(process.pid)
        tree: set[psutil.Process] = set()
        while True:  # suspend top-down: a stopped process forks no more, and its children stay its children
            grown = {root, *root.children(recursive=True)}
            if grown == tree:
                break
            for member in grown - tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    member.suspend()
            tree = grown
    except psutil.NoSuchProcess:
        tree = set()
    for member in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    process.wait()
    deadline = time.monotonic() + timeout
    while any(alive(member) for member in tree) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def alive(member: psutil.Process) -> bool:
    try:
        return member.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
