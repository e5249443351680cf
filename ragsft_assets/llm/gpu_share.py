"""GPU memory shares of the in-process vLLM engines on one GPU.

Roles with the same model and settings share one engine (``llm.engines``); roles on different
models each start their own. vLLM gives every engine ``gpu_memory_utilization=0.9`` by default, so a
second engine on the same GPU cannot start. Each engine whose role sets no share gets an equal part
of what the roles that set one leave; a split that cannot work fails at start, naming the
``RAGSFT_<ROLE>_GPU_MEMORY_UTILIZATION`` variables to set (docs/one-gpu.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

TOTAL = 0.9  # vLLM's default for one engine: what all engines on one GPU may take together
MIN_SHARE = 0.05  # below this an engine has no room for its KV cache: fail instead of starting
IN_PROCESS = ("embedded", "vllm")  # backends that start an engine in this process


@dataclass(frozen=True)
class RoleEngine:
    """One role on the GPU: the engine it uses (equal engines are shared) and the share it sets."""

    role: str
    engine: tuple[Any, ...]
    share: float | None = None


def variable(role: str) -> str:
    """Where a role's share is set: ``RAGSFT_<ROLE>_GPU_MEMORY_UTILIZATION`` (or the launchpad)."""
    if not role.isidentifier():  # an engine that no role of the environment describes
        return f"gpu_memory_utilization of {role}"
    if role == "embedder":  # the embedder's engine settings are one JSON object
        return 'RAGSFT_EMBEDDER_ENGINE_KWARGS={"gpu_memory_utilization": ...}'
    return f"RAGSFT_{role.upper()}_GPU_MEMORY_UTILIZATION"


def split(
    roles: Sequence[RoleEngine], total: float = TOTAL, min_share: float = MIN_SHARE
) -> dict[str, float]:
    """Each role's ``gpu_memory_utilization``: a set share as set; the engines without one split
    equally what is left of ``total``. Roles on the same engine (and the same set share) get the same
    number, since they are one engine.

    Raises:
        ValueError: the set shares exceed ``total``, or leave less than ``min_share`` per remaining
            engine; the message names the variables to set.
    """
    engines: dict[tuple[Any, ...], list[RoleEngine]] = {}
    for r in roles:
        engines.setdefault((r.engine, r.share), []).append(r)
    fixed = {key: key[1] for key in engines if key[1] is not None}
    open_ = [key for key in engines if key[1] is None]
    used = sum(fixed.values())
    if used > total + 1e-9:
        named = ", ".join(f"{variable(r.role)} ({r.share})" for k in fixed for r in engines[k])
        raise ValueError(
            f"the GPU memory shares of the engines on this GPU add up to {used:.2f} > {total}: {named};"
            f" lower them so that every engine fits (docs/one-gpu.md)"
        )
    each = (total - used) / len(open_) if open_ else 0.0
    if open_ and each < min_share:
        names = ", ".join(variable(r.role) for k in open_ for r in engines[k])
        raise ValueError(
            f"{len(open_)} engine(s) would get {each:.3f} of the GPU each (less than {min_share}) after"
            f" the shares already set ({used:.2f}): set {names} so that they add up to at most {total}"
            f" (docs/one-gpu.md)"
        )
    shares = {key: fixed.get(key, each) for key in engines}
    return {r.role: round(shares[key], 4) for key, members in engines.items() for r in members}


def _without_share(kind: str, options: dict[str, Any]) -> tuple[tuple[Any, ...], float | None]:
    """The engine identity of (kind, options) with the share taken out, and the share it sets."""
    opts = dict(options)
    settings = orjson.loads(opts.pop("engine_json", "") or "{}")
    share = settings.pop("gpu_memory_utilization", None)
    ident = (kind, *sorted(opts.items()), orjson.dumps(settings, option=orjson.OPT_SORT_KEYS).decode())
    return ident, share


def role_engine(resource: Any) -> RoleEngine | None:
    """A role resource's engine as ``llm.engines`` keys it, and the share it sets; None for a
    role that starts no engine in this process (an HTTP role)."""
    if resource.backend not in IN_PROCESS:
        return None
    kind, options = resource._backend_options()
    engine, share = _without_share(kind, options)
    return RoleEngine(resource.role, engine, share)


# Who says which roles run on this machine: the Dagster layer (``defs/resources``) registers the
# roles the environment configures; the LLM layer never reaches up for them.
_roles_provider: Callable[[], Sequence[Any]] | None = None


def set_roles_provider(provider: Callable[[], Sequence[Any]]) -> None:
    """Register the function that gives the role resources of this machine (``defs/resources``)."""
    global _roles_provider
    _roles_provider = provider


def roles_on_gpu() -> list[RoleEngine]:
    """The roles the registered provider runs in process, with their engines (none registered:
    no role is known, and a starting engine counts as the only one)."""
    resources = _roles_provider() if _roles_provider is not None else []
    return [r for r in (role_engine(res) for res in resources) if r is not None]


def engine_share(model: str) -> float:
    """The default ``gpu_memory_utilization`` of a starting engine for ``model`` (a folder or a hub
    id) that sets none: its part of the split of every role on the GPU. An engine the environment
    does not describe (a model set from the launchpad) counts as one more engine.

    Raises:
        ValueError: from ``split``, naming the variables to set.
    """
    roles = roles_on_gpu()
    known = any(r.share is None and dict(r.engine[1:-1]).get("model") == model for r in roles)
    if not known and not any(
        r.share is None and r.engine[0] in ("embedded", "embed:embedded") for r in roles
    ):
        roles.append(RoleEngine(f"the engine of {model}", ("launchpad", model), None))
    shares = split(roles)
    open_shares = [shares[r.role] for r in roles if r.share is None]
    return min(open_shares) if open_shares else TOTAL
