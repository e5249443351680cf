"""vLLM's engine start must survive numba/llvmlite being loaded in the same process (bm25s loads it)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("vllm")
pytest.importorskip("llvmlite")


def test_the_kernel_rebind_scan_survives_llvmlite_after_the_guard() -> None:
    import llvmlite.binding.ffi as ffi
    from vllm.triton_utils import dispatcher

    from ragsft_assets.llm.backends.vllm_backend import guard_llvmlite_lib_wrapper

    assert "llvmlite.binding.ffi" in sys.modules
    guard_llvmlite_lib_wrapper()
    # The same module scan vLLM's CPU platform runs when the engine starts; it read vars(ffi.lib).
    dispatcher._rebind_kernels([])
    assert not hasattr(ffi.lib, "__dict__")
    assert ffi.lib.LLVMPY_GetVersionInfo() is not None  # real symbols still resolve
    assert guard_llvmlite_lib_wrapper() is False  # idempotent
