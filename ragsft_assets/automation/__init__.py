"""Dagster-free logic of the automation family: snapshot discovery and failure notification."""
