"""From structured-wikipedia records to the ``abstracts`` table: filters, links, split assignment.

Each record is either kept (one row) or rejected with exactly one counted reason, checked in this
order: ``missing_title``, the page kinds read from the title (``disambiguation_page``, ``list_page``,
``chronology_page``, ``index_page``, ``glossary_page``, ``year_page``, ``date_page``),
``missing_abstract``, a disambiguation abstract ("X peut désigner :"), ``too_short`` (fewer than
``min_chars`` characters or ``min_sentences`` sentences), and last, across the whole snapshot,
``duplicate_title`` (one abstract per title: the latest revision wins, then the smallest identifier,
so the choice does not depend on the order lines are read). Lines that are not records are counted
as ``not_utf8`` / ``malformed_line`` before any of that.

Links come from the paragraphs of the record's ``Abstract`` section: the target title is resolved
from the URL (percent-decoding, underscores to spaces, first letter upper-cased, fragment dropped);
red links (``action=edit&redlink=1``), links to other sites or wikis, and links into non-article
namespaces are dropped; the anchor text is located in the abstract (in document order) and its
sentence index kept; a link whose anchor does not occur in the abstract is dropped (the abstract field
is a cleaned copy of the paragraphs, so parenthesised asides such as "(grec moderne : ...)" are gone).

The split (train/validation/test) is decided per document from the seed and the id alone, before any
graph exists, so adding or removing other documents never moves a document to another split.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from ragsft_assets.arrow_schemas import STRING_LIST, strings
from ragsft_assets.corpus.sentences import split_sentences
from ragsft_assets.corpus.structured_wikipedia import MALFORMED_LINE, NOT_UTF8, BadLine, decode_lead
from ragsft_assets.ids import DEFAULT_SEED, doc_id, item_uniform

SPLIT_NAMES = ("train", "validation", "test")
# Shares close to seed 001's corpus: 690,957 / 65,341 / 65,972 documents.
DEFAULT_SPLIT_SHARES = (690_957 / 822_270, 65_341 / 822_270, 65_972 / 822_270)
SPLIT_STAGE = "split"

MISSING_TITLE = "missing_title"
MISSING_ABSTRACT = "missing_abstract"
DISAMBIGUATION = "disambiguation_page"
LIST_PAGE = "list_page"
CHRONOLOGY_PAGE = "chronology_page"
INDEX_PAGE = "index_page"
GLOSSARY_PAGE = "glossary_page"
YEAR_PAGE = "year_page"
DATE_PAGE = "date_page"
TOO_SHORT = "too_short"
DUPLICATE_TITLE = "duplicate_title"
KEPT = "kept"
BLANK_LINE = "blank_line"

# Funnel order of the record-level reasons (the table in the asset metadata follows it).
REASONS = (
    NOT_UTF8,
    MALFORMED_LINE,
    MISSING_TITLE,
    DISAMBIGUATION,
    LIST_PAGE,
    CHRONOLOGY_PAGE,
    INDEX_PAGE,
    GLOSSARY_PAGE,
    YEAR_PAGE,
    DATE_PAGE,
    MISSING_ABSTRACT,
    TOO_SHORT,
    DUPLICATE_TITLE,
)
# Reasons that mean the input itself is broken (they count towards ``max_bad_share``).
BAD_INPUT_REASONS = (NOT_UTF8, MALFORMED_LINE, MISSING_TITLE)

# Link-level reasons (a separate funnel: links are not records).
LINK_REDLINK = "link_redlink"
LINK_EXTERNAL = "link_external"
LINK_NON_ARTICLE = "link_non_article"
LINK_EMPTY_ANCHOR = "link_empty_anchor"
LINK_ANCHOR_NOT_FOUND = "link_anchor_not_in_abstract"
LINK_SELF = "link_self"
LINK_DUPLICATE = "link_duplicate"
LINK_KEPT = "link_kept"
LINK_REASONS = (
    LINK_REDLINK,
    LINK_EXTERNAL,
    LINK_NON_ARTICLE,
    LINK_EMPTY_ANCHOR,
    LINK_ANCHOR_NOT_FOUND,
    LINK_SELF,
    LINK_DUPLICATE,
    LINK_KEPT,
)

LINK_TYPE = pa.struct([*strings("target_title", "target_id", "anchor"), ("sentence", pa.int32())])
ABSTRACTS_SCHEMA = pa.schema(
    [
        *strings("id", "title"),
        ("identifier", pa.int64()),
        ("url", pa.string()),
        ("revision", pa.int64()),
        *strings("qid", "text"),
        ("sentences", STRING_LIST),
        ("links", pa.list_(LINK_TYPE)),
        ("split", pa.string()),
    ]
)

# Namespaces whose pages are not articles (French and English names, with their aliases).
NON_ARTICLE_NAMESPACES = frozenset(
    {
        "fichier", "file", "image", "média", "media", "catégorie", "category", "modèle", "template",
        "aide", "help", "portail", "portal", "wikipédia", "wikipedia", "wp", "projet", "project",
        "spécial", "special", "utilisateur", "user", "discussion", "talk", "module", "référence",
        "mediawiki", "draft", "brouillon", "sujet", "topic", "annexe", "livre", "book", "timedtext",
        "wikt", "wiktionary", "wiktionnaire", "commons", "d", "wikidata", "s", "wikisource", "q",
        "wikiquote", "n", "wikinews", "v", "wikiversity", "voy", "wikivoyage", "b", "wikibooks",
        "species", "meta", "m", "mw", "phab", "outreach", "incubator", "foundation", "wmf",
    }
)  # fmt: skip

_MONTHS_FR = "janvier|février|fevrier|mars|avril|mai|juin|juillet|août|aout|septembre|octobre|novembre|décembre|decembre"
_MONTHS_EN = "january|february|march|april|may|june|july|august|september|october|november|december"
_TITLE_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (DISAMBIGUATION, re.compile(r"\((?:homonymie|disambiguation)\)\s*$", re.I)),
    (LIST_PAGE, re.compile(r"^(?:listes?\s+(?:de|des|du|d['’])|lists?\s+of\b)", re.I)),
    (CHRONOLOGY_PAGE, re.compile(r"^(?:chronologie\b|chronology\s+of\b|timeline\s+of\b)", re.I)),
    # "Index des ...", "Index de la ...", "Index of ... articles": an index page. "Index de Herfindahl-
    # Hirschman" or "Index of Economic Freedom" (a proper name after "de"/"of") is a measure's article.
    (
        INDEX_PAGE,
        re.compile(
            r"^(?:index\s+(?:des|du|de\s+la|de\s+l['’]|d['’](?-i:[a-zà-ÿœ]))"
            r"|index\s+of\s+.*\b(?:articles|topics)$)",
            re.I,
        ),
    ),
    (GLOSSARY_PAGE, re.compile(r"^(?:glossaire\b|glossary\s+of\b)", re.I)),
    (
        YEAR_PAGE,
        re.compile(
            r"^(?:-?\d{1,4}(?:\s+(?:av\.?\s*J\.?-?C\.?|apr\.?\s*J\.?-?C\.?|BC|AD|BCE|CE))?"
            r"|années\s+\d{1,4}(?:\s+av\.?\s*J\.?-?C\.?)?|\d{1,4}s"
            r"|\d{1,4}\s+(?:en|au|aux|dans\s+les?|in)\s+.+"
            r"|[IVXLC]+(?:e|er)\s+(?:siècle|millénaire)(?:\s+av\.?\s*J\.?-?C\.?)?"
            r"|\d+(?:st|nd|rd|th)\s+(?:century|millennium)(?:\s+BC)?)$",
            re.I,
        ),
    ),
    (
        DATE_PAGE,
        re.compile(
            # A day and a month ("14 juillet", "1er janvier 1900"). A month and a year ("Juin 1940",
            # "Mai 68") is left to the abstract: see _MONTH_YEAR_TITLE.
            rf"^(?:(?:1er|\d{{1,2}})\s+(?:{_MONTHS_FR})(?:\s+\d{{1,4}})?"
            rf"|\d{{1,2}}\s+(?:{_MONTHS_EN})(?:\s+\d{{1,4}})?)$",
            re.I,
        ),
    ),
)
# "Juin 1940" on French Wikipedia is a chronology (dated events), "Mai 68" is an event: a title that looks
# like a month and a year is rejected as a date page only when its abstract reads like a chronology.
_MONTH_YEAR_TITLE = re.compile(rf"^(?:{_MONTHS_FR}|{_MONTHS_EN})\s+\d{{1,4}}(?:\s+(?:en|au|in)\s+.+)?$", re.I)
_CHRONOLOGY_TEXT = re.compile(
    r"(?:\bévénements?\s+(?:survenus?|marquants?|qui\s+se\s+sont\s+(?:produits|déroulés))"
    r"|\bchronologie\s+(?:du\s+mois|des\s+événements)"
    r"|\bevents\s+(?:that\s+)?(?:happened|occurred|took\s+place)\s+in"
    r"|\btimeline\s+of\s+events)",
    re.I,
)
# A dated entry of a chronology: "1er juin : ...", "14 juin - ...", "June 14: ...".
_DATED_ENTRY = re.compile(
    rf"(?:^|\s)(?:(?:1er|\d{{1,2}})\s+(?:{_MONTHS_FR})|(?:{_MONTHS_EN})\s+\d{{1,2}}(?:st|nd|rd|th)?)"
    r"(?:\s+\d{4})?\s*[:–—-]\s",
    re.I,
)


def is_chronology_text(text: str) -> bool:
    """Whether an abstract reads like a chronology page (it says so, or lists two or more dated events)."""
    if _CHRONOLOGY_TEXT.search(text):
        return True
    return sum(1 for _ in zip(range(2), _DATED_ENTRY.finditer(text), strict=False)) >= 2


_DISAMBIGUATION_TEXT = re.compile(
    r"(?:peu(?:t|vent)\s+(?:désigner|faire\s+référence\s+à|se\s+référer\s+à|renvoyer\s+à|correspondre\s+à)"
    r"(?:\s*\(?[^.:]{0,40}\)?)?\s*:|\bmay\s+(?:also\s+)?refer\s+to\s*:"
    r"|cette\s+page\s+d['’]homonymie|this\s+disambiguation\s+page"
    # Surname pages ("Marchal est un nom de famille notamment porté par :") list people like one.
    r"|\bporté\s+par\s*:|\bmay\s+refer\s+to\s+(?:the\s+)?following)",
    re.I,
)


@dataclass(frozen=True, slots=True)
class AbstractsConfig:
    """The knobs of the abstracts stage (all of them part of the output's identity)."""

    lang: str = "fr"
    min_chars: int = 300
    min_sentences: int = 2
    seed: int = DEFAULT_SEED
    split_shares: tuple[float, float, float] = DEFAULT_SPLIT_SHARES


@dataclass(slots=True)
class ChunkResult:
    """What one chunk of input lines gave: candidate rows and counted rejections.

    ``bad`` holds up to a few ``(line_number, reason, detail)`` examples of bad input lines, with line
    numbers relative to the chunk's first line (1-based) until the caller rebases them.
    """

    table: pa.Table
    lines: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    link_reasons: Counter[str] = field(default_factory=Counter)
    bad: list[tuple[int, str, str]] = field(default_factory=list)
    rejected: list[tuple[str, str, str]] = field(default_factory=list)  # (candidate id, reason, title)
    path: str | None = None  # where a worker wrote ``table`` (Arrow IPC) instead of returning it
    cpu_s: float = 0.0  # CPU seconds the chunk took in the process that ran it (read, rules, write)


def normalise_shares(shares: Sequence[float] | Mapping[str, float]) -> tuple[float, float, float]:
    """Shares of train/validation/test as fractions summing to 1.

    Accepts 3 non-negative weights in split order, or a mapping ``{"train": w, "validation": w,
    "test": w}`` (as in snapshot.json); raises ValueError otherwise.
    """
    if isinstance(shares, Mapping):
        unknown = set(shares) - set(SPLIT_NAMES)
        if unknown:
            raise ValueError(f"unknown split names in split shares: {sorted(unknown)}")
        shares = [shares.get(name, 0.0) for name in SPLIT_NAMES]
    try:
        shares = [float(s) for s in shares]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"split shares must be numbers, got {shares!r}") from exc
    if len(shares) != 3 or any(s < 0 for s in shares) or sum(shares) <= 0:
        raise ValueError(f"split shares must be 3 non-negative weights with a positive sum, got {shares!r}")
    total = float(sum(shares))
    return (shares[0] / total, shares[1] / total, shares[2] / total)


