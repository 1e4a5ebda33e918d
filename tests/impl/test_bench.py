"""Smoke test of ``kpurgatory bench``: it runs every workload on every implementation, at a tiny scale, and reports
no failed verification. Nothing here is timed and no ratio is asserted."""

from __future__ import annotations

from click.testing import CliRunner

from kpurgatory.conformance.cli import main


def test_bench_smoke() -> None:
    result = CliRunner().invoke(main, ["bench", "--scale", "0.001", "--rounds", "1"])
    assert result.exit_code == 0, result.output
    for word in ("T1", "T2", "P1", "compiled", "python", "model", "heapq", "asyncio", "per-advance cost", "bytes/pending"):
        assert word in result.output
    assert "FAIL" not in result.output
    assert "targets not judged at scale 0.001" in result.output  # a tiny run has no throughput to judge
    assert "MISSED" not in result.output and ": met" not in result.output
