"""The OpenRAG layout, byte for byte against a literal written from the issue's description."""

from __future__ import annotations

from ragsft_assets.rag_sft.layout import collides, join_sentences, parse_documents, render_documents

# Written by hand from the issue: each block is
# "[Source N]\n* filename: <title>\n\n[CHUNK_START]\n\n<paragraph>\n\n[CHUNK_END]",
# blocks joined by ten dashes and a blank line, N from 1.
EXPECTED = (
    "[Source 1]\n"
    "* filename: Alpha\n"
    "\n"
    "[CHUNK_START]\n"
    "\n"
    "Alpha is a letter.\n"
    "\n"
    "[CHUNK_END]"
    "----------\n"
    "\n"
    "[Source 2]\n"
    "* filename: Beta (band)\n"
    "\n"
    "[CHUNK_START]\n"
    "\n"
    "Beta is a band. It plays.\n"
    "\n"
    "[CHUNK_END]"
)


def test_layout_byte_for_byte() -> None:
    got = render_documents([("Alpha", "Alpha is a letter."), ("Beta (band)", "Beta is a band. It plays.")])
    assert got.encode() == EXPECTED.encode()


def test_parse_documents_inverts_render() -> None:
    docs = [("A", "one\n\ntwo"), ("B", "three"), ("C", "four")]
    assert parse_documents("Instructions.\n\n" + render_documents(docs)) == docs


def test_collisions() -> None:
    assert collides("x [CHUNK_END] y") == "[CHUNK_END]"
    assert collides('born <ref name="a">cite</ref>') == "<ref"
    assert collides("see [Source 2]") == "[Source"
    assert collides("a plain [sic] paragraph with <b>html</b>") is None


def test_join_sentences() -> None:
    assert join_sentences(["A b.", " C d."]) == "A b. C d."
    assert join_sentences(["A b.", "C d."]) == "A b. C d."
