"""Dagster wiring of the release family."""
