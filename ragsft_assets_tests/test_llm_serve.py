"""``vllm serve`` of the embedded model, reached through the ``openai`` backend (start, reuse, stop).

It starts a second engine (a server process); `scripts/test.sh` runs it (RAGSFT_TEST_SERVE=1, its default):
``RAGSFT_TEST_SERVE=1 pytest -m integration ragsft_assets_tests/test_llm_serve.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ragsft_assets.llm.serve import ensure_server, stop_server
from ragsft_assets.llm.types import STATUS_OK, SamplingParams
from ragsft_assets.resources.llm import LLMResource

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("RAGSFT_TEST_SERVE") != "1", reason="set RAGSFT_TEST_SERVE=1 to run"),
]

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_vllm_serve_through_the_openai_backend(tmp_home: Path) -> None:
    pytest.importorskip("vllm")
    try:
        info = ensure_server()
        assert ensure_server().pid == info.pid  # reused, not restarted
        res = LLMResource(backend="openai", serve=True, timeout_s=300, cache_dir=str(tmp_home / "c"))
        convs = [
            [{"role": "user", "content": f"What is the capital of {c}? Answer in JSON."}]
            for c in ("France", "Peru")
        ]
        batch = res.chat(convs, SamplingParams(max_tokens=48), json_schema=SCHEMA, template_version="serve")
        assert batch.stats.calls == 2 and batch.stats.completion_tokens > 0
        assert sum(r.status == STATUS_OK for r in batch.results) >= 1, [r.text for r in batch.results]
        ident = res.model_identity()
        assert ident["backend"] == "openai" and len(ident["weights_sha256"]) == 64
        res.close()
    finally:
        stopped = stop_server()
    assert stopped and not stop_server()
