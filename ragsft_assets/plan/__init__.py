"""The cost forecast of a run (``ragsft plan``): sample measures (``measure``) extrapolated
through the funnel (``forecast``). Dagster-free; the sample run itself is ``defs/plan``."""
