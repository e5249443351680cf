"""Dagster-free logic of the release family."""
