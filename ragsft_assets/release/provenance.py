"""What a release manifest says about the code, resources and models that made it (plain functions).

- ``git_commit``: ``RAGSFT_GIT_COMMIT`` (the image's build argument) first, else the HEAD of the
  checkout the running package *is* (its files tracked there: an installed copy in a
  ``site-packages`` that happens to lie inside some repository reports no commit), with
  ``git_dirty`` saying whether that checkout has uncommitted changes; ``unknown`` only together
  with a warning that the manifest records.
- ``redact_settings``: resource settings recorded by field name, secrets masked: a field whose
  name is a credential (``api_key``, ``token``, ``password``...; not ``max_tokens`` or
  ``budget_tokens``, which are settings), the user info and credential query parameters of a URL,
  and the values of credential headers. An ``api_key_env`` names a variable: it is kept, its
  variable is never read. ``split_locations`` takes out the fields that say where the run kept its
  files (``home``, ``cache_dir``...), which belong to the run statistics.
- ``llm_roles``: ``{stage: {role: {backend, model, weights_id, sampling}}}`` (what made the data);
  ``llm_stats``: ``{stage: {role: {calls, cache_hits}}}`` (how this run got there: a resumed run
  has other numbers for the same data, so they live in the run statistics, not the manifest).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

GIT_COMMIT_ENV = "RAGSFT_GIT_COMMIT"
REDACTED = "<redacted>"
LLM_ROLE_FIELDS = ("backend", "model", "weights_id", "sampling")
LLM_STAT_FIELDS = ("calls", "cache_hits")
# A setting is a credential when its name is one of these words or ends with ``_<word>``
# (``hf_token``, ``openai_api_key``); plural counts (``max_tokens``, ``budget_tokens``) are not.
SECRET_WORDS = (
    "api_key", "apikey", "key", "token", "access_token", "auth_token", "secret", "client_secret",
    "password", "passwd", "pwd", "credential", "credentials", "authorization", "cookie", "private_key",
)  # fmt: skip
# URL query parameters that carry a credential (``?api_key=...``, ``&token=...``).
SECRET_PARAMS = frozenset({"api_key", "apikey", "key", "token", "access_token", "auth", "sig", "signature",
                           "password", "secret", "client_secret", "x-api-key"})  # fmt: skip
# Headers whose value is a credential; any header value of the form "<scheme> <credential>" too.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key",
                            "api-key", "x-auth-token", "x-goog-api-key"})  # fmt: skip
_AUTH_VALUE = re.compile(r"^\s*(bearer|basic|token|digest)\s+\S+", re.IGNORECASE)


def _run_git(args: list[str], where: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10, check=False)


def git_commit(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> tuple[str, str | None]:
    """``(commit, warning)``: the image's build argument, else the HEAD of the package's own checkout.

    The checkout counts only when this module's file is tracked in it (a source or editable
    install); an installed package inside some other repository's tree gets ``unknown``. The
    warning is None when a commit was found; with ``unknown`` it says why, so a release built
    from an image without the build argument says so in its own manifest.
    """
    env = os.environ if env is None else env
    pinned = (env.get(GIT_COMMIT_ENV) or "").strip()
    if pinned:
        return pinned, None
    where = cwd or Path(__file__).resolve().parent
    try:
        out = _run_git(["rev-parse", "HEAD"], where)
        if out.returncode == 0 and out.stdout.strip():
            probe = Path(__file__).resolve() if cwd is None else None
            if probe is None or _run_git(["ls-files", "--error-unmatch", probe.name], where).returncode == 0:
                return out.stdout.strip(), None
            why = f"{probe} is not tracked there: an installed copy, not the checkout"
        else:
            why = (out.stderr.strip().splitlines() or ["no output"])[-1]
    except (OSError, subprocess.SubprocessError) as e:
        why = str(e)
    return "unknown", (
        f"git commit unknown: {GIT_COMMIT_ENV} is not set and {where} is not a git checkout of the "
        f"package ({why}); build the image with --build-arg {GIT_COMMIT_ENV}=$(git rev-parse HEAD)"
    )


def git_dirty(cwd: Path | None = None) -> bool | None:
    """Whether the package's checkout has uncommitted changes to tracked files (None: not known)."""
    where = cwd or Path(__file__).resolve().parent
    try:
        out = _run_git(["status", "--porcelain", "--untracked-files=no"], where)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.stdout.strip()) if out.returncode == 0 else None


def _secret_name(name: str) -> bool:
    low = name.lower().replace("-", "_")
    return any(low == w or low.endswith("_" + w) for w in SECRET_WORDS)