def assign_split(document_id: str, seed: int, shares: Sequence[float] = DEFAULT_SPLIT_SHARES) -> str:
    """The split of one document, from (seed, id) only: stable whatever else is in the corpus.

    ``shares`` must already be normalised (see :func:`normalise_shares`).
    """
    u = item_uniform(seed, SPLIT_STAGE, document_id)
    train, validation = shares[0], shares[1]
    if u < train:
        return "train"
    if u < train + validation:
        return "validation"
    return "test"


# All title rules in one pattern (one scan per title); the named group that matched is the reason.
_TITLE_KIND = re.compile(
    "|".join(f"(?P<{reason}>{pattern.pattern})" for reason, pattern in _TITLE_KINDS), re.I
)


_DISAMBIGUATION_TITLE = _TITLE_KINDS[0][1]  # the one rule not anchored at the start (test_corpus_build)


def page_kind(title: str) -> str | None:
    """The rejection reason a title alone implies (list, year, disambiguation page...), or None."""
    # What _TITLE_KIND.search(title) gives, cheaper: every rule but the disambiguation one is anchored
    # at the start, so past position 0 only "(homonymie)" can match, and only where there is a "(".
    m = _TITLE_KIND.match(title)
    if m is not None:
        return m.lastgroup
    if "(" in title and _DISAMBIGUATION_TITLE.search(title) is not None:
        return DISAMBIGUATION
    return None


