"""One local Spark session for all Spark tests (starting a JVM costs seconds), made the way the CLI makes it; and a
private LAN of network-namespace hosts for a standalone cluster whose master, workers and driver are separate hosts.

Tests that need Spark are marked ``spark``; without Java they are skipped, saying so. CLI commands run in-process get
this same session back from getOrCreate.

The LAN is a bridge in a namespace of its own; each host is a namespace joined to it by a veth pair, with an address
on 10.47.0.0/24 and its own loopback. Nothing is configured in the root namespace (``ip netns add`` only names each
namespace under /run/netns). The ``lan`` fixture kills every process left in its namespaces and deletes them, pass or
fail; namespaces left behind by a run that was killed outright are removed by the next run. Needs root and netns
support: skipped, saying which is missing, without them.
"""

import contextlib
import os
import secrets
import shutil
import subprocess

import psutil
import pytest

from kpurgatory.conformance.spark.cluster import Host
from kpurgatory.conformance.spark.session import SparkUnavailable, get_session, java_executable

PREFIX = "kpurgatory-lan-"
SUBNET = "10.47.0"


@pytest.fixture(scope="session")
def java():
    try:
        return java_executable()
    except SparkUnavailable as missing:
        pytest.skip(f"Spark tests need Java: {missing.message}")


@pytest.fixture(scope="session")
def spark(java, tmp_path_factory):
    folder = tmp_path_factory.mktemp("spark")
    session = get_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g",
                                       "spark.local.dir": str(folder / "local"),
                                       "spark.sql.warehouse.dir": str(folder / "warehouse")})
    yield session
    session.stop()


def ip(*arguments: str) -> str:
    done = subprocess.run(["ip", *arguments], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"ip {' '.join(arguments)}: {done.stderr.strip()}")
    return done.stdout


class Lan:
    """Hosts on one private LAN, all namespaces named ``NAME-ROLE``."""

    #: the driver's fixed ports, as the README tells a cluster behind a firewall to set them
    DRIVER_PORT, BLOCK_MANAGER_PORT = 7078, 7079

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

    def driver_conf(self, driver: Host) -> list[str]:
        """The --conf options of a driver on ``driver`` that executors on other hosts call back (README)."""
        return ["--conf", f"spark.driver.host={driver.address}", "--conf", f"spark.driver.bindAddress={driver.address}",
                "--conf", f"spark.driver.port={self.DRIVER_PORT}",
                "--conf", f"spark.blockManager.port={self.BLOCK_MANAGER_PORT}"]

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
