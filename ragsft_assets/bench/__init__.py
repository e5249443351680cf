"""Benchmark scripts behind ``ragsft bench NAME`` (ratios against a baseline, in one run)."""
