"""Read official MediaWiki dumps (``*-pages-articles*.xml.bz2``) as structured-wikipedia records.

The structured-wikipedia dataset is published rarely; the XML dumps twice a month. This module turns
a dump into the same record shape the ``abstracts`` logic reads from structured-wikipedia (``name``,
``identifier``, ``url``, ``abstract``, ``version.identifier``, ``in_language``, ``sections[0]`` =
the lead as ``Abstract`` paragraphs with ``links[{url, text}]``), so both sources feed one corpus.

How it reads a dump:
- streams it with ``xml.etree.ElementTree.iterparse`` and clears each ``<page>`` once read, so memory
  stays flat whatever the dump size (only the redirect map, title -> target, is held);
- two passes: the first collects the redirects (and the namespace names from ``<siteinfo>``), the
  second emits the articles, so a link through a redirect that appears later in the file still
  points to the redirect's target;
- keeps namespace-0 pages that are not redirects; the lead section (text before the first ``==``
  heading) is parsed with mwparserfromhell: templates, ``<ref>``, files/images, categories, tables,
  HTML comments and interwiki links are removed, link text is kept, ``[[Target|anchor]]`` links
  become ``{url, text}`` with the target normalised the way MediaWiki does (first letter upper case,
  underscores as spaces, ``#section`` dropped) and resolved through the dump's redirects.

A second reader turns the Wikispeedia data set (plaintext articles and a links table) into the same
shape, for a real link graph at scale.
"""

from __future__ import annotations

import bz2
import gzip
import html
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote
from xml.etree.ElementTree import ParseError, iterparse

import mwparserfromhell
from mwparserfromhell.nodes import Comment, ExternalLink, HTMLEntity, Tag, Template, Text, Wikilink

from ragsft_assets.corpus.snapshot_layout import CorruptDumpError

__all__ = [
    "DumpPage",
    "DumpStats",
    "LeadSection",
    "article_url",
    "dump_language",
    "extract_lead",
    "iter_dump_pages",
    "iter_dump_records",
    "iter_wikispeedia_records",
    "lead_wikitext",
    "normalize_title",
    "read_redirects",
    "resolve_redirect",
    "wikilink_targets",
]

# Namespace names (and their usual aliases) whose links are not article links, used when a dump has
# no <siteinfo>; the siteinfo's own list is added when present.
_DEFAULT_NAMESPACES = {
    "media", "special", "talk", "user", "user talk", "wikipedia", "wikipedia talk", "file", "file talk",
    "image", "image talk", "mediawiki", "template", "template talk", "help", "category", "category talk",
    "portal", "book", "draft", "module", "timedtext", "wp", "wt", "project", "gadget", "topic",
    # French names, since the project's first language is French.
    "fichier", "catégorie", "modèle", "aide", "portail", "projet", "utilisateur", "discussion",
}  # fmt: skip
# Interwiki prefixes (sister projects); two/three-letter language codes are caught by _LANG_PREFIX.
_INTERWIKI = {
    "wikt", "wiktionary", "w", "s", "q", "b", "n", "v", "c", "d", "m", "mw", "commons", "meta",
    "species", "wikisource", "wikiquote", "wikibooks", "wikinews", "wikiversity", "wikidata",
    "wikivoyage", "voy", "wikimedia", "foundation", "wmf", "phab", "iarchive", "doi", "google",
}  # fmt: skip
_LANG_PREFIX = re.compile(r"^[a-z]{2,3}(?:-[a-z]{2,8})*$")
_HEADING = re.compile(r"^=+[^=\n].*=+[ \t]*$", re.MULTILINE)
_REDIRECT_TEXT = re.compile(r"^\s*#redirect\s*:?\s*\[\[([^\]|#]*)", re.IGNORECASE)
# Tags whose content is not prose of the lead.
_DROP_TAGS = {"ref", "references", "gallery", "math", "chem", "ce", "score", "timeline", "imagemap",
              "table", "syntaxhighlight", "source", "pre", "templatedata", "graph", "mapframe"}  # fmt: skip
# Templates whose last positional argument is the text shown in the page.
_TEXT_TEMPLATES = {"lang", "nowrap", "nobr", "small", "big", "abbr", "transl", "lang-fr", "langue"}
_MAX_REDIRECT_HOPS = 8
_WS = re.compile(r"[ \t\u00a0\u2009\u202f]+")
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:!?)\]])")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:]\s*)*\)")
_PAREN_LEAD_PUNCT = re.compile(r"\(\s*(?:[,;:]\s*)+")


