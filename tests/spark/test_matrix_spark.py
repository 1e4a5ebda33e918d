"""``kpurgatory matrix --master``: one Spark task per cell, each result and counterexample file shipped back to the
driver's --out, the matrix the same as a serial run's: on local mode, and on a standalone cluster whose master, two
workers and driver are network-namespace hosts (conftest.py's ``lan``).

The systems are ones every executor can make without the tests' folder on its path: the built-in implementation in
process, and through the stdio adapter (its command names the folder) a planted Kafka-like model (findings), one that
answers wrongly (failures), and an adapter that crashes."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpurgatory.conformance.cli import main
from kpurgatory.conformance.spark.cluster import standalone, stop_tree

pytestmark = pytest.mark.spark

CONFORMANCE = Path(__file__).parents[1] / "conformance"
sys.path.insert(0, str(CONFORMANCE))  # test_matrix.py: the outputs a run is judged by, and the hostile system
from test_matrix import outputs  # noqa: E402
KPURGATORY = "from kpurgatory.conformance.cli import main; main()"
STDIO = f"env PYTHONPATH={CONFORMANCE} {sys.executable} -m kpurgatory.conformance.adapters.stdio"
SYSTEMS = ["--impl", "ok=kpurgatory.conformance.adapters.builtin:factory",
           "--adapter", f"kafka-like={STDIO} planted:KafkaLike", "--adapter", f"hostile={STDIO} test_matrix:Hostile",
           "--adapter", f"crashes={sys.executable} {CONFORMANCE / 'misbehaving_adapter.py'} crash 0",
           "--checks", "timer/exact,purgatory/contract,scenarios", "--examples", "8", "--steps", "10",
           "--max-failures", "1", "--timeout", "5"]
EXPECTED = {"ok": {"timer/exact": "pass", "purgatory/contract": "pass", "scenarios": "pass"},
            "kafka-like": {"timer/exact": "finding", "purgatory/contract": "finding", "scenarios": "finding"},
            "hostile": {"timer/exact": "failure", "purgatory/contract": "pass", "scenarios": "failure"},
            "crashes": {"timer/exact": "broke", "purgatory/contract": "skipped", "scenarios": "skipped"}}


def invoke(*args: str):
    return CliRunner().invoke(main, ["matrix", *args], terminal_width=200)


def serially(out: Path) -> int:
    """The matrix of `SYSTEMS` run the usual way, in a process of its own as the executors' are (a check run inside
    pytest's process has been seen to shrink a finding to another counterexample)."""
    return subprocess.run([sys.executable, "-c", KPURGATORY, "matrix", *SYSTEMS, "--out", str(out)],
                          capture_output=True, timeout=600).returncode


def verdicts(found: dict) -> dict:
    return {row["name"]: {column: cell["verdict"] for column, cell in row["cells"].items()}
            for row in found["data"]["rows"]}


def test_cells_on_spark_local_mode_give_the_serial_matrix(spark, tmp_path):
    on_spark = invoke(*SYSTEMS, "--master", "local[2]", "--out", str(tmp_path / "spark"))
    assert on_spark.exit_code == serially(tmp_path / "serial") == 3, on_spark.output  # the crashing adapter
    found = outputs(tmp_path / "spark")
    assert verdicts(found) == EXPECTED
    assert any(name.startswith("kafka-like/scenarios/") for name in found["files"])  # written by an executor
    assert found == outputs(tmp_path / "serial")
    data = json.loads((tmp_path / "spark" / "matrix.json").read_text())
    assert data["environment"]["runner"] == "on Spark (local[2], 2 cores)"


def test_cells_on_a_cluster_of_network_namespace_hosts_give_the_serial_matrix(lan, java, tmp_path):
    # first, alone: a system that is slow to start under the cluster's load could be taken for hung (--timeout)
    serial = serially(tmp_path / "serial")
    master, workers, driver = lan.host("master", 1), [lan.host("worker1", 2), lan.host("worker2", 3)], \
        lan.host("driver", 4)
    with standalone(tmp_path / "cluster", workers, master) as cluster:
        command = [*driver.prefix, sys.executable, "-c", KPURGATORY, "matrix", *SYSTEMS, "--out",
                   str(tmp_path / "cluster-out"), "--master", cluster.url, *lan.driver_conf(driver),
                   "--conf", "spark.executor.memory=1g"]
        process = subprocess.Popen(command, env={**os.environ, "SPARK_LOCAL_IP": driver.address},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=600)
        finally:
            stop_tree(process)
        worker_logs = [daemon.log.read_text() for daemon in cluster.workers]
    assert process.returncode == serial == 3, stdout + stderr
    assert "ERROR" not in stderr, stderr
    for number, log in enumerate(worker_logs, 1):  # each worker ran an executor that called back the driver's address
        assert re.search(rf'Launch command: .*"--driver-url" "spark://\S+@{re.escape(driver.address)}:'
                         rf'{lan.DRIVER_PORT}"', log), f"worker {number} launched no executor for the driver:\n{log}"
    found = outputs(tmp_path / "cluster-out")
    assert verdicts(found) == EXPECTED
    assert found == outputs(tmp_path / "serial")
    data = json.loads((tmp_path / "cluster-out" / "matrix.json").read_text())
    assert data["environment"]["runner"] == f"on Spark ({cluster.url}, 2 cores)"
