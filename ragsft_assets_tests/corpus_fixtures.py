"""Small structured-wikipedia records built in tests, and a synthetic interlinked snapshot.

``make_record`` writes one record in the real schema (abstract + ``Abstract`` section with links);
``interlinked_records`` gives a ring of towns, each linking to its two neighbours and to a hub, so the
link graph, bridges and pairs are not trivial. Tests use them instead of copying real data.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import orjson

REAL_DATA = Path(__file__).resolve().parent / "data"
REAL_FRWIKI = REAL_DATA / "frwiki_structured" / "frwiki_namespace_0_sample.jsonl"
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "ragsft_assets" / "sample_snapshot" / "sample.fr"

FILLER = (
    "Elle est connue pour son marché couvert et ses quais de pierre bâtis au siècle dernier. "
    "Son patrimoine attire chaque été de nombreux visiteurs venus de toute la région. "
    "La vie locale y suit depuis longtemps le rythme des saisons, des foires et des crues de la rivière."
)


def wiki_url(title: str, host: str = "fr.wikipedia.org") -> str:
    return f"https://{host}/wiki/" + quote(title.replace(" ", "_"), safe="()'")


def make_record(
    title: str,
    abstract: str | None,
    links: Sequence[tuple[str, str]] = (),
    *,
    identifier: int = 1,
    revision: int | None = 100,
    qid: str | None = None,
    raw_links: Sequence[dict] = (),
) -> dict:
    """A record in the structured-wikipedia schema; ``links`` are ``(anchor, target title)``."""
    rec: dict = {
        "name": title,
        "identifier": identifier,
        "url": wiki_url(title),
        "in_language": {"identifier": "fr"},
        "is_part_of": {"identifier": "frwiki", "url": "https://fr.wikipedia.org"},
        "infoboxes": [{"type": "infobox", "name": "Infobox Localité"}],
        "sections": [
            {
                "type": "section",
                "name": "Abstract",
                "has_parts": [
                    {
                        "type": "paragraph",
                        "value": abstract or "",
                        "links": [{"url": wiki_url(t), "text": a} for a, t in links] + list(raw_links),
                    }
                ],
            },
            {"type": "section", "name": "Histoire", "has_parts": [{"type": "paragraph", "value": "Texte."}]},
        ],
    }
    if abstract is not None:
        rec["abstract"] = abstract
    if revision is not None:
        rec["version"] = {"identifier": revision, "comment": "test"}
    if qid is not None:
        rec["main_entity"] = {"identifier": qid, "url": f"https://www.wikidata.org/entity/{qid}"}
    return rec


def interlinked_records(n: int = 30) -> list[dict]:
    """A ring of ``n`` towns plus a hub ("Orbelle (rivière)"); every town links to both neighbours."""
    names = [f"Ville{i:03d}" for i in range(n)]
    records = []
    for i, name in enumerate(names):
        left, right = names[i - 1], names[(i + 1) % n]
        abstract = (
            f"{name} est une commune située sur l'Orbelle, entre {left} à l'ouest et le bourg de {right} à l'est. "
            + FILLER
        )
        records.append(
            make_record(
                name,
                abstract,
                [(left, left), (right, right), ("Orbelle", "Orbelle (rivière)")],
                identifier=1000 + i,
                qid=f"Q{5000 + i}",
            )
        )
    hub = (
        "L'Orbelle est une rivière de l'ouest de la France qui traverse de nombreuses communes. "
        f"Elle prend sa source près de {names[0]} et se jette dans l'océan Atlantique. " + FILLER
    )
    records.append(make_record("Orbelle (rivière)", hub, [(names[0], names[0])], identifier=999))
    return records


def write_jsonl(path: Path, records: Sequence[dict | bytes]) -> Path:
    """Write records (dicts, or raw bytes for broken lines) as JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        for r in records:
            fh.write((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n")
    return path
