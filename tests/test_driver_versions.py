"""The vector drivers are packages versioned with kpurgatory (pyproject.toml): the Maven artifact, and every project
here that depends on it; the Go module, whose version is its tag (a module in a subdirectory is tagged with the
folder's path as prefix) and whose path is the driver folder's place in the repository its pom names; the Rust crate
and the npm package, and the lock files that name them, so that `--locked` builds and `npm ci` take a version bump
without resolving anew."""

import json
import re
import tomllib
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRIVERS = ROOT / "conformance" / "drivers"
JAVA, GO = DRIVERS / "java", DRIVERS / "go"
EXAMPLES = ROOT / "conformance" / "examples"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
POM = "{http://maven.apache.org/POM/4.0.0}"


def pom(path: Path) -> ElementTree.Element:
    return ElementTree.parse(path).getroot()


def go_module() -> str:
    return re.search(r"^module (\S+)$", (GO / "go.mod").read_text(), re.MULTILINE)[1]


def test_the_maven_artifact_has_kpurgatorys_version():
    assert pom(JAVA / "pom.xml").findtext(f"{POM}version") == VERSION


def test_the_projects_depending_on_the_java_driver_ask_for_that_version():
    driver = pom(JAVA / "pom.xml")
    coordinates = driver.findtext(f"{POM}groupId"), driver.findtext(f"{POM}artifactId")
    users = list(EXAMPLES.glob("*/pom.xml"))
    asked = [dependency.findtext(f"{POM}version") for path in users
             for dependency in pom(path).iter(f"{POM}dependency")
             if (dependency.findtext(f"{POM}groupId"), dependency.findtext(f"{POM}artifactId")) == coordinates]
    assert len(asked) == len(users) >= 2 and set(asked) == {VERSION}
    # the README's quick start: the <dependency> a user copies
    quick_start = re.findall(rf"<artifactId>{coordinates[1]}</artifactId>\s*<version>([^<]+)</version>",
                             (JAVA / "README.md").read_text())
    assert quick_start == [VERSION]


def test_the_go_module_path_is_the_drivers_folder_in_the_repository():
    repository = pom(JAVA / "pom.xml").findtext(f"{POM}scm/{POM}url")
    assert "https://" + go_module() == f"{repository}/{GO.relative_to(ROOT).as_posix()}"


def test_the_go_module_is_got_and_required_at_kpurgatorys_version():
    module = go_module()
    readme = (GO / "README.md").read_text()
    assert set(re.findall(rf"go get {re.escape(module)}@(\S+)", readme)) == {f"v{VERSION}"}
    folder = GO.relative_to(ROOT).as_posix()
    assert set(re.findall(rf"`{re.escape(folder)}/(v[^`]+)`", readme)) == {f"v{VERSION}"}  # the tag
    requires = re.findall(rf"^\s*(?:require )?{re.escape(module)} (\S+)$",
                          (EXAMPLES / "go-zero-timingwheel" / "go.mod").read_text(), re.MULTILINE)
    assert requires == [f"v{VERSION}"]


def test_the_rust_crate_has_kpurgatorys_version():
    crate = tomllib.loads((DRIVERS / "rust" / "Cargo.toml").read_text())["package"]
    assert crate["version"] == VERSION
    # the driver's own lock file and that of the registry wheel's binding, which depends on it by path
    for lock in (DRIVERS / "rust" / "Cargo.lock",
                 ROOT / "conformance" / "examples" / "rust-hierarchical-hash-wheel-timer" / "Cargo.lock"):
        locked = [package for package in tomllib.loads(lock.read_text())["package"] if package["name"] == crate["name"]]
        assert [package["version"] for package in locked] == [VERSION], lock


def test_the_npm_package_has_kpurgatorys_version():
    package = json.loads((DRIVERS / "javascript" / "package.json").read_text())
    lock = json.loads((DRIVERS / "javascript" / "package-lock.json").read_text())
    assert package["version"] == lock["version"] == lock["packages"][""]["version"] == VERSION
    assert package["name"] == lock["name"]