def is_disambiguation_text(text: str) -> bool:
    """Whether an abstract reads like a disambiguation page ("X peut désigner :", "may refer to:")."""
    # Every pattern needs a colon or the word "homonymie"/"disambiguation": skip the regex otherwise.
    if ":" not in text and "homonymie" not in text and "isambiguation" not in text:
        return False
    # The regex is slow (tens of µs an abstract: no literal prefix to scan for) and each alternative
    # holds one of these words; case-folded, they are found in the lowered text unless it holds one
    # of the four letters that re.I folds onto ASCII ones (İ ı ſ K), where the regex decides.
    if not any(c in text for c in _ASCII_FOLDS):
        low = text.lower()
        if not any(word in low for word in _DISAMBIGUATION_WORDS):
            return False
    return _DISAMBIGUATION_TEXT.search(text) is not None


_DISAMBIGUATION_WORDS = ("peu", "may", "porté", "homonymie", "disambiguation")
_ASCII_FOLDS = "\u0130\u0131\u017f\u212a"


# Per-process caches (bounded: cleared when full) for work that repeats across records: the host of a
# page URL (every page of a wiki shares it) and the resolution of a link URL (hubs are linked often).
_CACHE_MAX = 50_000
_HOST_CACHE: dict[str, str] = {}
_LINK_CACHE: dict[str, dict[str, tuple[str | None, str, str | None]]] = {}


