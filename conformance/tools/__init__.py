"""Tooling around the check: benchmarks and their baselines, seeded mutants, the broker simulator."""
