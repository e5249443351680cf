"""Credential masking: one function family for every URL, header and message text that is shown.

Whatever reaches a log line, an exception, an asset's metadata, a Parquet ``error`` column, the
ledger or a webhook report goes through :func:`mask_text` (or, where the value is known to be a
URL or a header map, :func:`mask_url` / :func:`mask_headers`) first. What is masked:

- the user-info of a URL (``http://user:PASS@host`` -> ``http://***@host``): a user name alone can
  be a token (``https://TOKEN@host``);
- query parameters whose name says they carry a credential (``api_key``, ``key``, ``token``,
  ``secret``, ``sig``, ``password``, ``code``...): the value becomes ``***``;
- the path of a webhook URL (``hooks.slack.com/services/T/B/X``, ``.../api/webhooks/ID/TOKEN``,
  ``.../hooks/ID``): the path of such hooks *is* the secret;
- ``Authorization``-like headers and ``Bearer``/``Basic`` tokens or ``api_key=...`` pairs in free
  text.

The URLs themselves stay readable (scheme, host, port, the rest of the path): a message must
still say which server failed. Dagster-free.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlsplit, urlunsplit

MASK = "***"

# Query-parameter and header names that carry credentials (compared lower-case, "-" as "_").
_SECRET_NAMES = {
    "key",
    "api_key",
    "apikey",
    "access_key",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth",
    "auth_token",
    "authorization",
    "proxy_authorization",
    "secret",
    "client_secret",
    "password",
    "passwd",
    "pass",
    "pwd",
    "sig",
    "signature",
    "code",
    "session",
    "cookie",
    "set_cookie",
    "credential",
    "credentials",
    "x_api_key",
}
# Names ending so carry one too (``openai_api_key``, ``x_auth_token``); a bare substring test would
# also hit ``author`` or ``design``.
_SECRET_SUFFIXES = (
    "_key",
    "apikey",
    "_token",
    "_secret",
    "_password",
    "_passwd",
    "_sig",
    "_signature",
    "_auth",
)

# Path segments after which a webhook URL's path is its secret (Slack, Discord, Mattermost, ...).
_HOOK_SEGMENTS = {"hooks", "hook", "webhooks", "webhook", "services"}

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`\])},]+")
_BEARER = re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=\-]+", re.IGNORECASE)
# ``name=value``, ``name: value`` and ``"name": "value"`` pairs of a credential-like name.
_PAIR = re.compile(
    r"(?P<name>[\"']?(?P<bare>[A-Za-z][A-Za-z0-9_\-]*)[\"']?)(?P<sep>\s*[:=]\s*)"
    r"(?P<quote>[\"']?)(?P<value>[^\s\"'&,;}\]]+)"
)


def secret_name(name: str) -> bool:
    """Whether a query parameter or header called ``name`` carries a credential."""
    n = name.strip().lower().replace("-", "_")
    return n in _SECRET_NAMES or n.endswith(_SECRET_SUFFIXES)


def _is_hook(host: str, segments: list[str]) -> bool:
    return host.startswith("hooks.") or any(s.lower() in _HOOK_SEGMENTS for s in segments)


def mask_url(url: str) -> str:
    """``url`` with its user-info, credential query values, fragment and webhook path masked.

    A value that does not parse as a URL is masked as text (:func:`mask_text` without URLs).
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return _mask_pairs(url)
    if not parts.scheme or not parts.netloc:
        return _mask_pairs(url)
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = (f"{MASK}@" if "@" in parts.netloc else "") + host + port
    path = parts.path
    segments = [s for s in path.split("/") if s]
    if _is_hook(host, segments):
        # keep the segments up to the hook marker (``/services``, ``/api/webhooks``), mask the rest
        kept: list[str] = []
        for s in segments:
            kept.append(s)
            if s.lower() in _HOOK_SEGMENTS:
                break
        if host.startswith("hooks.") and not any(s.lower() in _HOOK_SEGMENTS for s in segments):
            kept = []
        path = "/" + "/".join([*kept, MASK]) if segments else path
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{k}={MASK if secret_name(k) else v}" for k, v in pairs) if pairs else MASK
    fragment = MASK if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, path, query, fragment))


def mask_webhook_url(url: str) -> str:
    """A webhook URL as it may be shown: scheme and host only (its whole path may be the secret)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return MASK
    if not parts.scheme or not host:
        return MASK
    return f"{parts.scheme}://{host}/{MASK}"


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` with the value of every credential-carrying header (Authorization, api-key,
    x-api-key, cookies, ...) replaced by ``***``."""
    return {k: MASK if secret_name(k) else mask_text(str(v)) for k, v in headers.items()}


def _mask_pairs(text: str) -> str:
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)

    def pair(m: re.Match[str]) -> str:
        if not secret_name(m.group("bare")) or m.group("value") == MASK:
            return m.group(0)
        return f"{m.group('name')}{m.group('sep')}{m.group('quote')}{MASK}"

    return _PAIR.sub(pair, text)


def mask_text(text: str) -> str:
    """``text`` (a message, an exception's text, a server's answer) with every URL masked
    (:func:`mask_url`) and every ``Bearer``/``Basic`` token and ``api_key=...``-like pair masked."""
    if not text:
        return text
    urls: list[str] = []

    def hold(m: re.Match[str]) -> str:
        url = m.group(0)
        tail = url[len(url.rstrip(".:;!?")) :]  # sentence punctuation after a URL is not part of it
        urls.append(mask_url(url[: len(url) - len(tail)]) + tail)
        return f"\x00{len(urls) - 1}\x00"

    held = _URL.sub(hold, text)
    masked = _mask_pairs(held)
    return re.sub("\x00(\\d+)\x00", lambda m: urls[int(m.group(1))], masked)


def mask_exception(exc: BaseException) -> str:
    """``Type: text`` of an exception, masked (for messages that quote an exception)."""
    return mask_text(f"{type(exc).__name__}: {exc}")