def wiki_host(url: str | None) -> str:
    """The host of an article URL (``fr.wikipedia.org``), '' when unknown."""
    if not url:
        return ""
    if not url.startswith("https://"):
        return urlsplit(url).netloc.lower()
    # The netloc ends before the first "/" after the scheme: the prefix up to it has the same netloc.
    cut = url.find("/", 8)
    prefix = url if cut < 0 else url[:cut]
    host = _HOST_CACHE.get(prefix)
    if host is None:
        host = urlsplit(prefix).netloc.lower()
        if len(_HOST_CACHE) >= _CACHE_MAX:
            _HOST_CACHE.clear()
        _HOST_CACHE[prefix] = host
    return host


_NOT_A_URL = (None, LINK_EXTERNAL, None)


def _resolve_cached(url: Any, host: str) -> tuple[str | None, str, str | None]:
    """:func:`resolve_link` plus the target's doc id, cached per (host, url)."""
    if not isinstance(url, str):
        return _NOT_A_URL
    return _host_cache(host).get(url) or _resolve_miss(url, host)


def _host_cache(host: str) -> dict[str, tuple[str | None, str, str | None]]:
    cache = _LINK_CACHE.get(host)
    if cache is None:
        cache = _LINK_CACHE[host] = {}
    return cache


def _resolve_miss(url: str, host: str) -> tuple[str | None, str, str | None]:
    target, reason = resolve_link(url, host)
    hit = (target, reason, doc_id(target) if target is not None else None)
    cache = _host_cache(host)
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[url] = hit
    return hit


