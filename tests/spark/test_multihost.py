"""validate-traces on a standalone cluster whose master, two workers and driver are four hosts: network namespaces on
a private LAN made by the test itself (the ``lan`` fixture of conftest.py), with the driver settings the README gives
for real clusters.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kpurgatory.conformance.spark import sample
from kpurgatory.conformance.spark.cluster import standalone, stop_tree
from kpurgatory.conformance.spark.validate import run_validation

pytestmark = pytest.mark.spark


def outputs(out: Path) -> dict:
    """What a validation run reported, without its timings: summary, verdict rows, quarantine rows, failing files."""
    summary = json.loads((out / "summary.json").read_text())
    for timing in ("seconds", "events_per_second"):
        del summary[timing]
    return {"summary": summary,
            "verdicts": sorted(pq.read_table(out / "verdicts.parquet").to_pylist(), key=lambda row: row["trace"]),
            "quarantine": sorted(pq.read_table(out / "quarantine.parquet").to_pylist(),
                                 key=lambda row: (row["source"], row["line"])),
            "failing": sorted(path.name for path in (out / "failing").iterdir())}


def test_validate_traces_across_hosts_matches_local_mode(lan, spark, tmp_path):
    master, workers, driver = lan.host("master", 1), [lan.host("worker1", 2), lan.host("worker2", 3)], \
        lan.host("driver", 4)
    with standalone(tmp_path / "cluster", workers, master) as cluster:
        assert cluster.url.startswith(f"spark://{master.address}:")
        command = [*driver.prefix, sys.executable, "-c", "from kpurgatory.conformance.cli import main; main()",
                   "validate-traces", str(sample.path()), "--out", str(tmp_path / "cluster-out"),
                   "--master", cluster.url, *lan.driver_conf(driver), "--conf", "spark.executor.memory=1g"]
        process = subprocess.Popen(command, env={**os.environ, "SPARK_LOCAL_IP": driver.address},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            run_validation(spark, [sample.path()], tmp_path / "local-out")  # local mode, while the driver runs
            stdout, stderr = process.communicate(timeout=300)
        finally:
            stop_tree(process)
        worker_logs = [daemon.log.read_text() for daemon in cluster.workers]
    assert process.returncode == 1, stdout + stderr  # the sample's failing traces
    assert "ERROR" not in stderr, stderr
    for number, log in enumerate(worker_logs, 1):  # each worker ran an executor that called back the driver's address
        assert re.search(rf'Launch command: .*"--driver-url" "spark://\S+@{re.escape(driver.address)}:'
                         rf'{lan.DRIVER_PORT}"', log), f"worker {number} launched no executor for the driver:\n{log}"
        assert list((tmp_path / "cluster" / f"worker-{number}").glob("app-*/*/stderr"))
    on_cluster, local = outputs(tmp_path / "cluster-out"), outputs(tmp_path / "local-out")
    assert on_cluster["summary"]["verdicts"]["fail"] > 0 and on_cluster["summary"]["quarantine"]
    assert on_cluster == local
