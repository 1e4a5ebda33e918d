"""Traces: the one codec (JSON Lines, validated against the schema) and replay of traces against the model."""