def resolve_link(url: str | None, host: str) -> tuple[str | None, str]:
    """Resolve a link URL to an article title of the same wiki.

    Args:
        url: the link's ``url`` (absolute ``https://fr.wikipedia.org/wiki/X``, or ``/wiki/X``, ``./X``).
        host: the wiki's host; links to any other host (other sites, other languages) are external.

    Returns:
        ``(title, LINK_KEPT)`` or ``(None, reason)`` with reason ``link_redlink``, ``link_external``
        or ``link_non_article``.
    """
    if not url or not isinstance(url, str):
        return None, LINK_EXTERNAL
    # Fast path for the usual absolute article URL of the same wiki (urlsplit is slow in bulk).
    prefix = f"https://{host}/wiki/"
    if host and url.startswith(prefix) and "?" not in url:
        raw = url[len(prefix) :].split("#", 1)[0]
        return _title_from_path(raw)
    parts = urlsplit(url.strip())
    query = parts.query
    if "redlink=1" in query or "action=edit" in query:
        return None, LINK_REDLINK
    if parts.scheme and parts.scheme not in ("http", "https"):
        return None, LINK_EXTERNAL
    if parts.netloc and host and parts.netloc.lower() != host:
        return None, LINK_EXTERNAL
    path = parts.path
    if path.startswith("/wiki/"):
        raw = path[6:]
    elif path.startswith("./") and not parts.netloc:
        raw = path[2:]
    else:
        return None, LINK_EXTERNAL
    if query and not raw:  # /w/index.php?title=... style
        return None, LINK_EXTERNAL
    return _title_from_path(raw)


def _title_from_path(raw: str) -> tuple[str | None, str]:
    """The title of a ``/wiki/<raw>`` path: percent-decoded, underscores to spaces, first letter up."""
    title = " ".join((unquote(raw) if "%" in raw else raw).replace("_", " ").split())
    if not title:
        return None, LINK_EXTERNAL
    if ":" in title and title.split(":", 1)[0].strip().lower() in NON_ARTICLE_NAMESPACES:
        return None, LINK_NON_ARTICLE
    return title[0].upper() + title[1:], LINK_KEPT


def _iter_links(parts: Iterable[Any]) -> Iterable[dict[str, Any]]:
    """Every link of a tree of section parts (paragraphs, lists, list items), in document order."""
    for part in parts:
        if not isinstance(part, dict):
            continue
        links = part.get("links")
        if isinstance(links, list):
            for link in links:
                if isinstance(link, dict):
                    yield link
        sub = part.get("has_parts")
        if isinstance(sub, list):
            yield from _iter_links(sub)


