"""Failure reports: a JSON payload, POSTed to a webhook when one is configured."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import asdict, dataclass

WEBHOOK_ENV = "RAGSFT_FAILURE_WEBHOOK"


@dataclass(frozen=True, slots=True)
class FailureReport:
    """What a failed run says about itself."""

    job: str
    run_id: str
    partition: str | None
    message: str
    failed_steps: list[str]
    ui_url: str | None = None

    def text(self) -> str:
        where = f" partition {self.partition}" if self.partition else ""
        steps = f" (failed steps: {', '.join(self.failed_steps)})" if self.failed_steps else ""
        link = f" {self.ui_url}" if self.ui_url else ""
        return f"ragsft: run {self.run_id} of {self.job}{where} failed{steps}: {self.message}{link}"

    def payload(self) -> dict:
        # "text" makes the payload readable as-is by Slack/Mattermost incoming webhooks.
        return {"text": self.text(), **asdict(self)}


def post_webhook(url: str, payload: dict, timeout_s: float = 10.0) -> int:
    """POST ``payload`` as JSON to ``url``; return the HTTP status (raises on network errors)."""
    body = json.dumps(payload).encode("utf-8")
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", "User-Agent": "ragsft"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - configured URL
        return response.status
