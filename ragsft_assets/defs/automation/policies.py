"""Retry policies the lead applies to steps (``@dg.asset(retry_policy=LLM_RETRY_POLICY)``)."""

from __future__ import annotations

import dagster as dg

# LLM steps fail transiently (a vLLM server restarting, an HTTP 429/503 of a provider, a timeout):
# retry the step a few times with exponential backoff and jitter (30 s, ~60 s, ~120 s). The LLM cache
# makes a retry cheap: calls answered before the failure are read back, not made again.
LLM_RETRY_POLICY = dg.RetryPolicy(
    max_retries=3,
    delay=30,
    backoff=dg.Backoff.EXPONENTIAL,
    jitter=dg.Jitter.PLUS_MINUS,
)
