"""The ``.npy`` vector files the embedder writes and the neighbour search reads (Dagster-free)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def open_vectors(path: str | Path) -> np.ndarray:
    """The (n, dim) float32 vectors of a ``.npy`` file, memory-mapped read-only (nothing is loaded).

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file does not hold a 2-D float32 array.
    """
    arr = np.load(Path(path), mmap_mode="r")
    if arr.dtype != np.float32 or arr.ndim != 2:
        raise ValueError(f"{path}: expected 2-D float32 vectors, got {arr.dtype} {arr.shape}")
    return arr
