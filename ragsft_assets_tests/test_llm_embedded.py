"""The real embedded model end to end (vLLM on CPU, SmolLM2-135M-Instruct): one engine per session."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from ragsft_assets.llm import engines
from ragsft_assets.llm.backends.base import Request
from ragsft_assets.llm.models import count_tokens, ensure_embedded_model, read_marker
from ragsft_assets.llm.types import STATUS_OK, ChatModel, SamplingParams
from ragsft_assets.resources.llm import LLMResource

pytestmark = pytest.mark.integration

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population_millions": {"type": "number"}},
    "required": ["city", "population_millions"],
    "additionalProperties": False,
}
COUNTRIES = ["France", "Japan", "Brazil", "Kenya", "Canada", "Italy", "India", "Egypt", "Chile", "Norway"]


def test_converted_model_folder_is_complete() -> None:
    folder = ensure_embedded_model()
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    marker = read_marker(folder)
    assert marker is not None and len(marker["weights_sha256"]) == 64
    assert "quantization_config" not in (folder / "config.json").read_text()
    a, b = count_tokens(["hello world", "Bonjour le monde, comment allez-vous aujourd'hui ?"])
    assert 1 <= a < b


def test_plain_batch_then_rerun_from_cache(embedded_model: LLMResource) -> None:
    convs = [
        [{"role": "user", "content": f"Name one famous person from {c}. One short sentence."}]
        for c in COUNTRIES[:4]
    ]
    params = SamplingParams(max_tokens=32)
    first = embedded_model.chat(convs, params, template_version="test-plain")
    assert first.stats.calls == 4 and first.stats.completion_tokens > 0
    assert all(r.status == STATUS_OK and r.text.strip() and r.cache_key for r in first.results)
    assert all(r.prompt_tokens > 10 for r in first.results)
    again = embedded_model.chat(convs, params, template_version="test-plain")
    assert (again.stats.calls, again.stats.cache_hits) == (0, 4)
    assert [r.text for r in again.results] == [r.text for r in first.results]


def test_json_schema_batch_is_mostly_valid(embedded_model: LLMResource) -> None:
    system = "You answer with a JSON object with keys city (string) and population_millions (number)."
    convs = [
        [{"role": "system", "content": system}, {"role": "user", "content": f"What is the capital of {c}?"}]
        for c in COUNTRIES
    ]
    batch = embedded_model.chat(
        convs, SamplingParams(max_tokens=96), json_schema=SCHEMA, template_version="t-json"
    )
    ok = [r for r in batch.results if r.status == STATUS_OK]
    assert len(ok) >= 0.8 * len(COUNTRIES), [r.text for r in batch.results]
    assert all(isinstance(r.parsed["city"], str) for r in ok)
    assert batch.stats.unreadable == len(COUNTRIES) - len(ok)


def test_raw_completion_and_template_kwargs_in_one_engine_batch(embedded_model: LLMResource) -> None:
    # One mixed batch: the backend groups it into LLM.generate (raw prompts) and LLM.chat calls
    # per chat-template kwargs; each result must come back at its own index.
    params = SamplingParams(max_tokens=24, stop=("\n",))
    prompts = ["The capital of France is the city of", "1, 2, 3, 4, 5,"]
    reqs = [Request((), params, None, None, prompts[0])]
    reqs.append(
        Request([{"role": "user", "content": "Say hello."}], params, None, {"enable_thinking": False})
    )
    reqs.append(Request((), params, None, None, prompts[1]))
    batch = embedded_model.run(reqs, template_version="t-mixed")
    assert [r.status for r in batch.results] == [STATUS_OK] * 3, [r.error for r in batch.results]
    assert all("\n" not in r.text for r in batch.results)
    # A raw prompt is not wrapped in the chat template: far fewer prompt tokens than a chat.
    assert batch.results[0].prompt_tokens < 15 < batch.results[1].prompt_tokens
    again = embedded_model.complete(prompts, params, template_version="t-mixed")
    assert again.stats.cache_hits == 2
    assert [r.text for r in again.results] == [batch.results[0].text, batch.results[2].text]


def test_seeded_sampling_on_a_batch_larger_than_one_step(embedded_model: LLMResource) -> None:
    """Temperature > 0 with per-request seeds over long prompts that do not fit one scheduler step.

    Regression: with chunked prefill, vLLM rewinds a request's generator, which CPU generators
    refuse, and every request of such a batch came back as an error.
    """
    filler = " ".join(
        f"Paragraph {i}: the river passes the town of Valrenne in the year {1800 + i}." for i in range(60)
    )
    convs = [
        [{"role": "user", "content": f"{filler}\nQuestion {k}: name one town from the text."}]
        for k in range(24)
    ]
    params = SamplingParams(temperature=0.7, max_tokens=8, seed=11)
    batch = embedded_model.chat(convs, params, template_version="t-seeded-long")
    assert batch.stats.errors == 0, [r.error for r in batch.results if r.error][:2]
    assert sum(r.prompt_tokens for r in batch.results) > 8192  # more than one step's token budget
    again = embedded_model.chat(convs, params, template_version="t-seeded-long")
    assert again.stats.calls == 0


def test_a_dagster_run_reuses_the_session_engine(embedded_model: LLMResource, tmp_path: Path) -> None:
    engine_before = embedded_model.client().backend

    @dg.asset
    def greetings(
        generator: dg.ResourceParam[ChatModel], judge: dg.ResourceParam[ChatModel]
    ) -> dg.MaterializeResult:
        convs = [[{"role": "user", "content": "Say hi to Ada in three words."}]]
        a = generator.chat(convs, SamplingParams(max_tokens=16), template_version="dg")
        b = judge.chat(convs, SamplingParams(max_tokens=16), template_version="dg")
        assert a.results[0].text == b.results[0].text
        return dg.MaterializeResult(metadata=a.stats.add(b.stats).to_metadata())

    cache = str(tmp_path / "cache")
    resources = {
        "generator": LLMResource(backend="embedded", cache_dir=cache, role="generator"),
        "judge": LLMResource(backend="embedded", cache_dir=cache, role="judge"),
    }
    result = dg.materialize([greetings], resources=resources, instance=dg.DagsterInstance.ephemeral())
    assert result.success
    md = result.asset_materializations_for_node("greetings")[0].metadata
    assert (md["llm/calls"].value, md["llm/cache_hits"].value) == (1, 1)
    embedded = [h for h in engines.live_engines() if h[0] == "embedded"]
    assert len(embedded) == 1 and embedded_model.client().backend is engine_before
