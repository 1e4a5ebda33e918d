"""The non-local path: a standalone master and worker on 127.0.0.1, started (and killed) by the test itself, and
validate-traces run against them as a separate driver process with --master."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kpurgatory.conformance.spark import sample

pytestmark = pytest.mark.spark


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_worker(ui_port: int, processes: list, timeout: float = 120.0) -> None:
    """Until the master's JSON status lists an alive worker; fails early if a daemon died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in processes:
            assert process.poll() is None, f"{process.args[-1]} exited with {process.returncode}"
        try:
            status = json.load(urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2))
            if status.get("aliveworkers", 0) >= 1:
                return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail("the standalone worker did not register with the master in time")


@pytest.fixture
def standalone(java, tmp_path):
    """(spark://127.0.0.1:PORT, status URL) of a master with one 2-core worker; every process it started is killed
    afterwards, pass or fail."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
           "SPARK_HOME": str(spark_class.parent.parent)}
    port, ui_port = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    commands = [
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port",
         str(ui_port)],
        ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--webui-port", str(free_port()),
         "--cores", "2", "--memory", "2g", "--work-dir", str(tmp_path / "work")],
    ]
    processes = []
    try:
        for command in commands:
            with open(tmp_path / f"{command[0].rsplit('.', 1)[1]}.log", "wb") as log:
                processes.append(subprocess.Popen([str(spark_class), *command], env=env, stdout=log,
                                                  stderr=subprocess.STDOUT, start_new_session=True))
        wait_for_worker(ui_port, processes)
        yield url, f"http://127.0.0.1:{ui_port}/json/"
    finally:
        for process in processes:  # each daemon leads its own process group: its executors go with it
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=30)


def test_validate_traces_on_a_standalone_cluster(standalone, tmp_path):
    url, status = standalone
    out = tmp_path / "out"
    driver = subprocess.run(
        [sys.executable, "-c", "from kpurgatory.conformance.cli import main; main()", "validate-traces",
         str(sample.path()), "--out", str(out), "--master", url, "--conf", "spark.executor.memory=1g",
         "--conf", "spark.sql.shuffle.partitions=2"],
        capture_output=True, text=True, timeout=300)
    assert driver.returncode == 1, driver.stdout + driver.stderr  # the sample's failing traces
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["verdicts"], summary["quarantine"]) == (sample.EXPECTED["verdicts"], sample.EXPECTED["quarantine"])
    assert "ERROR" not in driver.stderr, driver.stderr
    apps = json.load(urllib.request.urlopen(status, timeout=5))["completedapps"]
    assert [app["name"] for app in apps] == ["kpurgatory validate-traces"]