@dataclass(frozen=True, slots=True)
class DumpPage:
    """One ``<page>`` of a dump, as read (no parsing of the wikitext)."""

    title: str
    ns: int
    page_id: int
    revision_id: int | None
    redirect: str | None
    text: str


@dataclass(frozen=True, slots=True)
class LeadSection:
    """The lead of an article as plain paragraphs, each with its links (``{url, text}``)."""

    paragraphs: list[dict[str, Any]]

    @property
    def text(self) -> str:
        return "\n".join(p["value"] for p in self.paragraphs)


@dataclass(slots=True)
class DumpStats:
    """What a pass over a dump saw and skipped, by reason (filled in while iterating)."""

    pages: int = 0
    articles: int = 0
    redirects: int = 0
    other_namespace: int = 0
    empty_lead: int = 0
    links: int = 0
    links_through_redirect: int = 0
    links_dropped: dict[str, int] = field(default_factory=dict)

    def drop_link(self, reason: str) -> None:
        self.links_dropped[reason] = self.links_dropped.get(reason, 0) + 1


def normalize_title(title: str) -> str:
    """MediaWiki's canonical form of a page title (case="first-letter" wikis).

    Underscores become spaces, runs of whitespace one space, a ``#section`` is dropped, HTML
    entities and percent-escapes are decoded, and the first letter is upper-cased.
    """
    title = html.unescape(title)
    if "%" in title:
        title = unquote(title)
    title = title.split("#", 1)[0].replace("_", " ")
    title = _WS.sub(" ", title).strip()
    return title[:1].upper() + title[1:] if title else ""


def article_url(title: str, lang: str) -> str:
    """The article's URL as Wikipedia writes it (``https://fr.wikipedia.org/wiki/Grec_moderne``)."""
    return f"https://{lang}.wikipedia.org/wiki/" + quote(title.replace(" ", "_"), safe="/:(),'!*@$;-._~")


def resolve_redirect(title: str, redirects: dict[str, str]) -> str:
    """Follow ``redirects`` from ``title`` (double redirects included, cycles stopped)."""
    seen = {title}
    for _ in range(_MAX_REDIRECT_HOPS):
        target = redirects.get(title)
        if target is None or target in seen:
            return title
        seen.add(target)
        title = target
    return title


def _open_dump(path: Path) -> IO[bytes]:
    if path.suffix == ".bz2":
        return bz2.open(path, "rb")
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


