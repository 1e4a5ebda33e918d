"""validate-traces on a standalone cluster whose master, two workers and driver are four hosts: network namespaces on
a private LAN made by the test itself, with the driver settings the README gives for real clusters.

The LAN is a bridge in a namespace of its own; each host is a namespace joined to it by a veth pair, with an address
on 10.47.0.0/24 and its own loopback. Nothing is configured in the root namespace (``ip netns add`` only names each
namespace under /run/netns). The fixture kills every process left in its namespaces and deletes them, pass or fail;
namespaces left behind by a run that was killed outright are removed by the next run. Needs root and netns support:
skipped, saying which is missing, without them.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from kpurgatory.conformance.spark import sample
from kpurgatory.conformance.spark.cluster import Host, standalone, stop_tree
from kpurgatory.conformance.spark.validate import run_validation

pytestmark = pytest.mark.spark

PREFIX = "kpurgatory-lan-"
SUBNET = "10.47.0"
DRIVER_PORT, BLOCK_MANAGER_PORT = 7078, 7079


def ip(*arguments: str) -> str:
    done = subprocess.run(["ip", *arguments], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"ip {' '.join(arguments)}: {done.stderr.strip()}")
    return done.stdout


class Lan:
    """Hosts on one private LAN, all namespaces named ``NAME-ROLE``."""

    def __init__(self, name: str):
        self.name, self.bridge = name, f"{name}-lan"
        self.namespaces: list[str] = []
        self.add_namespace(self.bridge)
        ip("-n", self.bridge, "link", "add", "lan", "type", "bridge")
        ip("-n", self.bridge, "link", "set", "lan", "up")

    def add_namespace(self, namespace: str) -> None:
        ip("netns", "add", namespace)
        self.namespaces.append(namespace)
        ip("-n", namespace, "link", "set", "lo", "up")

    def host(self, role: str, number: int) -> Host:
        namespace, port = f"{self.name}-{role}", f"port{number}"
        self.add_namespace(namespace)
        ip("-n", self.bridge, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        ip("-n", self.bridge, "link", "set", port, "master", "lan", "up")
        ip("-n", namespace, "addr", "add", f"{SUBNET}.{number}/24", "dev", "eth0")
        ip("-n", namespace, "link", "set", "eth0", "up")
        return Host(f"{SUBNET}.{number}", ("ip", "netns", "exec", namespace))

    def close(self) -> None:
        remove_namespaces(reversed(self.namespaces))


def remove_namespaces(namespaces) -> None:
    """Kill whatever still runs in each namespace (only this test's processes can), then delete it (its links go
    with it)."""
    for namespace in namespaces:
        members = []
        for pid in ip("netns", "pids", namespace).split():
            with contextlib.suppress(psutil.NoSuchProcess):
                members.append(psutil.Process(int(pid)))
                members[-1].kill()
        psutil.wait_procs(members, timeout=10)
        ip("netns", "delete", namespace)


def remove_abandoned() -> None:
    """Namespaces of earlier runs whose pytest process is gone (killed before its fixture could clean up)."""
    names = [line.split()[0] for line in ip("netns", "list").splitlines() if line.startswith(PREFIX)]
    remove_namespaces(name for name in names if not psutil.pid_exists(int(name[len(PREFIX):].split("x")[0])))


@pytest.fixture
def lan():
    if os.geteuid() != 0:
        pytest.skip("the multi-host test makes network namespaces, which needs root")
    if shutil.which("ip") is None:
        pytest.skip("the multi-host test needs iproute2's `ip` (apt-get install iproute2)")
    remove_abandoned()
    try:
        network = Lan(f"{PREFIX}{os.getpid()}x{secrets.token_hex(2)}")
    except RuntimeError as unsupported:
        with contextlib.suppress(RuntimeError):
            remove_namespaces([namespace for namespace in ip("netns", "list").split() if namespace.startswith(
                f"{PREFIX}{os.getpid()}x")])
        pytest.skip(f"no network namespace support here: {unsupported}")
    try:
        yield network
    finally:
        network.close()
    assert not set(network.namespaces) & set(ip("netns", "list").split()), "a namespace outlived the test"


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
                   "--master", cluster.url, "--conf", f"spark.driver.host={driver.address}",
                   "--conf", f"spark.driver.bindAddress={driver.address}",
                   "--conf", f"spark.driver.port={DRIVER_PORT}", "--conf", f"spark.blockManager.port={BLOCK_MANAGER_PORT}",
                   "--conf", "spark.executor.memory=1g"]
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
        assert re.search(rf'Launch command: .*"--driver-url" "spark://\S+@{re.escape(driver.address)}:{DRIVER_PORT}"',
                         log), f"worker {number} launched no executor for the driver:\n{log}"
        assert list((tmp_path / "cluster" / f"worker-{number}").glob("app-*/*/stderr"))
    on_cluster, local = outputs(tmp_path / "cluster-out"), outputs(tmp_path / "local-out")
    assert on_cluster["summary"]["verdicts"]["fail"] > 0 and on_cluster["summary"]["quarantine"]
    assert on_cluster == local
