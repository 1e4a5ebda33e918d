"""Apache Kafka's published releases as systems under test: ``--kafka VERSION`` resolves a release's jars from Maven
Central and runs the adapter of conformance/kafka over them, with no source build.

A release's classes belong to one of four API eras (the adapter has sources for each, README beside it):

=============================  =============  ==========================================================================
era                            releases       classes
=============================  =============  ==========================================================================
scala-purgatory-0.9            0.9.0          the Scala purgatory, building its own timer (``kafka.utils.timer.Timer``)
scala-purgatory-scala-timer    0.10.0 - 3.5   ``kafka.server.DelayedOperationPurgatory`` on ``kafka.utils.timer``
scala-purgatory-java-timer     3.6 - 3.9      the Scala purgatory on ``org.apache.kafka.server.util.timer``
java-purgatory                 4.0 on         ``org.apache.kafka.server.purgatory`` on the Java timer
=============================  =============  ==========================================================================

Maven (``mvn``) resolves the jars through the small pom beside the adapter (``release-pom.xml``), which lists the few
jars those classes load, not the broker's whole dependency tree, into the local Maven repository (~/.m2). The
classpath is remembered under ``$KPURGATORY_CACHE`` (default ~/.cache/kpurgatory), so a release resolved once is
offline from then on.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import attrs
import click

from kpurgatory.model.releases import RULES_BY_TICKET, version_key

#: the Kafka adapter's folder (README.md there), package data: a plain folder wherever pip installs the package, as it
#: must be, since bash, javac and Maven read it and the adapter command names it to other processes (the matrix's
#: workers), which a copy made for an `importlib.resources.as_file` block would not outlive
ADAPTER_DIR = Path(importlib.resources.files("kpurgatory.conformance") / "kafka")
POM = ADAPTER_DIR / "release-pom.xml"
ADAPTER = ADAPTER_DIR / "run.sh"
#: run.sh started through bash: an installer need not keep its exec bit
RUN_ADAPTER = ["bash", str(ADAPTER)]
MVN_TIMEOUT_S = 900

#: every Kafka release on Maven Central with the hierarchical timing wheel (0.9.0.0 on): a version outside this list
#: is a usage error, not a download attempt
RELEASES = tuple("""
0.9.0.0 0.9.0.1 0.10.0.0 0.10.0.1 0.10.1.0 0.10.1.1 0.10.2.0 0.10.2.1 0.10.2.2 0.11.0.0 0.11.0.1 0.11.0.2 0.11.0.3
1.0.0 1.0.1 1.0.2 1.1.0 1.1.1 2.0.0 2.0.1 2.1.0 2.1.1 2.2.0 2.2.1 2.2.2 2.3.0 2.3.1 2.4.0 2.4.1 2.5.0 2.5.1
2.6.0 2.6.1 2.6.2 2.6.3 2.7.0 2.7.1 2.7.2 2.8.0 2.8.1 2.8.2 3.0.0 3.0.1 3.0.2 3.1.0 3.1.1 3.1.2
3.2.0 3.2.1 3.2.2 3.2.3 3.3.0 3.3.1 3.3.2 3.4.0 3.4.1 3.5.0 3.5.1 3.5.2 3.6.0 3.6.1 3.6.2 3.7.0 3.7.1 3.7.2
3.8.0 3.8.1 3.9.0 3.9.1 3.9.2 4.0.0 4.0.1 4.0.2 4.1.0 4.1.1 4.1.2 4.2.0 4.2.1 4.2.2 4.3.0 4.3.1 4.4.0
""".split())


class KafkaReleaseError(click.ClickException):
    """A release that cannot be checked: an unknown version (exit 2) or one Maven could not resolve (exit 3)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@attrs.frozen
class KafkaRelease:
    version: str
    #: the adapter's API era (run.sh --era)
    era: str
    #: ':'-separated jars in the local Maven repository
    classpath: str


def era_of(version: str) -> str:
    key = version_key(version)
    if key >= (4, 0):
        return "java-purgatory"
    if key >= (3, 6):
        return "scala-purgatory-java-timer"
    return "scala-purgatory-scala-timer" if key >= (0, 10) else "scala-purgatory-0.9"


def maven_properties(version: str) -> dict[str, str]:
    """What the pom adds to the jars every era needs (kafka-clients, metrics, slf4j): the broker's jar for its Scala
    version (the one Kafka published it for first) with that Scala's library; server-common from 3.3 (the
    broker's metrics helpers, then its threads, moved there before the timer did in 3.6); and what the broker's
    utilities load (kafka.utils.Logging's logging library; from 3.6, CoreUtils' validator); and, where the op lock is
    the op's monitor, ASM for the adapter's agent that makes monitors the controlled scheduler's points."""
    key = version_key(version)
    properties = {"kafka.version": version}
    if key >= (3, 3):
        properties["kafka.server-common"] = "true"
    if (3, 6) <= key < (4, 0):
        properties["commons-validator.version"] = "1.7"
    if key < (4, 0):
        binary, scala = (("2.11", "2.11.12") if key < (0, 10, 1, 1) else ("2.12", "2.12.20") if key < (2, 4)
                         else ("2.13", "2.13.16"))
        properties |= {"scala.binary": binary, "scala.version": scala}
        if not RULES_BY_TICKET["KAFKA-5970"].shipped_in(version):  # the op lock is the op's monitor: the agent's ASM
            properties["asm.version"] = "9.7.1"
        if key < (1, 1):
            properties["log4j.version"] = "1.2.17"
        else:
            properties["scala-logging.version"] = "3.9.2" if key < (2, 4) else "3.9.4"
    return properties


