"""GPU memory shares of the in-process vLLM engines on one GPU.

Roles with the same model and settings share one engine (``llm.engines``); roles on different
models each start their own. vLLM gives every engine ``gpu_memory_utilization=0.9`` by default, so a
second engine on the same GPU cannot start. The engines counted are those of the roles the run's
selection uses (``set_selection_provider``; every role of the environment when unknown). Each engine
whose role sets no share gets a part of what the roles that set one leave, in proportion to what it
needs: its weights plus a KV-cache floor (one sequence of its context length) plus a fixed overhead
(``model_size``; an equal part when a size is unknown). A split that cannot fit fails at start with
the numbers, naming the ``RAGSFT_<ROLE>_GPU_MEMORY_UTILIZATION`` variables (docs/one-gpu.md).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

TOTAL = 0.9  # vLLM's default for one engine: what all engines on one GPU may take together
MIN_SHARE = 0.05  # below this an engine has no room for its KV cache: fail instead of starting
IN_PROCESS = ("embedded", "vllm")  # backends that start an engine in this process
GIB = 1024**3
# ours: what one engine takes besides weights and KV cache (CUDA context, activations, CUDA graphs),
# a round figure above what vLLM 0.32 reports for 0.6B to 8B models.
OVERHEAD_BYTES = 1 * GIB
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


@dataclass(frozen=True)
class ModelSize:
    """What a model needs on the GPU: its weights and the KV cache of one token (K and V, every layer)."""

    weights_bytes: int
    kv_bytes_per_token: int
    source: str  # where the numbers come from (a folder, the hub cache, the table below)

    def need(self, context_tokens: int) -> int:
        """Weights + a KV-cache floor of one sequence of ``context_tokens`` + the overhead, in bytes."""
        return self.weights_bytes + self.kv_bytes_per_token * max(1, context_tokens) + OVERHEAD_BYTES


def _kv_per_token(config: dict[str, Any], kv_dtype_bytes: int = 2) -> int:
    """2 (K and V) x layers x KV heads x head size x bytes (bf16/fp16 KV cache), from config.json."""
    text = config.get("text_config", config)  # multimodal configs nest the language model's
    heads = int(text["num_attention_heads"])
    head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    return 2 * int(text["num_hidden_layers"]) * kv_heads * head_dim * kv_dtype_bytes


# ours: the models docs/one-gpu.md names, in bf16, from each model's config.json on the hub (layers,
# KV heads, head size) and its safetensors files' total size: used when the weights are not on disk.
KNOWN_MODELS: dict[str, ModelSize] = {
    "Qwen/Qwen2.5-7B-Instruct": ModelSize(15_231_233_024, 2 * 28 * 4 * 128 * 2, "table"),
    "Qwen/Qwen2.5-7B": ModelSize(15_231_233_024, 2 * 28 * 4 * 128 * 2, "table"),
    "Qwen/Qwen3-8B": ModelSize(16_381_470_720, 2 * 36 * 8 * 128 * 2, "table"),
    "Qwen/Qwen3-4B-Base": ModelSize(8_044_936_192, 2 * 36 * 8 * 128 * 2, "table"),
    "Qwen/Qwen3-Embedding-0.6B": ModelSize(1_191_586_416, 2 * 28 * 8 * 128 * 2, "table"),
}


def _hub_snapshot(model: str) -> Path | None:
    """The newest downloaded snapshot folder of a hub id in the Hugging Face cache, if any."""
    hf_home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    hub = Path(os.environ.get("HF_HUB_CACHE") or hf_home / "hub")
    snaps = hub / f"models--{model.replace('/', '--')}" / "snapshots"
    found = sorted(snaps.glob("*/config.json"), key=lambda p: p.stat().st_mtime) if snaps.is_dir() else []
    return found[-1].parent if found else None


def model_size(model: str) -> ModelSize | None:
    """The model's size from its folder (a path, or the hub cache for a hub id): weight files and
    ``config.json``; else from ``KNOWN_MODELS``; None when neither knows it."""
    folder = Path(model) if Path(model).is_dir() else _hub_snapshot(model)
    if folder is not None and (folder / "config.json").is_file():
        weights = sum(
            p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)
        )
        try:
            kv = _kv_per_token(json.loads((folder / "config.json").read_text(encoding="utf-8")))
        except (KeyError, ValueError, TypeError):
            kv = None
        if weights and kv:
            return ModelSize(weights, kv, str(folder))
    return KNOWN_MODELS.get(model)


@dataclass(frozen=True)
class RoleEngine:
    """One role on the GPU: the engine it uses (equal engines are shared) and the share it sets."""

    role: str
    engine: tuple[Any, ...]
    share: float | None = None
    need: int | None = None  # bytes it needs on the GPU (ModelSize.need), None when unknown


def variable(role: str) -> str:
    """Where a role's share is set: ``RAGSFT_<ROLE>_GPU_MEMORY_UTILIZATION`` (or the launchpad)."""
    if not role.isidentifier():  # an engine that no role of the environment describes
        return f"gpu_memory_utilization of {role}"
    if role == "embedder":  # the embedder's engine settings are one JSON object
        return 'RAGSFT_EMBEDDER_ENGINE_KWARGS={"gpu_memory_utilization": ...}'
    return f"RAGSFT_{role.upper()}_GPU_MEMORY_UTILIZATION"


