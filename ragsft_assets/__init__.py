"""ragsft: verified RAG training data from Wikipedia snapshots, as a Dagster asset graph."""

__version__ = "0.1.0"
