"""Compiled parts of ragsft (everything else is in pyproject.toml).

The corpus stage's hottest rules also exist in C (plain CPython API: no build dependency beyond a
C compiler). Each extension is optional: without a compiler the package installs and runs on the
Python implementations, which stay the reference that the tests compare the C against. The SHA-256
of each C file is compiled in, so ``ragsft_assets.corpus.native.load`` can refuse a stale build.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent


def native(name: str) -> Extension:
    source = Path("ragsft_assets") / "corpus" / f"_{name}_native.c"
    digest = hashlib.sha256((HERE / source).read_bytes()).hexdigest()
    return Extension(
        f"ragsft_assets.corpus._{name}_native",
        [str(source)],
        define_macros=[("SOURCE_SHA256", f'"{digest}"')],
        extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        optional=True,
    )


setup(ext_modules=[native("enumeration"), native("abstracts")])
