"""Dagster wiring of the automation family."""
