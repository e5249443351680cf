"""Knowledge-aligned SFT (Recall Rewrite): plain functions, no Dagster (issue 15)."""
