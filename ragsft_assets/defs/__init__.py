"""Dagster wiring only, one folder per stage family. Logic lives outside ``defs``."""
