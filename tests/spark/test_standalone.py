"""The non-local path on loopback: a standalone master and worker started (and killed) with `cluster.standalone`, and
validate-traces run against them as a separate driver process with --master; and how the cluster library fails and
cleans up."""

import json
import subprocess
import sys
import urllib.request

import psutil
import pytest

from kpurgatory.conformance.spark import sample
from kpurgatory.conformance.spark.cluster import ClusterError, Host, standalone, stop_tree

pytestmark = pytest.mark.spark


def test_validate_traces_on_a_standalone_cluster(java, tmp_path):
    with standalone(tmp_path / "cluster", [Host()], cores=2, memory="2g") as cluster:
        out = tmp_path / "out"
        driver = subprocess.run(
            [sys.executable, "-c", "from kpurgatory.conformance.cli import main; main()", "validate-traces",
             str(sample.path()), "--out", str(out), "--master", cluster.url, "--conf", "spark.executor.memory=1g",
             "--conf", "spark.sql.shuffle.partitions=2"],
            capture_output=True, text=True, timeout=300)
        apps = json.load(urllib.request.urlopen(cluster.status_url, timeout=5))["completedapps"]
        daemons = [psutil.Process(daemon.process.pid) for daemon in [cluster.master, *cluster.workers]]
    assert driver.returncode == 1, driver.stdout + driver.stderr  # the sample's failing traces
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["verdicts"], summary["quarantine"]) == (sample.EXPECTED["verdicts"], sample.EXPECTED["quarantine"])
    assert "ERROR" not in driver.stderr, driver.stderr
    assert [app["name"] for app in apps] == ["kpurgatory validate-traces"]
    assert not [daemon for daemon in daemons if daemon.is_running()]


def test_a_daemon_that_cannot_start_is_named_with_its_log(java, tmp_path):
    with pytest.raises(ClusterError) as failure:
        with standalone(tmp_path, [Host()], master=Host(prefix=("sh", "-c", "echo no such host >&2; exit 7", "--"))):
            pass
    assert failure.value.exit_code == 3
    assert "the Spark master exited with code 7" in failure.value.message
    assert str(tmp_path / "master.log") in failure.value.message and "no such host" in failure.value.message


def test_stop_tree_kills_descendants_that_left_the_process_group():
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; child = subprocess.Popen(['sleep', '300'], "
                               "start_new_session=True); print(child.pid, flush=True); time.sleep(300)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = psutil.Process(int(parent.stdout.readline()))
    assert child.is_running() and child.ppid() == parent.pid
    stop_tree(parent)
    assert parent.returncode is not None
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


#: Spark's scheduler as it logs the executors it loses: an exit with code 0 is the executor stopping with its
#: application (heard before the scheduler itself stopped), anything else is a loss the user must see
LOSSES = """
from kpurgatory.conformance.spark.session import get_session
session = get_session("local[1]")
scheduler = session.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger(
    "org.apache.spark.scheduler.TaskSchedulerImpl")
scheduler.error("Lost executor 0 on 10.47.0.2: Command exited with code 0")
scheduler.error("Lost an executor 2 (already removed): Command exited with code 0")
scheduler.error("Lost executor 1 on 10.47.0.3: Command exited with code 137")
session.stop()
"""


def test_an_executor_stopped_with_its_application_is_not_logged_as_an_error(java):
    run = subprocess.run([sys.executable, "-c", LOSSES], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Lost executor 1 on 10.47.0.3: Command exited with code 137" in run.stderr
    assert "code 0" not in run.stderr, run.stderr


#: the master's last one-way message to an application that just stopped, and a request that failed
ONE_WAY = """
from kpurgatory.conformance.spark.session import get_session
session = get_session("local[1]")
handler = session.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger(
    "org.apache.spark.network.server.TransportRequestHandler")
handler.error("Error while invoking RpcHandler#receive() for one-way message from 127.0.0.1/127.0.0.1:39239.")
handler.error("Error while invoking RpcHandler#receive() on RPC id 7")
session.stop()
"""


def test_a_one_way_message_to_a_stopped_application_is_not_logged_as_an_error(java):
    run = subprocess.run([sys.executable, "-c", ONE_WAY], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "on RPC id 7" in run.stderr
    assert "one-way message" not in run.stderr, run.stderr