def _floor4(x: float) -> float:
    """Down to 4 decimals, so that shares never add up to more than the total by rounding."""
    return math.floor(x * 10_000 + 1e-6) / 10_000


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _names(members: Sequence[RoleEngine]) -> str:
    model = dict(members[0].engine[1:-1]).get("model") if len(members[0].engine) > 2 else None
    return "/".join(r.role for r in members) + (f" ({model})" if model else "")


def split(
    roles: Sequence[RoleEngine],
    total: float = TOTAL,
    min_share: float = MIN_SHARE,
    gpu_bytes: int | None = None,
) -> dict[str, float]:
    """Each role's ``gpu_memory_utilization``: a set share as set; the engines without one share what
    is left of ``total``: in proportion to what each needs when every need and the GPU's memory
    (``gpu_bytes``) are known, else equally. Roles on the same engine (and the same set share) get the
    same number, since they are one engine.

    Raises:
        ValueError: the set shares exceed ``total``; or the engines need more than what is left (the
            numbers of each engine, and the GPU's); or an equal part is below ``min_share`` or below a
            known need. The message names the variables to set.
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
    left = total - used
    needs = {key: max((r.need or 0) for r in engines[key]) or None for key in open_}
    names = ", ".join(variable(r.role) for k in open_ for r in engines[k])
    if open_ and gpu_bytes and all(needs.values()):
        want = sum(n for n in needs.values() if n)
        if want > left * gpu_bytes:
            detail = "; ".join(f"{_names(engines[k])} {_gib(needs[k] or 0)}" for k in open_)
            raise ValueError(
                f"the engines this run starts need {_gib(want)} ({detail}: weights + KV cache of one"
                f" full-length sequence + {_gib(OVERHEAD_BYTES)}), but {left:.2f} of this GPU's"
                f" {_gib(gpu_bytes)} is {_gib(left * gpu_bytes)}: use a larger GPU (docs/one-gpu.md"
                f" gives the smallest for each setup), lower the roles' MAX_MODEL_LEN, serve one model"
                f" elsewhere (backend openai), or set {names} yourself"
            )
        shares = {key: _floor4(left * (needs[key] or 0) / want) for key in open_}
    else:
        each = left / len(open_) if open_ else 0.0
        if open_ and each < min_share:
            raise ValueError(
                f"{len(open_)} engine(s) would get {each:.3f} of the GPU each (less than {min_share})"
                f" after the shares already set ({used:.2f}): set {names} so that they add up to at"
                f" most {total} (docs/one-gpu.md)"
            )
        for key in open_:
            if gpu_bytes and needs[key] and needs[key] > each * gpu_bytes:
                raise ValueError(
                    f"{_names(engines[key])} needs {_gib(needs[key] or 0)} but its equal part {each:.3f}"
                    f" of this GPU's {_gib(gpu_bytes)} is {_gib(each * gpu_bytes)}: set {names} (the"
                    f" sizes of the other engines are unknown here; docs/one-gpu.md)"
                )
        shares = {key: _floor4(each) for key in open_}
    shares.update(fixed)
    return {r.role: round(shares[key], 4) for key, members in engines.items() for r in members}


def _without_share(kind: str, options: dict[str, Any]) -> tuple[tuple[Any, ...], float | None]:
    """The engine identity of (kind, options) with the share taken out, and the share it sets."""
    opts = dict(options)
    settings = orjson.loads(opts.pop("engine_json", "") or "{}")
    share = settings.pop("gpu_memory_utilization", None)
    ident = (kind, *sorted(opts.items()), orjson.dumps(settings, option=orjson.OPT_SORT_KEYS).decode())
    return ident, share


def _context_tokens(engine: tuple[Any, ...]) -> int:
    opts = dict(engine[1:-1])
    return int(opts.get("max_model_len") or opts.get("max_tokens") or 4096)


def engine_need(engine: tuple[Any, ...]) -> int | None:
    """Bytes an engine needs (``ModelSize.need`` at its context length); None when its size is unknown."""
    model = dict(engine[1:-1]).get("model") if len(engine) > 2 else None
    size = model_size(str(model)) if model else None
    return size.need(_context_tokens(engine)) if size else None


def role_engine(resource: Any) -> RoleEngine | None:
    """A role resource's engine as ``llm.engines`` keys it, the share it sets and what it needs;
    None for a role that starts no engine in this process (an HTTP role)."""
    if resource.backend not in IN_PROCESS:
        return None
    kind, options = resource._backend_options()
    engine, share = _without_share(kind, options)
    return RoleEngine(resource.role, engine, share, engine_need(engine))


# Who says which roles run on this machine: the Dagster layer (``defs/resources``) registers the
# roles the environment configures, and which of them the current run's selection uses; the LLM
# layer never reaches up for them.
_roles_provider: Callable[[], Sequence[Any]] | None = None
_selection_provider: Callable[[], Collection[str] | None] | None = None


def set_roles_provider(provider: Callable[[], Sequence[Any]]) -> None:
    """Register the function that gives the role resources of this machine (``defs/resources``)."""
    global _roles_provider
    _roles_provider = provider


def set_selection_provider(provider: Callable[[], Collection[str] | None]) -> None:
    """Register the function that gives the roles the current run's selection uses (None: unknown)."""
    global _selection_provider
    _selection_provider = provider


