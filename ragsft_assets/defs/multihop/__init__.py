"""Dagster wiring of the multihop family."""
