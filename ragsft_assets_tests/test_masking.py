"""``ragsft_assets.masking``: credentials in URLs, headers, webhook paths and message texts."""

from __future__ import annotations

import pytest

from ragsft_assets.masking import mask_exception, mask_headers, mask_text, mask_url, mask_webhook_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:PASS@host/v1?api_key=KEY", "http://***@host/v1?api_key=***"),
        ("https://TOKEN@gpu-1:8000/v1", "https://***@gpu-1:8000/v1"),
        (
            "https://x.openai.azure.com/openai?api-version=2024-06-01&key=KEY",
            "https://x.openai.azure.com/openai?api-version=2024-06-01&key=***",
        ),
        ("http://h/v1?token=T&access_token=A&client_secret=S&sig=G", "http://h/v1?token=***&access_token=***&client_secret=***&sig=***"),
        ("https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://hooks.slack.com/services/***"),
        ("https://discord.com/api/webhooks/123/SECRETTOKEN", "https://discord.com/api/webhooks/***"),
        ("https://chat.example.org/hooks/SECRETID", "https://chat.example.org/hooks/***"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),  # nothing secret: unchanged
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("http://h/v1#SECRET", "http://h/v1#***"),
    ],
)  # fmt: skip
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_mask_webhook_url_keeps_the_host_only() -> None:
    assert mask_webhook_url("https://hooks.slack.com/services/T/B/SECRET") == "https://hooks.slack.com/***"
    assert mask_webhook_url("https://internal.example/any/path/SECRET?x=1") == "https://internal.example/***"
    assert mask_webhook_url("not a url SECRET") == "***"


def test_mask_headers() -> None:
    headers = {
        "Authorization": "Bearer SECRET",
        "api-key": "SECRET",
        "X-Api-Key": "SECRET",
        "Cookie": "session=SECRET",
        "Content-Type": "application/json",
    }
    masked = mask_headers(headers)
    assert "SECRET" not in repr(masked)
    assert masked["Content-Type"] == "application/json" and masked["Authorization"] == "***"


def test_mask_text_finds_urls_tokens_and_pairs_in_messages() -> None:
    text = (
        "ClientConnectorError from http://user:PASS@host/v1?api_key=KEY: refused. "
        'Authorization: Bearer sk-SECRET1; {"api_key": "SECRET2"} x-api-key=SECRET3 '
        "see https://hooks.slack.com/services/T/B/SECRET4."
    )
    out = mask_text(text)
    for secret in ("PASS", "KEY", "sk-SECRET1", "SECRET2", "SECRET3", "SECRET4"):
        assert secret not in out, (secret, out)
    # what a reader needs stays: the host, the error, the punctuation after a URL
    assert out.startswith("ClientConnectorError from http://***@host/v1?api_key=***: refused.")
    assert out.endswith("https://hooks.slack.com/services/***.")
    assert mask_text("") == "" and mask_text("HTTP 500 from http://h:1/v1") == "HTTP 500 from http://h:1/v1"


def test_mask_exception() -> None:
    exc = ValueError("Cannot reach http://u:PASS@h/v1?key=KEY")
    assert mask_exception(exc) == "ValueError: Cannot reach http://***@h/v1?key=***"
