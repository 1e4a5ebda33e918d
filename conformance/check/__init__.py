"""Checking a system against the model: the generated sequential check, its state machine and strategies, the
comparison levels, coverage, and the concurrent check on recorded histories."""
