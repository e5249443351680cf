"""Dagster-free logic of the multihop family."""
