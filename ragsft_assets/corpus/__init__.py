"""Dagster-free logic of the corpus family."""