def roles_on_gpu() -> list[RoleEngine]:
    """The roles the registered provider runs in process, with their engines, kept to the roles the
    run's selection uses when that is known (none registered: no role is known, and a starting
    engine counts as the only one)."""
    resources = list(_roles_provider()) if _roles_provider is not None else []
    selected = _selection_provider() if _selection_provider is not None else None
    if selected is not None:
        resources = [r for r in resources if r.role in selected]
    return [r for r in (role_engine(res) for res in resources) if r is not None]


def gpu_total_bytes() -> int | None:
    """The memory of the current CUDA device (None without torch or a GPU)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info()[1])


def engine_share(model: str, gpu_bytes: int | None = None) -> float:
    """The default ``gpu_memory_utilization`` of a starting engine for ``model`` (a folder or a hub
    id) that sets none: its part of the split of the roles the run uses on the GPU. An engine the
    environment does not describe (a model set from the launchpad) counts as one more engine.

    Args:
        model: The starting engine's model.
        gpu_bytes: The GPU's memory; the current CUDA device's when None.

    Raises:
        ValueError: from ``split``, with the numbers and the variables to set.
    """
    roles = roles_on_gpu()
    mine = [r for r in roles if r.share is None and dict(r.engine[1:-1]).get("model") == model]
    if not mine and not any(r.share is None and r.engine[0] in ("embedded", "embed:embedded") for r in roles):
        size = model_size(model)
        roles.append(
            RoleEngine(
                f"the engine of {model}", ("launchpad", model), None, size.need(4096) if size else None
            )
        )
        mine = roles[-1:]
    shares = split(roles, gpu_bytes=gpu_bytes if gpu_bytes is not None else gpu_total_bytes())
    # This model's share when the split knows it; else the smallest open one (an embedded engine).
    ours = [shares[r.role] for r in mine]
    open_shares = [shares[r.role] for r in roles if r.share is None]
    return min(ours or open_shares) if (ours or open_shares) else TOTAL


# Sizes of GPU cards as torch reports them (GiB, a little under the nominal size). ours: common cards
# that CUDA 13 (the `gpu` extra's vLLM wheels) supports: compute capability 7.5 (Turing) or newer.
CARDS: tuple[tuple[str, float], ...] = (
    ("16 GB (T4, RTX 4060 Ti 16GB)", 14.6),
    ("24 GB (L4, A10, RTX 4090)", 22.0),
    ("40 GB (A100 40GB)", 39.4),
    ("48 GB (L40S, RTX 6000 Ada, A6000)", 44.4),
    ("80 GB (A100 80GB, H100)", 79.1),
    ("141 GB (H200)", 139.8),
)


def smallest_card(needs: Sequence[int], total: float = TOTAL) -> str | None:
    """The smallest card of ``CARDS`` whose ``total`` share holds every engine's need; None if none."""
    for name, gib in CARDS:
        if sum(needs) <= total * gib * GIB:
            return name
    return None