class _LineCounter:
    """A read-only file wrapper that counts the newlines read: the line a truncated stream stopped at."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.lines = 1

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.lines += data.count(b"\n")
        return data


def _iter_pages(path: Path, namespaces: set[str] | None, with_text: bool) -> Iterator[DumpPage]:
    last = "(none)"
    with _open_dump(path) as raw:
        handle = _LineCounter(raw)
        try:
            for page in _iter_pages_of(handle, namespaces, with_text):
                last = page.title
                yield page
        except ParseError as exc:
            line, column = exc.position
            raise CorruptDumpError(
                f"{path}: malformed XML at line {line}, column {column} ({exc}); last complete page "
                f"{last!r}: the dump is truncated or corrupt, download it again"
            ) from exc
        except (EOFError, OSError) as exc:  # a truncated or damaged .bz2 / .gz stream
            raise CorruptDumpError(
                f"{path}: the compressed stream ends or breaks near line {handle.lines} ({exc}); last "
                f"complete page {last!r}: the dump is truncated or corrupt, download it again"
            ) from exc


def _iter_pages_of(handle: Any, namespaces: set[str] | None, with_text: bool) -> Iterator[DumpPage]:
    """The parse loop of :func:`_iter_pages` (which names the file and line of an error)."""
    context = iterparse(handle, events=("start", "end"))
    _, root = next(context)
    in_revision = False
    fields: dict[str, Any] = {}
    for event, elem in context:
        tag = _local(elem.tag)
        if event == "start":
            if tag == "page":
                fields = {}
            elif tag == "revision":
                in_revision = True
            continue
        if tag == "namespace" and namespaces is not None:
            if elem.text:
                namespaces.add(elem.text.strip().lower())
        elif tag == "siteinfo":
            root.clear()
        elif tag == "title":
            fields["title"] = elem.text or ""
        elif tag == "ns":
            fields["ns"] = int(elem.text or 0)
        elif tag == "id":
            # <page><id> and <revision><id> (the contributor's <id> comes after the revision's).
            if in_revision:
                fields.setdefault("revision_id", int(elem.text or 0))
            else:
                fields.setdefault("page_id", int(elem.text or 0))
        elif tag == "redirect":
            fields["redirect"] = elem.get("title")
        elif tag == "text" and with_text:
            fields["text"] = elem.text or ""
        elif tag == "revision":
            in_revision = False
        elif tag == "page":
            yield DumpPage(
                title=fields.get("title", ""),
                ns=fields.get("ns", 0),
                page_id=fields.get("page_id", 0),
                revision_id=fields.get("revision_id"),
                redirect=fields.get("redirect"),
                text=fields.get("text", ""),
            )
            # Free the page and everything read so far: memory stays flat.
            root.clear()


def iter_dump_pages(path: str | Path, namespaces: set[str] | None = None) -> Iterator[DumpPage]:
    """Stream every ``<page>`` of a dump (``.xml``, ``.xml.bz2`` or ``.xml.gz``) in file order.

    Args:
        path: the dump file.
        namespaces: when given, the lower-cased namespace names of the dump's ``<siteinfo>`` are
            added to it as they are read (before the first page is yielded).
    """
    yield from _iter_pages(Path(path), namespaces, with_text=True)


def read_redirects(path: str | Path, namespaces: set[str] | None = None) -> dict[str, str]:
    """The dump's namespace-0 redirects, normalised title -> normalised target title.

    A page is a redirect when it carries ``<redirect title=...>`` or its text starts with
    ``#REDIRECT [[...]]`` (older dumps).
    """
    redirects: dict[str, str] = {}
    for page in _iter_pages(Path(path), namespaces, with_text=True):
        if page.ns != 0:
            continue
        target = page.redirect
        if target is None:
            match = _REDIRECT_TEXT.match(page.text)
            target = match.group(1) if match else None
        if target is not None:
            redirects[normalize_title(page.title)] = normalize_title(target)
    return redirects


def lead_wikitext(text: str) -> str:
    """The wikitext before the first ``==`` heading (the whole text if it has none)."""
    match = _HEADING.search(text)
    return text[: match.start()] if match else text


def _link_prefix(target: str) -> str | None:
    """The ``prefix`` of ``prefix:rest`` (lower-cased, leading colon removed) or None."""
    target = target.lstrip(":").strip()
    if ":" not in target:
        return None
    return target.split(":", 1)[0].strip().lower()


def _is_article_target(target: str, namespaces: set[str]) -> bool:
    prefix = _link_prefix(target)
    if prefix is None:
        return True
    # "Star Wars: Episode I" is an article; "fr:Paris", "wikt:foo", "File:x.jpg" are not.
    return not (prefix in namespaces or prefix in _INTERWIKI or _LANG_PREFIX.match(prefix))


def _clean_inline(text: str) -> str:
    text = html.unescape(text)
    return _WS.sub(" ", text)


class _LeadWriter:
    """Collects the plain text of a lead and its links while walking mwparserfromhell nodes."""

    def __init__(self, namespaces: set[str]) -> None:
        self.namespaces = namespaces
        self.parts: list[str] = []
        self.links: list[tuple[str, str]] = []  # (target title, anchor text), in text order

    def walk(self, nodes: Iterable[Any]) -> None:
        for node in nodes:
            if isinstance(node, Text):
                self.parts.append(str(node.value))
            elif isinstance(node, HTMLEntity):
                self.parts.append(node.normalize())
            elif isinstance(node, Wikilink):
                self._wikilink(node)
            elif isinstance(node, ExternalLink):
                if node.title is not None:
                    self.walk(node.title.nodes)
            elif isinstance(node, Tag):
                self._tag(node)
            elif isinstance(node, Template):
                self._template(node)
            elif isinstance(node, Comment):
                continue
            # Headings, arguments ({{{x}}}) and parser functions carry no prose of the lead.

    def _wikilink(self, node: Wikilink) -> None:
        target = str(node.title)
        if not _is_article_target(target, self.namespaces):
            return  # files, images, categories, interwiki and language links: neither text nor link
        if node.text is not None:
            inner = _LeadWriter(self.namespaces)
            inner.walk(node.text.nodes)
            anchor = "".join(inner.parts)
        else:
            anchor = target.lstrip(":")
            if "#" in anchor and anchor.startswith("#"):
                anchor = anchor[1:]
        anchor = _clean_inline(anchor).strip()
        self.parts.append(anchor)
        if anchor and not target.lstrip(":").startswith("#"):
            self.links.append((target, anchor))

    def _tag(self, node: Tag) -> None:
        name = str(node.tag).strip().lower()
        if name in _DROP_TAGS:
            return
        if name == "br":
            self.parts.append(" ")
            return
        if name in ("li", "dd", "dt"):
            self.parts.append("\n")
        if node.contents is not None:
            self.walk(node.contents.nodes)

    def _template(self, node: Template) -> None:
        name = str(node.name).strip().lower().replace("_", " ")
        if name in _TEXT_TEMPLATES or name.startswith("lang-"):
            positional = [p for p in node.params if not p.showkey]
            if positional:
                self.walk(positional[-1].value.nodes)


def _tidy(paragraph: str) -> str:
    # Removing templates and refs leaves "( ; born 1900)" or "word ," behind: tidy those traces.
    text = _WS.sub(" ", paragraph).strip()
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _EMPTY_PARENS.sub("", text)
    text = _PAREN_LEAD_PUNCT.sub("(", text)
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", _WS.sub(" ", text))
    return text.strip()


def extract_lead(
    wikitext: str,
    lang: str,
    redirects: dict[str, str] | None = None,
    namespaces: set[str] | None = None,
    stats: DumpStats | None = None,
) -> LeadSection:
    """Parse the lead of an article into paragraphs of plain text with their article links.

    Each paragraph's ``links`` holds ``{"url", "text"}``: ``text`` (the anchor) occurs verbatim in
    the paragraph's ``value``; ``url`` is the target article's URL, after following ``redirects``.
    Lines of the lead that are only markup (infobox leftovers, file links) yield no paragraph.
    """
    redirects = redirects or {}
    namespaces = namespaces if namespaces is not None else set(_DEFAULT_NAMESPACES)
    stats = stats if stats is not None else DumpStats()
    code = mwparserfromhell.parse(lead_wikitext(wikitext))
    writer = _LeadWriter(namespaces | _DEFAULT_NAMESPACES)
    # Walk paragraph by paragraph so each paragraph gets its own links; a paragraph break is a blank
    # line in the rendered text, so walk everything once and split the text afterwards.
    writer.walk(code.nodes)
    text = "".join(writer.parts)
    raw_paragraphs = [p for p in re.split(r"\n[ \t]*\n", text)]
    paragraphs: list[dict[str, Any]] = []
    pending = list(writer.links)
    for raw in raw_paragraphs:
        # List markup at line starts ("* item", ": indent") is not prose.
        lines = [re.sub(r"^[*#:;]+\s*", "", line) for line in raw.split("\n")]
        value = _tidy(" ".join(line for line in lines if line.strip()))
        if not value or not re.search(r"\w", value):
            continue
        links = []
        remaining = []
        cursor = 0
        for target, anchor in pending:
            anchor_clean = _tidy(anchor)
            pos = value.find(anchor_clean, cursor) if anchor_clean else -1
            if pos < 0:
                remaining.append((target, anchor))
                continue
            cursor = pos + len(anchor_clean)
            title = normalize_title(target.lstrip(":"))
            if not title:
                stats.drop_link("empty_target")
                continue
            resolved = resolve_redirect(title, redirects)
            if resolved != title:
                stats.links_through_redirect += 1
            links.append({"url": article_url(resolved, lang), "text": anchor_clean})
            stats.links += 1
        pending = remaining
        paragraphs.append({"type": "paragraph", "value": value, "links": links})
    for _ in pending:
        stats.drop_link("anchor_not_in_text")
    return LeadSection(paragraphs=paragraphs)


def wikilink_targets(
    wikitext: str, redirects: dict[str, str] | None = None, namespaces: set[str] | None = None
) -> list[str]:
    """Every article link target of a whole page (not only the lead), normalised and resolved.

    Used to count links the way SOURCES.md does; cheap (a regex over ``[[...]]``), no parsing.
    """
    redirects = redirects or {}
    namespaces = (namespaces or set()) | _DEFAULT_NAMESPACES
    targets = []
    for match in re.finditer(r"\[\[([^\[\]|]+)(?:\|[^\[\]]*)?\]\]", wikitext):
        raw = match.group(1)
        if raw.lstrip(":").startswith("#") or not _is_article_target(raw, namespaces):
            continue
        title = normalize_title(raw.lstrip(":"))
        if title:
            targets.append(resolve_redirect(title, redirects))
    return targets


def dump_language(path: str | Path, default: str = "en") -> str:
    """The language of a dump from its file name (``frwiki-20240901-...`` -> ``fr``)."""
    match = re.match(r"([a-z][a-z0-9_-]*?)wiki-", Path(path).name)
    return match.group(1).replace("_", "-") if match else default


def iter_dump_records(
    path: str | Path, lang: str | None = None, stats: DumpStats | None = None
) -> Iterator[dict[str, Any]]:
    """Stream a pages-articles dump as structured-wikipedia records, one per namespace-0 article.

    Two passes over the file (redirects first), constant memory apart from the redirect map.
    Redirect pages, other namespaces and articles with an empty lead yield no record (counted in
    ``stats``). A record has ``name``, ``identifier`` (page id), ``url``, ``abstract`` (the lead's
    paragraphs joined by a newline), ``version.identifier`` (revision id), ``in_language``,
    ``main_entity`` (None: dumps do not carry the Wikidata id) and ``sections`` = one ``Abstract``
    section holding the lead's paragraphs and their links.
    """
    path = Path(path)
    lang = lang or dump_language(path)
    stats = stats if stats is not None else DumpStats()
    namespaces: set[str] = set()
    redirects = read_redirects(path, namespaces)
    namespaces.discard("")
    for page in _iter_pages(path, None, with_text=True):
        stats.pages += 1
        if page.ns != 0:
            stats.other_namespace += 1
            continue
        if page.redirect is not None or _REDIRECT_TEXT.match(page.text):
            stats.redirects += 1
            continue
        title = normalize_title(page.title)
        lead = extract_lead(page.text, lang, redirects, namespaces, stats)
        if not lead.paragraphs:
            stats.empty_lead += 1
            continue
        stats.articles += 1
        yield _record(title, page.page_id, page.revision_id, lang, lead.paragraphs)


def _record(
    title: str, identifier: int, revision: int | None, lang: str, paragraphs: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "name": title,
        "identifier": identifier,
        "url": article_url(title, lang),
        "abstract": "\n".join(p["value"] for p in paragraphs),
        "version": {"identifier": revision},
        "in_language": {"identifier": lang},
        "main_entity": None,
        "is_part_of": {"identifier": f"{lang}wiki"},
        "sections": [{"type": "section", "name": "Abstract", "has_parts": paragraphs}],
    }


# --- Wikispeedia -------------------------------------------------------------------------------

_WIKISPEEDIA_BOILERPLATE = re.compile(
    r"^(#copyright|2007 Schools Wikipedia Selection|This is a featured article|Enlarge$)"
)


def _read_tsv_column(path: Path, columns: int) -> Iterator[list[str]]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) == columns:
                yield parts


def wikispeedia_lead(text: str) -> str:
    """The lead paragraph(s) of a Wikispeedia plaintext article.

    The files start with ``#copyright``, the title, a "2007 Schools Wikipedia Selection" line, an
    infobox laid out with deep indentation and image captions followed by ``Enlarge``; prose
    paragraphs are indented by three spaces and section headings are not indented. The lead is the
    prose before the first heading.
    """
    blocks = re.split(r"\n[ \t]*\n", text)
    lead: list[str] = []
    started = False  # the title line (unindented) comes before the lead: skip it
    for block in blocks:
        lines = [line for line in block.split("\n") if line.strip()]
        if not lines:
            continue
        first = lines[0]
        if not first.startswith(" "):
            if started or lead:
                break  # a section heading ends the lead
            if first.strip().startswith("2007 Schools Wikipedia Selection"):
                started = True
            continue
        stripped = [line.strip() for line in lines]
        if any(_WIKISPEEDIA_BOILERPLATE.match(s) for s in stripped):
            continue  # copyright, featured-article banner, image caption
        # Prose lines are indented by exactly three spaces; infobox rows by many more.
        if not all(re.match(r"^ {3}\S", line) for line in lines):
            continue
        paragraph = " ".join(stripped)
        if re.search(r"[.!?]$", paragraph) and len(paragraph) >= 40:
            lead.append(paragraph)
    return "\n".join(lead)


def _find_anchor(text: str, title: str) -> str | None:
    """The first case-insensitive, word-bounded occurrence of ``title`` in ``text``, as written there."""
    candidates = [title]
    base = re.sub(r"\s*\([^)]*\)$", "", title)  # "Phase (matter)" is written "phase"
    if base != title:
        candidates.append(base)
    for candidate in candidates:
        match = re.search(r"(?<!\w)" + re.escape(candidate) + r"(?!\w)", text, re.IGNORECASE)
        if match:
            return match.group(0)
    return None


def iter_wikispeedia_records(
    folder: str | Path,
    lang: str = "en",
    graph_only: bool = False,
    stats: DumpStats | None = None,
    only_titles: Iterable[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Wikispeedia as structured-wikipedia records.

    By default, the articles of ``plaintext_*.jsonl`` (real text): the lead is the abstract and each
    outgoing link whose target title occurs in the lead becomes a ``{url, text}`` link on the
    paragraph holding it (the others are counted as ``anchor_not_in_text``).

    With ``graph_only=True``, every article of ``articles.tsv`` with every link of ``links.tsv``: the
    data set has no text for most articles, so each record's abstract is a generated, clearly
    synthetic text (one sentence per outgoing link, "<Title> links to <Target>.") whose only use is
    to test the link graph at the real scale of 4,598 articles and 119,879 links. ``only_titles``
    keeps those articles and the links between them (a closed subgraph).
    """
    folder = Path(folder)
    stats = stats if stats is not None else DumpStats()
    if graph_only:
        keep = {normalize_title(t) for t in only_titles} if only_titles is not None else None
        yield from _wikispeedia_graph_records(folder, lang, stats, keep)
        return
    for path in sorted(folder.glob("plaintext_*.jsonl")):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                row = json.loads(line)
                stats.pages += 1
                title = normalize_title(row["article"])
                lead = wikispeedia_lead(row["text"])
                if not lead:
                    stats.empty_lead += 1
                    for _ in row.get("links", []):
                        stats.drop_link("no_lead")
                    continue
                paragraphs = []
                for value in lead.split("\n"):
                    paragraphs.append({"type": "paragraph", "value": value, "links": []})
                for target in row.get("links", []):
                    target_title = normalize_title(target)
                    for paragraph in paragraphs:
                        anchor = _find_anchor(paragraph["value"], target_title)
                        if anchor is not None:
                            paragraph["links"].append(
                                {"url": article_url(target_title, lang), "text": anchor}
                            )
                            stats.links += 1
                            break
                    else:
                        stats.drop_link("anchor_not_in_text")
                stats.articles += 1
                yield _record(title, _wikispeedia_id(title), None, lang, paragraphs)


