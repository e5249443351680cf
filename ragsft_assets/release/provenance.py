"""What a release manifest says about the code, resources and models that made it (plain functions).

- ``git_commit``: ``RAGSFT_GIT_COMMIT`` (the image's build argument) first, else the checkout's
  ``HEAD``; ``unknown`` only together with a warning that the manifest records.
- ``redact_settings``: resource settings with secrets left out (any key naming a key, token,
  secret or password, at any depth; credentials in URLs). An ``api_key_env`` names a variable:
  it is dropped like any ``*key*`` field and its variable is never read.
- ``llm_roles``: ``{stage: {role: {backend, model, weights_id, sampling, calls, cache_hits}}}``
  from the upstream assets' metadata and the sampling parameters of their cached calls.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

GIT_COMMIT_ENV = "RAGSFT_GIT_COMMIT"
SECRET_KEY = re.compile(r"key|token|secret|password", re.IGNORECASE)
REDACTED = "<redacted>"
LLM_ROLE_FIELDS = ("backend", "model", "weights_id", "sampling", "calls", "cache_hits")


def git_commit(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> tuple[str, str | None]:
    """``(commit, warning)``: the image's build argument, else the checkout's HEAD, else ``unknown``.

    The warning is None when a commit was found; with ``unknown`` it says why, so a release built
    from an image without the build argument says so in its own manifest.
    """
    env = os.environ if env is None else env
    pinned = (env.get(GIT_COMMIT_ENV) or "").strip()
    if pinned:
        return pinned, None
    where = cwd or Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10, check=False
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip(), None
        why = (out.stderr.strip().splitlines() or ["no output"])[-1]
    except (OSError, subprocess.SubprocessError) as e:
        why = str(e)
    return "unknown", (
        f"git commit unknown: {GIT_COMMIT_ENV} is not set and {where} is not a git checkout ({why}); "
        f"build the image with --build-arg {GIT_COMMIT_ENV}=$(git rev-parse HEAD)"
    )


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def redact_settings(value: Any) -> Any:
    """A copy of ``value`` without secrets: secret-named keys dropped at any depth, URL credentials cut.

    A string holding a JSON object (``engine_kwargs``) is redacted inside and kept as a mapping.
    """
    if isinstance(value, Mapping):
        return {str(k): redact_settings(v) for k, v in sorted(value.items()) if not SECRET_KEY.search(str(k))}
    if isinstance(value, list | tuple):
        return [redact_settings(v) for v in value]
    if isinstance(value, str):
        if value.startswith("{"):
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError:
                return value
            return redact_settings(parsed) if isinstance(parsed, dict) else value
        if "://" in value and "@" in value:
            return _redact_url(value)
    return value


def _sampling(signatures: list[Mapping[str, Any]]) -> dict[str, Any]:
    params = [s["params"] for s in signatures if s.get("params") is not None]
    distinct = {orjson.dumps(p, option=orjson.OPT_SORT_KEYS): p for p in params}
    if len(distinct) == 1:
        return dict(next(iter(distinct.values())))
    if not distinct:
        return {}
    return {"variants": [distinct[k] for k in sorted(distinct)]}  # several (e.g. per-draft seeds)


def _same_model(signature: Mapping[str, Any], identity: Mapping[str, Any]) -> bool:
    model = signature.get("model")
    if not isinstance(model, Mapping):
        return False
    return (model.get("backend"), model.get("model")) == (identity.get("backend"), identity.get("model"))


def llm_roles(
    metadata: Mapping[str, Mapping[str, Any]], llm_calls: Mapping[str, list[Mapping[str, Any]]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per LLM stage (asset), per role: backend, model, weights_id, sampling, calls and cache hits.

    Args:
        metadata: ``{asset: {metadata key: plain value}}`` of the latest upstream materializations;
            an LLM stage records ``<role>/model`` (the identity) and ``<role>/calls``,
            ``<role>/cache_hits`` (``BatchStats.to_metadata``).
        llm_calls: ``llm_calls_by_stage``: the sampling parameters of the cached calls per stage.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for stage, md in sorted(metadata.items()):
        for key, identity in sorted(md.items()):
            if not key.endswith("/model") or not isinstance(identity, Mapping) or "backend" not in identity:
                continue
            role = key[: -len("/model")]
            # Stats are recorded under the role's prefix, or under "llm" by stages with one role.
            stats_prefix = role if f"{role}/calls" in md else "llm"
            out.setdefault(stage, {})[role] = {
                "backend": identity.get("backend"),
                "model": identity.get("model"),
                "weights_id": identity.get("weights_sha256") or identity.get("weights_id"),
                # Only this role's model's calls: a stage's ledger also names upstream calls
                # (rag_verdicts keeps the generation's key beside the judge's).
                "sampling": _sampling([s for s in llm_calls.get(stage) or [] if _same_model(s, identity)]),
                "calls": md.get(f"{stats_prefix}/calls"),
                "cache_hits": md.get(f"{stats_prefix}/cache_hits"),
            }
    return out
