"""Failure reports: a JSON payload, POSTed to a webhook when one is configured.

The webhook's URL is never shown whole: the path of a Slack-style hook is its secret, so a
message names the scheme and host only (``masking.mask_webhook_url``); the report's own message
is masked too (``masking.mask_text``), in case a failure quoted a URL with credentials.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass

from ragsft_assets.masking import mask_text, mask_webhook_url

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
        return (
            f"ragsft: run {self.run_id} of {self.job}{where} failed{steps}: {mask_text(self.message)}{link}"
        )

    def payload(self) -> dict:
        # "text" makes the payload readable as-is by Slack/Mattermost incoming webhooks.
        return {"text": self.text(), **asdict(self), "message": mask_text(self.message)}


def post_webhook(url: str, payload: dict, timeout_s: float = 10.0) -> int:
    """POST ``payload`` as JSON to ``url``; return the HTTP status (raises on network errors)."""
    body = json.dumps(payload).encode("utf-8")
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", "User-Agent": "ragsft"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - configured URL
        return response.status


def send_report(url: str, report: FailureReport, timeout_s: float = 10.0) -> tuple[bool, str]:
    """POST ``report`` to the webhook at ``url``; ``(delivered, the line to log)``.

    Never raises for a broken webhook (a failing sensor would replay every failure); the line
    shows the webhook as ``scheme://host/***``, and the error text with the URL masked.
    """
    shown = mask_webhook_url(url)
    try:
        status = post_webhook(url, report.payload(), timeout_s)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = mask_text(f"{type(exc).__name__}: {exc}".replace(url, shown))
        return False, f"failure webhook {shown} unreachable: {why}"
    return True, f"failure webhook {shown} answered {status}"
