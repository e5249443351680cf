"""Only the last vLLM engine of a process runs vLLM's shutdown (it destroys the shared distributed state)."""

from __future__ import annotations

from types import SimpleNamespace

from ragsft_assets.llm.backends import vllm_backend


def _fake_llm(log: list[str], name: str) -> SimpleNamespace:
    core = SimpleNamespace(shutdown=lambda: log.append(name))
    return SimpleNamespace(llm_engine=SimpleNamespace(engine_core=core))


def test_an_engine_closed_while_another_lives_is_not_shut_down(monkeypatch) -> None:
    monkeypatch.setattr(vllm_backend, "_live_engines", 0)
    monkeypatch.setattr(vllm_backend, "_parked", [])
    shut: list[str] = []
    chat, pooling = _fake_llm(shut, "chat"), _fake_llm(shut, "pooling")
    vllm_backend.engine_started()  # the chat engine
    vllm_backend.engine_started()  # an embedding engine beside it
    assert vllm_backend.shutdown_engine(pooling) is False and shut == []  # the chat engine keeps its state
    assert vllm_backend._parked == [pooling]  # kept referenced: its finalizer would shut it down on GC
    assert vllm_backend.shutdown_engine(chat) is True and shut == ["pooling", "chat"]  # all, with the last
    assert vllm_backend._live_engines == 0
