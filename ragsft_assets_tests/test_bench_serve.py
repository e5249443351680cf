"""`ragsft bench serve` reads vLLM's Prometheus gauges (the server itself is not started here)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ragsft_assets.bench.serve import GaugePoller, read_gauges

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="smollm2"}} {running}
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="smollm2"}} {waiting}
vllm:num_requests_running_total_bogus 999.0
"""


def test_gauges_are_read_from_prometheus_text() -> None:
    assert read_gauges(METRICS.format(running="57.0", waiting="12.0")) == {"running": 57.0, "waiting": 12.0}
    two_engines = METRICS.format(running="3.0", waiting="0.0") + METRICS.format(running="4.0", waiting="1.0")
    assert read_gauges(two_engines) == {"running": 7.0, "waiting": 1.0}
    assert read_gauges("") == {"running": 0.0, "waiting": 0.0}


def test_the_poller_keeps_the_peak_while_a_batch_runs() -> None:
    values = iter([(1, 0), (64, 30), (50, 0), (2, 0)])
    current = {"v": (0, 0)}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            running, waiting = current["v"]
            body = METRICS.format(running=f"{running}.0", waiting=f"{waiting}.0").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with GaugePoller(f"http://127.0.0.1:{server.server_address[1]}/metrics", every_s=0.01) as poller:
            for v in values:
                current["v"] = v
                seen = poller.samples
                while poller.samples < seen + 2:  # each value read at least once
                    time.sleep(0.01)
        assert poller.peak == {"running": 64.0, "waiting": 30.0, "both": 94.0}
    finally:
        server.shutdown()
