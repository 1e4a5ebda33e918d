"""One local Spark session for all Spark tests (starting a JVM costs seconds), made the way the CLI makes it.

Tests that need Spark are marked ``spark``; without Java they are skipped, saying so. CLI commands run in-process get
this same session back from getOrCreate.
"""

import pytest

from kpurgatory.conformance.spark.session import SparkUnavailable, get_session, java_executable


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
