"""ragsft tests."""
