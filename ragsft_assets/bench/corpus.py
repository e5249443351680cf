"""``ragsft bench corpus``: building abstracts + link graph vs a bare orjson decode of the same dump.

It writes a synthetic dump of ``size`` records (default 100,000) shaped and sized like the real
structured-wikipedia records (``../shared/data/frwiki_structured``: full sections with linked
paragraphs, infoboxes with fields and images, version/editor/event/license blocks; 3-12 KB a line),
then in the same run:

1. the baseline: ``orjson.loads`` of every line, one process (what any reader must at least do);
2. the corpus build the assets run: ``build_abstracts`` (all cores) then ``build_link_graph``.

``ratio`` = corpus throughput / decode throughput. Each corpus build runs in a fresh process whose
peak RSS (with its workers) is sampled, on the first half of the file and on the whole file, to show
that memory follows the output (the kept abstracts) and not the input, which is streamed.

With ``--workdir``, the generated dump is kept there and reused by the next run of the same size
(generating 100,000 records takes longer than building from them).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from ragsft_assets.bench import machine_values

DEFAULT_SIZE = 100_000
# Bump when make_record changes: a dump cached in a --workdir is reused only with the same version.
GENERATOR_VERSION = 1
_WORD_TEXT = (
    "le la les un une des du de dans sur avec pour par entre vers sous rivière commune ville village église "
    "château pont canal port gare musée école abbaye forêt plateau vallée siècle guerre roi comte duc peintre "
    "compositeur architecte ingénieur maire habitants population région département territoire histoire "
    "économie agriculture industrie commerce tourisme patrimoine culture sport festival marché foire vin "
    "fromage pierre bois fer bronze moulin ferme domaine route chemin ligne tramway bateau navire atelier "
    "construit fondé détruit restauré classé inscrit situé traversé bordé dominé connu célèbre ancien nouveau"
)
_WORDS = _WORD_TEXT.split()


def _sentence(rng: random.Random, lo: int = 12, hi: int = 28) -> str:
    words = rng.choices(_WORDS, k=rng.randint(lo, hi))
    return words[0].capitalize() + " " + " ".join(words[1:]) + "."


def _title(i: int) -> str:
    return f"Lieu {i} de l'Orbelle"


def _url(title: str) -> str:
    return "https://fr.wikipedia.org/wiki/" + quote(title.replace(" ", "_"), safe="'()")


def _paragraph(rng: random.Random, n: int, nlinks: int, n_titles: int) -> tuple[str, list[dict[str, str]]]:
    """A paragraph of ``n`` sentences; ``nlinks`` anchors spliced in (most to titles of the dump)."""
    sents = [_sentence(rng) for _ in range(n)]
    links = []
    for _ in range(nlinks):
        k = rng.randrange(len(sents))
        r = rng.random()
        if r < 0.65:
            target = _title(rng.randrange(n_titles))
            url = _url(target)
        elif r < 0.92:
            target = f"Sujet {rng.randrange(10**6)}"
            url = _url(target)
        elif r < 0.97:
            target = f"Page rouge {rng.randrange(10**6)}"
            url = _url(target) + "?action=edit&redlink=1"
        else:
            target = "site"
            url = f"https://example.org/{rng.randrange(10**6)}"
        # The anchor replaces a word: commas and "et" sit next to links only as often as in prose.
        words = sents[k][:-1].split(" ")
        words[rng.randrange(1, len(words))] = target
        sents[k] = " ".join(words) + "."
        links.append({"url": url, "text": target})
    return " ".join(sents), links


def make_record(i: int, n_titles: int, rng: random.Random) -> dict[str, Any]:
    """One record shaped like the real dump (sizes drawn around the real ones)."""
    title = _title(i)
    lead, lead_links = _paragraph(rng, rng.randint(2, 5), rng.randint(3, 10), n_titles)
    sections = [
        {
            "type": "section",
            "name": "Abstract",
            "has_parts": [{"type": "paragraph", "value": lead, "links": lead_links}],
        }
    ]
    for s in range(rng.randint(2, 9)):
        parts = []
        for _ in range(rng.randint(1, 4)):
            value, links = _paragraph(rng, rng.randint(2, 6), rng.randint(0, 6), n_titles)
            parts.append({"type": "paragraph", "value": value, "links": links})
        sections.append({"type": "section", "name": f"Section {s}", "has_parts": parts})
    fields = [
        {"type": "field", "name": f"Champ {f}", "value": " ".join(rng.choices(_WORDS, k=rng.randint(1, 6)))}
        for f in range(rng.randint(4, 20))
    ]
    infobox = {
        "type": "infobox",
        "name": "Infobox Localité",
        "has_parts": [
            {
                "type": "section",
                "name": title,
                "has_parts": fields,
                "images": [
                    {
                        "content_url": f"https://upload.wikimedia.org/wikipedia/commons/thumb/{i % 16:x}/{i}.jpg/280px-{i}.jpg",
                        "width": 280,
                        "height": 187,
                        "alternative_text": title,
                    }
                ],
            }
        ],
    }
    return {
        "name": title,
        "identifier": 16_000_000 + i,
        "abstract": lead,
        "version": {
            "identifier": 217_000_000 + i,
            "comment": " ".join(rng.choices(_WORDS, k=rng.randint(3, 40))),
            "tags": ["wikieditor"],
            "scores": {},
            "editor": {
                "identifier": rng.randrange(10**7),
                "name": f"Contributeur {rng.randrange(10**4)}",
                "edit_count": rng.randrange(10**5),
                "groups": ["*", "user", "autoconfirmed"],
                "date_started": "2011-09-06T15:02:27Z",
            },
            "number_of_characters": len(lead) * 5,
            "size": {"value": len(lead) * 5, "unit_text": "B"},
            "maintenance_tags": {},
        },
        "event": {
            "identifier": f"{i:08x}-bab5-4f31-a440-2fd05da7ac07",
            "type": "update",
            "date_created": "2024-08-03T20:57:40.081374Z",
            "date_published": "2024-08-03T20:57:41.175491Z",
        },
        "url": _url(title),
        "date_created": "2024-08-03T20:57:38Z",
        "date_modified": "2024-08-03T20:57:38Z",
        "main_entity": {
            "identifier": f"Q{9_000_000 + i}",
            "url": f"https://www.wikidata.org/entity/Q{9_000_000 + i}",
        },
        "is_part_of": {"identifier": "frwiki", "url": "https://fr.wikipedia.org"},
        "in_language": {"identifier": "fr"},
        "license": [
            {
                "name": "Creative Commons Attribution-ShareAlike 4.0",
                "identifier": "CC-BY-SA-4.0",
                "url": "https://creativecommons.org/licenses/by-sa/4.0/",
            }
        ],
        "description": " ".join(rng.choices(_WORDS, k=5)),
        "infoboxes": [infobox],
        "sections": sections,
    }


def generate(path: Path, size: int, seed: int = 1) -> int:
    """Write ``size`` records as JSON lines to ``path``; returns the bytes written."""
    rng = random.Random(seed)
    with open(path, "wb") as fh:
        for i in range(size):
            fh.write(orjson.dumps(make_record(i, size, rng)) + b"\n")
    return path.stat().st_size


def decode_all(path: Path) -> tuple[int, float]:
    """The baseline: orjson-decode every line. Returns (lines, seconds)."""
    n = 0
    started = time.perf_counter()
    with open(path, "rb") as fh:
        for line in fh:
            orjson.loads(line)
            n += 1
    return n, time.perf_counter() - started


def _corpus_job(path: str, workers: int, queue: Any) -> None:
    from ragsft_assets.corpus.abstracts import AbstractsConfig
    from ragsft_assets.corpus.build import build_abstracts
    from ragsft_assets.corpus.link_graph import LinkGraphConfig, build_link_graph

    started = time.perf_counter()
    build = build_abstracts([Path(path)], AbstractsConfig(), workers=workers)
    graph = build_link_graph(build.table, LinkGraphConfig(), workers=workers)
    elapsed = time.perf_counter() - started
    queue.put((elapsed, build.funnel["lines_read"], build.table.num_rows, graph.table.num_rows))


def _tree_rss(proc: Any) -> int:
    import psutil

    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # a worker may exit between listing and reading
            total += p.memory_info().rss
    return total


def run_corpus_build(path: Path, workers: int) -> dict[str, float]:
    """Run the corpus build in a fresh process; time it and sample the peak RSS of its process tree."""
    import psutil

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_corpus_job, args=(str(path), workers, queue))
    proc.start()
    ps = psutil.Process(proc.pid)
    peak = 0
    result = None
    while result is None:
        with contextlib.suppress(psutil.Error):
            peak = max(peak, _tree_rss(ps))
        try:
            result = queue.get(timeout=0.05)
        except Exception:  # queue.Empty: still running
            if not proc.is_alive() and queue.empty():
                raise RuntimeError(f"corpus build failed (exit code {proc.exitcode})") from None
    proc.join()
    elapsed, lines, kept, edges = result
    return {"seconds": elapsed, "lines": lines, "kept": kept, "edges": edges, "peak_rss_mb": peak / 2**20}


def run(size: int | None = None, workdir: str | None = None) -> dict[str, object]:
    """Generate the dump, time the baseline and the corpus build; returns the closing line's values."""
    from ragsft_assets.corpus.build import default_workers

    size = size or DEFAULT_SIZE
    tmp = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ragsft_bench_corpus_"))
    tmp.mkdir(parents=True, exist_ok=True)
    workers = default_workers()
    try:
        full = tmp / "frwiki_bench_full.jsonl"
        half = tmp / "frwiki_bench_half.jsonl"
        started = time.perf_counter()
        stamp = tmp / "frwiki_bench.meta.json"
        meta = {"size": size, "seed": 1, "generator": GENERATOR_VERSION}
        cached = (
            full.is_file() and half.is_file() and stamp.is_file() and orjson.loads(stamp.read_bytes()) == meta
        )
        if cached:  # a kept --workdir: the same dump again (generating it is slower than the build)
            nbytes = full.stat().st_size
        else:
            stamp.unlink(missing_ok=True)
            nbytes = generate(full, size)
            with open(full, "rb") as src, open(half, "wb") as dst:
                for n, line in enumerate(src):
                    if n >= size // 2:
                        break
                    dst.write(line)
            stamp.write_bytes(orjson.dumps(meta))
        print(
            f"{'reused' if cached else 'generated'} {size} records, {nbytes / 2**20:.0f} MiB "
            f"({nbytes / size / 1024:.1f} KiB a line) in {time.perf_counter() - started:.1f}s; "
            f"{workers} worker(s), {os.cpu_count()} cpu(s)",
            flush=True,
        )
        lines, t_decode = decode_all(full)
        decode_rate = lines / t_decode
        print(
            f"baseline orjson decode: {lines} lines in {t_decode:.2f}s = {decode_rate:.0f} lines/s",
            flush=True,
        )
        half_run = run_corpus_build(half, workers)
        print(
            f"corpus build, half size: {half_run['lines']:.0f} lines in {half_run['seconds']:.2f}s, "
            f"peak RSS {half_run['peak_rss_mb']:.0f} MiB",
            flush=True,
        )
        full_run = run_corpus_build(full, workers)
        rate = full_run["lines"] / full_run["seconds"]
        print(
            f"corpus build, full size: {full_run['lines']:.0f} lines -> {full_run['kept']:.0f} abstracts, "
            f"{full_run['edges']:.0f} edges in {full_run['seconds']:.2f}s = {rate:.0f} articles/s, "
            f"peak RSS {full_run['peak_rss_mb']:.0f} MiB",
            flush=True,
        )
        return {
            "ratio": rate / decode_rate,
            "articles_per_s": round(rate),
            "peak_rss_mb": round(full_run["peak_rss_mb"]),
            "peak_rss_mb_half": round(half_run["peak_rss_mb"]),
            "decode_lines_per_s": round(decode_rate),
            "records": size,
            "workers": workers,
            **machine_values(),
        }
    finally:
        if not workdir:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":  # python -m ragsft_assets.bench.corpus [size]
    import sys

    from ragsft_assets.cli.bench import format_line

    values = run(int(sys.argv[1]) if len(sys.argv) > 1 else None)
    print(format_line("corpus", values))