def cache_dir() -> Path:
    root = os.environ.get("KPURGATORY_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                       "kpurgatory")
    return Path(root) / "kafka-releases"


def check_version(version: str) -> None:
    if version in RELEASES:
        return
    raise KafkaReleaseError(f"{version!r} is not a Kafka release the adapter covers: give one of "
                            f"{RELEASES[0]} to {RELEASES[-1]} (e.g. 3.9.2)", 2)



def resolve(version: str) -> KafkaRelease:
    """The release's era and classpath, resolved by Maven once and remembered (exit 2: unknown version; exit 3:
    Maven could not resolve it)."""
    check_version(version)
    era = era_of(version)
    remembered = classpath_file(version)
    if remembered.is_file():
        classpath = remembered.read_text().strip()
        if classpath and all(Path(jar).is_file() for jar in classpath.split(":")):
            return KafkaRelease(version, era, classpath)
    classpath = run_maven(version, maven_properties(version))
    remembered.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=remembered.parent, delete=False) as written:
        written.write(classpath + "\n")
    os.replace(written.name, remembered)  # atomic: a concurrent resolve reads the old file or the new one
    return KafkaRelease(version, era, classpath)


def classpath_file(version: str) -> Path:
    """Where the release's classpath is remembered, named after what Maven is asked, so that a changed pom or jar
    list resolves afresh."""
    asked = POM.read_text() + repr(sorted(maven_properties(version).items()))
    return cache_dir() / f"{version}-{hashlib.sha256(asked.encode()).hexdigest()[:12]}.classpath"


def run_maven(version: str, properties: dict[str, str]) -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaReleaseError(f"cannot resolve Kafka {version}: Maven (mvn) is not installed", 3)
    with tempfile.TemporaryDirectory() as work:
        output = Path(work) / "classpath"
        command = [mvn, "-q", "-B", "-f", str(POM), "dependency:build-classpath", f"-Dmdep.outputFile={output}",
                   *(f"-D{name}={value}" for name, value in properties.items())]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=MVN_TIMEOUT_S, cwd=work)
        except subprocess.TimeoutExpired:
            raise KafkaReleaseError(f"cannot resolve Kafka {version}: Maven took over {MVN_TIMEOUT_S} s", 3) from None
        if done.returncode != 0 or not output.is_file():
            errors = [line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line][:6]
            detail = "\n".join(re.sub(r"\x1b\[[0-9;]*m", "", line) for line in errors) or done.stderr.strip()
            raise KafkaReleaseError(f"Maven could not resolve Kafka {version}'s jars "
                                    f"({' '.join(map(shlex.quote, command))}):\n{detail}", 3)
        return output.read_text().strip()


def adapter_command(version: str) -> str:
    """The ``--adapter`` command that runs the adapter over the release, resolved and the adapter compiled for it
    (once, cached), so that no request waits for javac."""
    release = resolve(version)
    command = [*RUN_ADAPTER, "--era", release.era, "--kafka-version", release.version, release.classpath]
    if shutil.which("javac") is None:
        raise KafkaReleaseError(f"cannot run Kafka {version}: a JDK (javac) is not installed", 3)
    compiled = subprocess.run([*command[:-1], "--compile", command[-1]], capture_output=True, text=True)
    if compiled.returncode != 0:
        raise KafkaReleaseError(f"the adapter does not compile for Kafka {version}:\n{compiled.stderr.strip()}", 3)
    return shlex.join(command)


def release_of(adapter: str) -> str | None:
    """The release an ``--adapter`` command runs, when it is one `adapter_command` made (the published release's
    classpath, as remembered): a re-run line says ``--kafka VERSION`` then, not the classpath. A build of one's own
    declares its release too, but only its own command runs it again."""
    words = shlex.split(adapter)
    if words[:2] != RUN_ADAPTER or "--kafka-version" not in words[:-1]:
        return None
    version = words[words.index("--kafka-version") + 1]
    try:
        remembered = classpath_file(version).read_text().strip()
    except (OSError, KafkaReleaseError):
        return None
    return version if words[-1] == remembered else None


def with_kafka_option(command):
    """Adds ``--kafka VERSION`` to a command that takes ``--impl`` and ``--adapter``: the same as
    ``--adapter "$(adapter_command VERSION)"``, resolved before the command runs."""

    @click.option("--kafka", "kafka_version", metavar="VERSION",
                  help="A published Apache Kafka release (e.g. 3.9.2), resolved from Maven Central (needs mvn and a "
                       "JDK): the same as --adapter with the Kafka adapter over its jars.")
    @functools.wraps(command)
    def with_kafka(*args, kafka_version: str | None, **kwargs):
        if kafka_version is not None:
            if kwargs.get("impl") or kwargs.get("adapter"):
                raise click.UsageError("give --kafka, --impl or --adapter, not two of them")
            kwargs["adapter"] = adapter_command(kafka_version)
        return command(*args, **kwargs)

    return with_kafka


@click.command("kafka-adapter")
@click.argument("version")
def main(version: str) -> None:
    """Resolve Kafka VERSION and print the adapter command for it (what --kafka VERSION runs)."""
    click.echo(adapter_command(version))


if __name__ == "__main__":
    main()