def _wikispeedia_id(title: str) -> int:
    # Wikispeedia has no page ids: a stable number from the title (first 12 hex digits of SHA-256).
    import hashlib

    return int(hashlib.sha256(title.encode("utf-8")).hexdigest()[:12], 16)


def _wikispeedia_graph_records(
    folder: Path, lang: str, stats: DumpStats, keep: set[str] | None
) -> Iterator[dict[str, Any]]:
    outgoing: dict[str, list[str]] = {}
    for source, target in _read_tsv_column(folder / "links.tsv", 2):
        source, target = normalize_title(source), normalize_title(target)
        if keep is None or (source in keep and target in keep):
            outgoing.setdefault(source, []).append(target)
    for (encoded,) in _read_tsv_column(folder / "articles.tsv", 1):
        title = normalize_title(encoded)
        if keep is not None and title not in keep:
            continue
        stats.pages += 1
        targets = outgoing.get(title, [])
        sentences = [f"{title} is an article of the 2007 Wikipedia Selection for Schools."]
        sentences.append("This text is generated from the Wikispeedia link table, not written by editors.")
        links = []
        for target in targets:
            sentences.append(f"It links to {target}.")
            links.append({"url": article_url(target, lang), "text": target})
            stats.links += 1
        paragraph = {"type": "paragraph", "value": " ".join(sentences), "links": links}
        stats.articles += 1
        yield _record(title, _wikispeedia_id(title), None, lang, [paragraph])