def redact_url(url: str) -> str:
    """``url`` with its user info and credential query parameters masked (other parts as they were)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc
    if parts.username is not None or parts.password is not None:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in SECRET_PARAMS or _secret_name(k) for k, _ in pairs):
            query = urlencode(
                [(k, REDACTED if k.lower() in SECRET_PARAMS or _secret_name(k) else v) for k, v in pairs],
                safe="<>",
            )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _redact_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    return {
        str(k): REDACTED
        if str(k).lower() in SECRET_HEADERS or _secret_name(str(k)) or _is_auth_value(v)
        else redact_settings(v)
        for k, v in sorted(headers.items())
    }


def _is_auth_value(value: Any) -> bool:
    return isinstance(value, str) and bool(_AUTH_VALUE.match(value))


def redact_settings(value: Any, secret_fields: frozenset[str] = frozenset()) -> Any:
    """A copy of ``value`` with every credential masked as ``<redacted>``, every setting kept.

    Masked: fields named in ``secret_fields`` (Dagster's ``is_secret``) or whose name is a
    credential (``SECRET_WORDS``), at any depth; the user info and credential query parameters of
    URLs; header values that are credentials (under any ``*headers`` field, and any
    ``Bearer ...``/``Basic ...`` value). A string holding a JSON object (``engine_kwargs``) is
    redacted inside and kept as a mapping.
    """
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in sorted(value.items(), key=lambda kv: str(kv[0])):
            name = str(k)
            if name in secret_fields or (_secret_name(name) and v not in (None, "", [], {})):
                out[name] = REDACTED
            elif name.lower().endswith("headers") and isinstance(v, Mapping):
                out[name] = _redact_headers(v)
            else:
                out[name] = redact_settings(v)
        return out
    if isinstance(value, list | tuple):
        return [redact_settings(v) for v in value]
    if isinstance(value, str):
        if value.startswith("{"):
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError:
                return value
            return redact_settings(parsed) if isinstance(parsed, dict) else value
        if _is_auth_value(value):
            return REDACTED
        if "://" in value:
            return redact_url(value)
    return value


# Settings that say where this run kept its files, not what it made: two homes that build the same
# data get the same content manifest (and root digest); the paths go to the run statistics.
LOCATION_FIELDS = frozenset({"home", "cache_dir", "root", "workdir", "data_root", "local_dir"})


def split_locations(resources: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(settings, locations)``: each resource's settings without its ``LOCATION_FIELDS``, and those.

    The first goes into the content manifest, the second into the run statistics.
    """
    settings: dict[str, Any] = {}
    locations: dict[str, Any] = {}
    for name, value in resources.items():
        if isinstance(value, Mapping):
            settings[name] = {k: v for k, v in value.items() if k not in LOCATION_FIELDS}
            where = {k: v for k, v in value.items() if k in LOCATION_FIELDS}
            if where:
                locations[name] = where
        else:
            settings[name] = value
    return settings, locations


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


def _role_entries(metadata: Mapping[str, Mapping[str, Any]]) -> Any:
    """``(stage, role, identity, md, stats prefix)`` of every LLM role a stage's metadata names."""
    for stage, md in sorted(metadata.items()):
        for key, identity in sorted(md.items()):
            if not key.endswith("/model") or not isinstance(identity, Mapping) or "backend" not in identity:
                continue
            role = key[: -len("/model")]
            # Stats are recorded under the role's prefix, or under "llm" by stages with one role.
            yield stage, role, identity, md, (role if f"{role}/calls" in md else "llm")


def llm_roles(
    metadata: Mapping[str, Mapping[str, Any]], llm_calls: Mapping[str, list[Mapping[str, Any]]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per LLM stage (asset), per role: backend, model, weights_id and sampling (what made the data).

    Args:
        metadata: ``{asset: {metadata key: plain value}}`` of the latest upstream materializations;
            an LLM stage records ``<role>/model`` (the identity) and ``<role>/calls``,
            ``<role>/cache_hits`` (``BatchStats.to_metadata``).
        llm_calls: ``llm_calls_by_stage``: the sampling parameters of the cached calls per stage.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for stage, role, identity, _md, _prefix in _role_entries(metadata):
        out.setdefault(stage, {})[role] = {
            "backend": identity.get("backend"),
            "model": identity.get("model"),
            "weights_id": identity.get("weights_sha256") or identity.get("weights_id"),
            # Only this role's model's calls: a stage's ledger also names upstream calls
            # (rag_verdicts keeps the generation's key beside the judge's).
            "sampling": _sampling([s for s in llm_calls.get(stage) or [] if _same_model(s, identity)]),
        }
    return out


def llm_stats(metadata: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per LLM stage, per role: the calls and cache hits of the run that materialized it.

    These depend on the run's history (a resumed run finds earlier calls in the cache), never on
    the data: the run statistics hold them, the content manifest does not.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for stage, role, _identity, md, prefix in _role_entries(metadata):
        out.setdefault(stage, {})[role] = {f: md.get(f"{prefix}/{f}") for f in LLM_STAT_FIELDS}
    return out
