"""The content-addressed cache: keys, identity, concurrent writers, resume after SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from ragsft_assets.llm.backends.base import Completion, OnResult, Request
from ragsft_assets.llm.cache import LLMCache, cache_key
from ragsft_assets.llm.client import ChatClient
from ragsft_assets.llm.types import SamplingParams

REPO = Path(__file__).resolve().parents[1]


class FakeBackend:
    """A deterministic backend: answers ``echo:<last user message>``; counts calls.

    ``hang_after``: requests from that index on (within one generate call) block forever,
    so a test can kill the process after exactly that many completions.
    """

    def __init__(self, weights: str = "w1", delay_s: float = 0.0, hang_after: int | None = None) -> None:
        self.weights = weights
        self.delay_s = delay_s
        self.hang_after = hang_after
        self.calls = 0

    def identity(self) -> dict[str, str]:
        return {"backend": "fake", "model": "fake-model", "weights_sha256": self.weights}

    def generate(self, requests: Sequence[Request], on_result: OnResult) -> None:
        for i, r in enumerate(requests):
            if self.hang_after is not None and i >= self.hang_after:
                time.sleep(3600)
            time.sleep(self.delay_s)
            self.calls += 1
            on_result(
                i, Completion(text="echo:" + r.messages[-1]["content"], prompt_tokens=3, completion_tokens=2)
            )
            print(f"done {i}", flush=True)  # the parent counts these lines

    def close(self) -> None:
        pass


def _convs(n: int, tag: str = "q") -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"{tag}{i}"}] for i in range(n)]


def child_main(cache_dir: str, m: int, hang_after: int, tag: str = "q") -> None:
    """Entry point of the subprocesses below (module-level so ``python -c`` can import it)."""
    hang = hang_after if hang_after >= 0 else None
    client = ChatClient(FakeBackend(hang_after=hang), LLMCache(cache_dir))
    batch = client.chat(_convs(m, tag), SamplingParams())
    print(f"calls {batch.stats.calls} hits {batch.stats.cache_hits}", flush=True)


def _child(cache_dir: Path, m: int, hang_after: int, tag: str = "q") -> subprocess.Popen[str]:
    code = (
        "import sys; from ragsft_assets_tests.test_llm_cache import child_main; "
        f"child_main({str(cache_dir)!r}, {m}, {hang_after}, {tag!r})"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


BASE = dict(
    identity={"backend": "fake", "model": "m", "weights_sha256": "w"},
    params=SamplingParams(),
    messages=[{"role": "user", "content": "hi"}],
    json_schema={"type": "object"},
    template_version="v1",
)


@pytest.mark.parametrize(
    "change",
    [
        {"identity": {"backend": "other", "model": "m", "weights_sha256": "w"}},
        {"identity": {"backend": "fake", "model": "m2", "weights_sha256": "w"}},
        {"identity": {"backend": "fake", "model": "m", "weights_sha256": "w2"}},
        {"params": SamplingParams(temperature=0.5)},
        {"params": SamplingParams(max_tokens=257)},
        {"params": SamplingParams(seed=1)},
        {"params": SamplingParams(top_p=0.9)},
        {"params": SamplingParams(stop=("\n",))},
        {"messages": [{"role": "user", "content": "hi!"}]},
        {"messages": [{"role": "system", "content": "hi"}]},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]},
        {"json_schema": None},
        {"json_schema": {"type": "array"}},
        {"template_version": "v2"},
    ],
)
def test_key_changes_with_any_input(change: dict) -> None:
    assert cache_key(**{**BASE, **change}) != cache_key(**BASE)


def test_key_is_stable_and_ignores_schema_key_order() -> None:
    a = cache_key(**{**BASE, "json_schema": {"type": "object", "required": ["a"]}})
    b = cache_key(**{**BASE, "json_schema": {"required": ["a"], "type": "object"}})
    assert a == b == cache_key(**{**BASE, "json_schema": {"type": "object", "required": ["a"]}})
    assert len(a) == 64


def test_rerun_makes_zero_calls_and_serves_only_same_identity(tmp_path: Path) -> None:
    cache = LLMCache(tmp_path)
    first = FakeBackend("w1")
    b1 = ChatClient(first, cache).chat(_convs(5), SamplingParams(), template_version="t")
    assert (first.calls, b1.stats.calls, b1.stats.cache_hits) == (5, 5, 0)
    again = FakeBackend("w1")
    b2 = ChatClient(again, cache).chat(_convs(5), SamplingParams(), template_version="t")
    assert (again.calls, b2.stats.calls, b2.stats.cache_hits) == (0, 0, 5)
    assert [r.text for r in b2.results] == [r.text for r in b1.results]
    assert [r.cache_key for r in b2.results] == [r.cache_key for r in b1.results]
    assert all(r.cached for r in b2.results) and not any(r.cached for r in b1.results)
    # Other weights behind the same model name: nothing is served from the cache.
    other = FakeBackend("w2")
    b3 = ChatClient(other, cache).chat(_convs(5), SamplingParams(), template_version="t")
    assert (other.calls, b3.stats.cache_hits) == (5, 0)
    assert len(cache) == 10


def test_show_and_stats(tmp_path: Path) -> None:
    cache = LLMCache(tmp_path)
    batch = ChatClient(FakeBackend(), cache).chat(_convs(3), SamplingParams(), template_version="tv1")
    key = batch.results[1].cache_key
    shown = cache.show(key[:10])
    assert shown is not None and shown["key"] == key
    assert shown["request"]["messages"] == [{"role": "user", "content": "q1"}]
    assert shown["response"]["text"] == "echo:q1"
    assert cache.show("f" * 64 if not key.startswith("f") else "0" * 64) is None
    (row,) = cache.stats()
    assert (row["model"], row["template_version"], row["entries"], row["completion_tokens"]) == (
        "fake-model",
        "tv1",
        3,
        6,
    )


def test_concurrent_threads_share_one_cache(tmp_path: Path) -> None:
    cache = LLMCache(tmp_path)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            ChatClient(FakeBackend(), cache).chat(_convs(40, tag=f"t{k % 2}-"), SamplingParams())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(cache) == 80


def test_concurrent_processes_write_one_cache(tmp_path: Path) -> None:
    # Three processes, overlapping requests (two share a tag), all writing at once.
    procs = [_child(tmp_path, 60, -1, tag) for tag in ("a", "a", "b")]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    assert len(LLMCache(tmp_path)) == 120
    rerun = ChatClient(FakeBackend(), LLMCache(tmp_path))
    batch = rerun.chat(_convs(60, "a") + _convs(60, "b"), SamplingParams())
    assert (batch.stats.calls, batch.stats.cache_hits) == (0, 120)
    assert batch.results[7].text == "echo:a7"


def test_sigkill_loses_only_calls_in_flight_and_rerun_makes_the_rest(tmp_path: Path) -> None:
    m, n = 12, 5
    proc = _child(tmp_path, m, n)
    assert proc.stdout is not None
    seen = 0
    while seen < n:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "child died"
        seen += line.startswith("done ")
    os.kill(proc.pid, signal.SIGKILL)  # request n is in flight: it must be the only thing lost
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert len(LLMCache(tmp_path)) == n
    rerun = _child(tmp_path, m, -1)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert f"calls {m - n} hits {n}" in out


def test_cli_show_and_stats(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ragsft_assets.cli.cache import cache as cache_cli

    batch = ChatClient(FakeBackend(), LLMCache(tmp_path)).chat(
        _convs(2), SamplingParams(), template_version="tv"
    )
    runner = CliRunner()
    shown = runner.invoke(cache_cli, ["show", batch.results[0].cache_key[:12], "--cache-dir", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert '"text": "echo:q0"' in shown.output and '"content": "q0"' in shown.output
    stats = runner.invoke(cache_cli, ["stats", "--cache-dir", str(tmp_path)])
    assert stats.exit_code == 0 and "fake-model" in stats.output and "total entries: 2" in stats.output
    missing = runner.invoke(cache_cli, ["show", "ffff0000", "--cache-dir", str(tmp_path)])
    assert missing.exit_code != 0 and "no cached call" in missing.output
    empty = runner.invoke(cache_cli, ["stats", "--cache-dir", str(tmp_path / "none")])
    assert empty.exit_code != 0 and "no LLM cache" in empty.output


def test_lookups_of_any_number_of_keys_are_one_statement(tmp_path: Path) -> None:
    # Each connection caches 128 prepared statements: an IN list of as many ``?`` as keys was a
    # new one per count (about 4 MB a connection), and a stream runs hundreds of threads with a
    # connection each: a gigabyte of bench fleet's peak RSS at 20,000 pairs.
    cache = LLMCache(tmp_path)
    for i in range(40):
        cache.put(f"k{i}", {**BASE, "model": BASE["identity"]}, {"text": f"t{i}"})
    seen: list[str] = []
    cache._conn().set_trace_callback(seen.append)
    for n in range(1, 40):
        got = cache.get_many([f"k{i}" for i in range(n)] + ["absent"])
        assert sorted(got) == sorted(f"k{i}" for i in range(n)) and got["k0"] == {"text": "t0"}
    statements = {re.sub(r"'[^']*'", "?", s) for s in seen if s.startswith("SELECT")}  # (bound values out)
    assert len(statements) == 1
