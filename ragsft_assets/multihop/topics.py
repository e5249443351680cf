"""Topic categories of the questions, where a snapshot knows them (for the keep rate by topic).

A question's topic is its bridge document B's: the bridges are drawn from the bridge set (a title
list such as the level-4 vital articles, which are grouped by topic). Categories come from a
tab-separated file in the snapshot folder:

- ``topics.tsv``: ``title<TAB>topic`` lines;
- Wikispeedia's own ``categories.tsv``: ``article<TAB>subject.Top.Sub...`` with URL-encoded
  article names; the topic is the top-level subject (``subject.People.Artists`` -> ``People``).

Lines starting with ``#`` and blank lines are skipped. A title listed several times keeps its first
category (file order), so the result does not depend on anything but the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

TOPIC_FILES = ("topics.tsv", "categories.tsv")


def parse_topics(lines: Iterable[str], source: str = "topics") -> dict[str, str]:
    """``{title: topic}`` from the lines of a topic file (either format above).

    Raises:
        ValueError: a line without a tab or with an empty title or topic (the message names it).
    """
    from ragsft_assets.corpus.wikitext_dump import normalize_title

    out: dict[str, str] = {}
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if not line.strip() or line.startswith("#"):
            continue
        title, sep, topic = line.partition("\t")
        title, topic = title.strip(), topic.strip()
        if not sep or not title or not topic:
            raise ValueError(f"{source}:{lineno}: expected 'title<TAB>topic', got {line[:80]!r}")
        if topic.startswith("subject."):  # Wikispeedia: URL-encoded article, hierarchical subject
            title, topic = normalize_title(title), topic.split(".")[1].replace("_", " ")
        out.setdefault(title, topic)
    return out


def find_topic_file(folder: Path, configured: str = "") -> Path | None:
    """The topic file of a snapshot folder: ``configured`` (relative to it) or the first of ``TOPIC_FILES``.

    Raises:
        FileNotFoundError: ``configured`` is set and names no file.
    """
    if configured:
        path = Path(configured).expanduser()
        path = path if path.is_absolute() else folder / path
        if not path.is_file():
            raise FileNotFoundError(f"topics_file {path} (snapshot.json of {folder.name}) not found")
        return path
    return next((folder / n for n in TOPIC_FILES if (folder / n).is_file()), None)


def read_topics(path: Path) -> dict[str, str]:
    """``{title: topic}`` of one topic file."""
    with path.open(encoding="utf-8") as fh:
        return parse_topics(fh, str(path))


def question_topics(b_title_of: Mapping[str, str], topics: Mapping[str, str]) -> dict[str, str]:
    """``{question id: topic}`` for the questions whose bridge title has a known topic."""
    return {qid: topics[b] for qid, b in b_title_of.items() if b in topics}
