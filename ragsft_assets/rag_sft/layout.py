"""The OpenRAG layout of retrieved documents, and its inverse.

Each document is one block::

    [Source N]
    * filename: <title>

    [CHUNK_START]

    <paragraph>

    [CHUNK_END]

blocks joined by ten dashes and a blank line (``"-" * 10 + "\\n\\n"``), N counted from 1.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

SEPARATOR = "-" * 10 + "\n\n"
BLOCK_TEMPLATE = "[Source {n}]\n* filename: {title}\n\n[CHUNK_START]\n\n{text}\n\n[CHUNK_END]"

# Markup a paragraph (or title, or question) must not hold: the layout's own markers and the ref
# tags (residual Wikipedia <ref name=...> included). Case-insensitive: a model would not tell apart.
_COLLISION_RE = re.compile(r"\[CHUNK_END\]|\[CHUNK_START\]|\[Source|</?ref\b|\* filename:", re.IGNORECASE)
_BLOCK_RE = re.compile(
    r"\[Source (\d+)\]\n\* filename: ([^\n]*)\n\n\[CHUNK_START\]\n\n(.*?)\n\n\[CHUNK_END\]", re.DOTALL
)


def render_block(n: int, title: str, text: str) -> str:
    """One document block, numbered ``n``."""
    return BLOCK_TEMPLATE.format(n=n, title=title, text=text)


def render_documents(documents: Sequence[tuple[str, str]]) -> str:
    """The documents ``[(title, paragraph), ...]`` as OpenRAG blocks numbered from 1."""
    return SEPARATOR.join(render_block(i, t, p) for i, (t, p) in enumerate(documents, start=1))


def parse_documents(text: str) -> list[tuple[str, str]]:
    """The ``(title, paragraph)`` of every block in a text (e.g. a system message), in order.

    Blocks must be numbered 1, 2, ... in order; parsing stops at the first break in the
    numbering, so a prompt cannot smuggle in a second document N.
    """
    out = []
    for m in _BLOCK_RE.finditer(text):
        if int(m.group(1)) != len(out) + 1:
            break
        out.append((m.group(2), m.group(3)))
    return out


def collides(text: str) -> str | None:
    """The first piece of markup in ``text`` that collides with the layout or the tags, or None."""
    m = _COLLISION_RE.search(text)
    return m.group(0) if m else None


def join_sentences(sentences: Sequence[str]) -> str:
    """A paragraph from its sentences: HotpotQA's carry their own leading spaces, others get one."""
    out = ""
    for s in sentences:
        if out and not out[-1].isspace() and s and not s[0].isspace():
            out += " "
        out += s
    return out.strip()