def abstract_links(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The raw links of the record's lead (the section named ``Abstract``, else the first section)."""
    sections = record.get("sections")
    if not isinstance(sections, list) or not sections:
        return []
    lead = next(
        (s for s in sections if isinstance(s, dict) and s.get("name") == "Abstract"),
        sections[0] if isinstance(sections[0], dict) else None,
    )
    if lead is None:
        return []
    return list(_iter_links(lead.get("has_parts") or []))


def _locate_links(
    raw_links: Sequence[dict[str, Any]],
    sentences: Sequence[str],
    text: str,
    title: str,
    host: str,
    counts: Counter[str],
) -> list[tuple[str, str, str, int]]:
    """Resolve and place links in the joined ``text``, counting every dropped link by reason.

    Anchors are searched in the joined text from where the previous link was found (links come in
    document order), then from the start; the first occurrence gives the sentence index. A target
    linked twice from the same sentence is kept once (first anchor). Returns
    ``(target_title, target_id, anchor, sentence)`` tuples.
    """
    starts: list[int] = []
    pos = 0
    for s in sentences:
        starts.append(pos)
        pos += len(s) + 1
    out: list[tuple[str, str, str, int]] = []
    seen: set[tuple[str, int]] = set()
    cursor = 0
    cache = _host_cache(host)
    for link in raw_links:
        url = link.get("url")
        hit = (cache.get(url) or _resolve_miss(url, host)) if isinstance(url, str) else _NOT_A_URL
        target, reason, target_id = hit
        if target is None:
            counts[reason] += 1
            continue
        anchor = link.get("text")
        anchor = " ".join(anchor.split()) if isinstance(anchor, str) else ""
        if not anchor:
            counts[LINK_EMPTY_ANCHOR] += 1
            continue
        if target == title:
            counts[LINK_SELF] += 1
            continue
        at = text.find(anchor, cursor)
        if at < 0:
            at = text.find(anchor)
        if at < 0:
            counts[LINK_ANCHOR_NOT_FOUND] += 1
            continue
        cursor = at + len(anchor)
        sentence = bisect.bisect_right(starts, at) - 1
        if (target, sentence) in seen:
            counts[LINK_DUPLICATE] += 1
            continue
        seen.add((target, sentence))
        counts[LINK_KEPT] += 1
        out.append((target, target_id, anchor, sentence))
    return out


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def process_record(record: dict[str, Any], cfg: AbstractsConfig, link_counts: Counter[str]) -> dict | str:
    """Turn one record into an abstracts row (a dict) or the reason it is rejected (a string)."""
    out = _process_record(record, cfg, link_counts)
    if isinstance(out, str):
        return out
    row = dict(zip(_ROW_FIELDS, out, strict=True))
    row["links"] = [
        {"target_title": t, "target_id": i, "anchor": a, "sentence": n} for t, i, a, n in row["links"]
    ]
    return row


_ROW_FIELDS = tuple(ABSTRACTS_SCHEMA.names)


def _process_record(record: dict[str, Any], cfg: AbstractsConfig, link_counts: Counter[str]) -> tuple | str:
    """:func:`process_record` with the row as a tuple in schema order, links as tuples."""
    title = record.get("name")
    if not isinstance(title, str) or not title.strip():
        return MISSING_TITLE
    title = title.strip()
    kind = page_kind(title)
    if kind is not None:
        return kind
    abstract = record.get("abstract")
    if not isinstance(abstract, str) or not abstract.strip():
        return MISSING_ABSTRACT
    if is_disambiguation_text(abstract):
        return DISAMBIGUATION
    if _MONTH_YEAR_TITLE.match(title) and is_chronology_text(abstract):
        return DATE_PAGE
    if len(abstract) < cfg.min_chars:
        # The joined sentences are never longer than the abstract (whitespace runs become one space):
        # too short already, without splitting (a third of real leads are stubs under 300 characters).
        return TOO_SHORT
    sentences = split_sentences(abstract, cfg.lang)
    text = " ".join(sentences)
    if len(text) < cfg.min_chars or len(sentences) < cfg.min_sentences:
        return TOO_SHORT
    url = record.get("url") if isinstance(record.get("url"), str) else None
    version = record.get("version")
    entity = record.get("main_entity")
    qid = entity.get("identifier") if isinstance(entity, dict) else None
    did = doc_id(title)
    links = _locate_links(abstract_links(record), sentences, text, title, wiki_host(url), link_counts)
    return (
        did,
        title,
        _int_or_none(record.get("identifier")),
        url,
        _int_or_none(version.get("identifier")) if isinstance(version, dict) else None,
        qid if isinstance(qid, str) and qid else None,
        text,
        sentences,
        links,
        assign_split(did, cfg.seed, cfg.split_shares),
    )


MAX_BAD_EXAMPLES = 5


def process_items(items: Iterable[bytes | dict[str, Any]], cfg: AbstractsConfig) -> ChunkResult:
    """Process a chunk of raw JSON lines (bytes) or already-decoded records (dicts from Parquet)."""
    rows: list[tuple] = []
    res = ChunkResult(table=empty_table())
    for n, item in enumerate(items, start=1):
        res.lines += 1
        # isspace() stops at the first other byte (strip() would copy the whole line)
        if isinstance(item, bytes | bytearray) and (not item or item.isspace()):
            res.reasons[BLANK_LINE] += 1  # counted as a line (numbering) but neither record nor bad
            continue
        rec = decode_lead(item) if isinstance(item, bytes | bytearray) else item
        if isinstance(rec, BadLine):
            res.reasons[rec.reason] += 1
            if len(res.bad) < MAX_BAD_EXAMPLES:
                res.bad.append((n, rec.reason, rec.detail))
            continue
        out = _process_record(rec, cfg, res.link_reasons)
        if isinstance(out, str):
            res.reasons[out] += 1
            if out == MISSING_TITLE and len(res.bad) < MAX_BAD_EXAMPLES:
                res.bad.append((n, out, "record without a 'name'"))
            if out != MISSING_TITLE:
                title = str(rec.get("name")).strip()
                res.rejected.append((doc_id(title), out, title))
            continue
        rows.append(out)
    if rows:
        res.table = rows_to_table(rows)
    return res


def _array_of_buffers(type_: pa.DataType, spec: tuple) -> pa.Array:
    """The array of ``(length, null_count, buffers, children)`` (buffers as bytes or None, children the
    same for the type's fields)."""
    length, null_count, buffers, children = spec
    return pa.Array.from_buffers(
        type_,
        length,
        [None if b is None else pa.py_buffer(b) for b in buffers],
        null_count,
        children=[_array_of_buffers(type_.field(i).type, c) for i, c in enumerate(children)] or None,
    )


@functools.cache
def empty_table() -> pa.Table:
    """``ABSTRACTS_SCHEMA.empty_table()`` (one empty chunk a column) without ``pa.array``, which imports
    pandas on its first call in a process."""
    arrays = [_array_of_buffers(f.type, _empty_spec(f.type)) for f in ABSTRACTS_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=ABSTRACTS_SCHEMA)


def _empty_spec(type_: pa.DataType) -> tuple:
    """The description of a zero-length array of ``type_`` (offsets hold their one 0)."""
    if pa.types.is_struct(type_):
        return (0, 0, (None,), tuple(_empty_spec(f.type) for f in type_))
    if pa.types.is_list(type_):
        return (0, 0, (None, bytes(4)), (_empty_spec(type_.value_type),))
    if pa.types.is_string(type_):
        return (0, 0, (None, bytes(4), b""), ())
    return (0, 0, (None, b""), ())  # fixed width


def rows_to_table(rows: Sequence[tuple]) -> pa.Table:
    """The abstracts table of rows from :func:`_process_record`, built column by column.

    Same values as ``Table.from_pylist`` of the dict rows, without converting nested dicts one by one:
    sentences and links are flattened into plain lists and wrapped with their offsets.
    """
    columns = list(zip(*rows, strict=True))
    sent_offsets = [0]
    flat_sentences: list[str] = []
    link_offsets = [0]
    flat_links: list[tuple[str, str, str, int]] = []
    for sentences, links in zip(columns[7], columns[8], strict=True):
        flat_sentences += sentences
        sent_offsets.append(len(flat_sentences))
        flat_links += links
        link_offsets.append(len(flat_links))
    link_cols = list(zip(*flat_links, strict=True)) if flat_links else [[], [], [], []]
    link_struct = pa.StructArray.from_arrays(
        [pa.array(col, field.type) for col, field in zip(link_cols, LINK_TYPE, strict=True)],
        fields=list(LINK_TYPE),
    )
    arrays = []
    for i, field_ in enumerate(ABSTRACTS_SCHEMA):
        if i == 7:
            arrays.append(
                pa.ListArray.from_arrays(
                    pa.array(sent_offsets, pa.int32()), pa.array(flat_sentences, pa.string())
                )
            )
        elif i == 8:
            arrays.append(pa.ListArray.from_arrays(pa.array(link_offsets, pa.int32()), link_struct))
        else:
            arrays.append(pa.array(columns[i], field_.type))
    return pa.Table.from_arrays(arrays, schema=ABSTRACTS_SCHEMA)


def deduplicate_titles(table: pa.Table) -> tuple[pa.Table, list[tuple[str, str, str]]]:
    """Keep one row per title, in output order (:func:`kept_rows`: by split, then id).

    The kept row is the latest revision, then the smallest identifier, then the smallest text (so the
    result does not depend on input order). Returns the table and ``(id, reason, title)`` of the
    dropped duplicates.
    """
    if table.num_rows == 0:
        return table, []
    order = dedup_order(table)
    kept = kept_rows(table, order)
    dropped_rows = order.filter(pc.invert(order.column("keep"))).column("row")
    dropped = []
    if len(dropped_rows):
        gone = table.select(["id", "title"]).take(dropped_rows)
        dropped = [
            (i, DUPLICATE_TITLE, t)
            for i, t in zip(gone.column("id").to_pylist(), gone.column("title").to_pylist(), strict=True)
        ]
    return table.take(kept), dropped


DEDUP_SORT_KEYS = (
    ("id", "ascending", "at_end"),
    ("revision", "descending", "at_end"),
    ("identifier", "ascending", "at_end"),
    ("text", "ascending", "at_end"),
)


def dedup_order(table: pa.Table) -> pa.Table:
    """The rows of ``table`` in output order (``row``: index into ``table``) and whether each is kept.

    Sorted by id, then latest revision, smallest identifier, smallest text (a stable sort: equal rows
    stay in input order); the first row of each id is kept. Only the key columns are read, so a table
    backed by memory-mapped files is not pulled into memory whole.
    """
    keys = table.select([k for k, _, _ in DEDUP_SORT_KEYS])
    # What Table.sort_by does, without taking the rows: a stable sort of indices.
    rows = pc.sort_indices(keys, options=pc.SortOptions(sort_keys=list(DEDUP_SORT_KEYS)))
    ids = keys.column("id").take(rows).combine_chunks()
    n = len(ids)
    if n > 1:
        same = pc.equal(ids.slice(1), ids.slice(0, n - 1)).fill_null(False)
        keep = pa.concat_arrays([pa.array([True]), pc.invert(same)])
    else:
        keep = pa.array([True] * n, pa.bool_())
    return pa.table({"row": rows, "keep": keep})


def kept_rows(table: pa.Table, order: pa.Table) -> pa.Array:
    """The rows :func:`dedup_order` keeps, in the table's output order: by split (train, validation,
    test), then by id.

    That is the order of the asset read back split file after split file, so each split file is a
    slice of the table (no copy, see ``storage.split_parts``). Reads only the split column.
    """
    rows = order.filter(order.column("keep")).column("row").combine_chunks()
    rank = pc.index_in(table.column("split").take(rows), value_set=pa.array(SPLIT_NAMES))
    return rows.take(pc.array_sort_indices(rank, null_placement="at_end"))  # stable: id order kept per split
