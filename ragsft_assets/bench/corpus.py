"""``ragsft bench corpus``: building abstracts + link graph vs a bare orjson decode of the same dump.

It writes a generated dump of ``size`` records (default 100,000) built from real material: the
skeletons (infoboxes, version, event, license blocks) of the 4 frwiki structured-wikipedia records
shipped in ``bench/data`` (see its SOURCES.md), sections of real sentences drawn from those records
and from the package's sample snapshot ``sample.fr``, with their real anchors in place (most
retargeted to titles of the dump), and line sizes drawn between the smallest and the largest real
record (2.8-11.1 KiB). The enumeration rule then meets real sentences at their real rate
(``enum_checked_share``: the share of abstract sentences that reach it). Then in the same run:

1. the baseline: ``orjson.loads`` of every line, one process (what any reader must at least do);
2. the corpus build the assets run: ``build_abstracts`` (all cores) then ``build_link_graph_files``,
   then the assets' own writes (ledgers, metadata queries), timed with them
   (``writes_s`` is their share). Both run out of core, as the assets run them: the split files
   and the link graph file are written a row group at a time by the builds. ``passed``:
   ``ratio >= bar`` (0.28) and the full run's ``peak_rss_mb < rss_bar_mb`` (1,536).

``ratio`` = corpus throughput / decode throughput. ``cpu_ratio`` = the decode's CPU seconds / the build's
(its process, and the chunks of the abstracts pool's and the link graph's enumeration pool's workers):
the cost per record, which a machine shared with other work does not skew the way it skews wall times.
With ``workers`` free cores, ``ratio`` is at most about ``workers * cpu_ratio``. ``load_avg``: the
1-minute load average at the end. Each corpus build runs in a fresh process whose peak RSS (with its
workers) is sampled, on the first half of the file and on the whole file, to show that memory follows
the output (the kept abstracts) and not the input, which is streamed.

``projected_frwiki_min`` and ``projected_frwiki_peak_rss_mb``: the build time and peak RSS projected to
all of French Wikipedia (``FRWIKI_RECORDS``, 2.6 million records) on this machine, from the half and
full runs (see :func:`project`).

With ``--workdir``, the generated dump is kept there and reused by the next run of the same size
(generating 100,000 records takes longer than building from them).
"""

from __future__ import annotations

import contextlib
import functools
import math
import multiprocessing as mp
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from ragsft_assets.bench import machine_values

DEFAULT_SIZE = 100_000
# The corpus build (with the assets' writes) at least 0.28 times as fast as a bare decode of the same
# lines: the Python rules measured 0.30-0.37 on a quiet 2-core machine.
BAR = 0.28
# Issue 36: peak RSS (workers included) under 1,536 MiB at 1,000,000 records, where it was 2,632 with the
# whole abstracts table and link graph in memory; the build now runs out of core.
RSS_BAR_MB = 1536
FRWIKI_RECORDS = 2_600_000  # records in a French Wikipedia structured-wikipedia snapshot (namespace 0)
# Bump when make_record changes: a dump cached in a --workdir is reused only with the same version.
GENERATOR_VERSION = 2
DATA = Path(__file__).resolve().parent / "data"
REAL_RECORDS = DATA / "frwiki_namespace_0_sample.jsonl"  # 4 real frwiki records (see data/SOURCES.md)
SAMPLE_DUMP = (
    Path(__file__).resolve().parents[1] / "sample_snapshot" / "sample.fr" / "frwiki_namespace_0_0.jsonl"
)
_IN_CORPUS_SHARE = 0.65  # of the real anchors, the share retargeted to a title of the generated dump


@dataclass(frozen=True, slots=True)
class Material:
    """Real material the records are built from.

    ``sentences``: (sentence, anchor texts of the source paragraph found in it), from every paragraph
    of the sample snapshot and of the 4 frwiki records, split by the project's splitter.
    ``templates``: the frwiki records without their sections (infoboxes, version, event blocks kept),
    with their serialized size. ``sizes``: the real records' line sizes in bytes.
    """

    sentences: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    templates: tuple[tuple[dict[str, Any], int], ...]
    sizes: tuple[int, ...]


def _paragraphs(parts: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for part in parts:
        if part.get("type") == "paragraph" and part.get("value"):
            yield part
        yield from _paragraphs(part.get("has_parts") or [])


def _records(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as fh:
        for line in fh:
            with contextlib.suppress(orjson.JSONDecodeError):  # the sample's deliberately truncated line
                yield orjson.loads(line)


@functools.cache
def load_material() -> Material:
    """The sentences, templates and sizes of the real records shipped with the package."""
    from ragsft_assets.corpus.sentences import split_sentences

    real = list(_records(REAL_RECORDS))
    sentences: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    for record in [*_records(SAMPLE_DUMP), *real]:
        for para in _paragraphs(record.get("sections") or []):
            links = [(link["text"], link["url"]) for link in para.get("links") or [] if link.get("text")]
            for sent in split_sentences(para["value"], "fr"):
                sentences.append((sent, tuple((t, u) for t, u in links if t in sent)))
    templates = []
    for record in real:
        skeleton = {k: v for k, v in record.items() if k != "sections"}
        templates.append((skeleton, len(orjson.dumps(skeleton))))
    sizes = tuple(len(orjson.dumps(r)) + 1 for r in real)
    return Material(tuple(sentences), tuple(templates), sizes)


def _title(i: int) -> str:
    return f"Lieu {i} de l'Orbelle"


def _url(title: str) -> str:
    return "https://fr.wikipedia.org/wiki/" + quote(title.replace(" ", "_"), safe="'()")


def _paragraph(
    rng: random.Random, material: Material, n: int, n_titles: int
) -> tuple[str, list[dict[str, str]]]:
    """``n`` real sentences; their real anchors kept in place, most retargeted to titles of the dump.

    Retargeting replaces the anchor text in the sentence, so an anchor that stood in an enumeration
    ("A, B et C") still does: the enumeration rule sees the sentences it sees in a real dump.
    """
    sents, links = [], []
    for _ in range(n):
        sent, anchors = material.sentences[rng.randrange(len(material.sentences))]
        for text, url in anchors:
            if rng.random() < _IN_CORPUS_SHARE:
                target = _title(rng.randrange(n_titles))
                sent = sent.replace(text, target, 1)
                text, url = target, _url(target)
            links.append({"url": url, "text": text})
        sents.append(sent)
    return " ".join(sents), links


def make_record(
    i: int, n_titles: int, rng: random.Random, material: Material | None = None
) -> dict[str, Any]:
    """One record: a real record's skeleton, filled with real sentences up to a size drawn from the real ones.

    The target line size is log-uniform between the smallest and the largest real record (2.8-11.1 KiB
    for the 4 frwiki records); the skeleton is a real record's (infoboxes, version, event, license)
    that leaves room for at least a lead; sections of 1-3 paragraphs of 1-5 sentences are added until
    the line reaches the target.
    """
    material = material or load_material()
    lo, hi = min(material.sizes), max(material.sizes)
    target = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    fitting = [t for t in material.templates if t[1] <= target - 600] or [
        min(material.templates, key=lambda t: t[1])
    ]
    skeleton = fitting[rng.randrange(len(fitting))][0]
    title = _title(i)
    lead, lead_links = _paragraph(rng, material, rng.randint(2, 5), n_titles)
    record = dict(skeleton)
    record.update(
        {
            "name": title,
            "identifier": 16_000_000 + i,
            "abstract": lead,
            "url": _url(title),
            "main_entity": {
                "identifier": f"Q{9_000_000 + i}",
                "url": f"https://www.wikidata.org/entity/Q{9_000_000 + i}",
            },
            "sections": [
                {
                    "type": "section",
                    "name": "Abstract",
                    "has_parts": [{"type": "paragraph", "value": lead, "links": lead_links}],
                }
            ],
        }
    )
    sections = record["sections"]
    size = len(orjson.dumps(record)) + 1
    while size < target:
        value, links = _paragraph(rng, material, rng.randint(1, 5), n_titles)
        part = {"type": "paragraph", "value": value, "links": links}
        grows = len(orjson.dumps(part)) + 1
        if size + grows + 80 > hi and size >= lo:  # 80: a new section's own keys
            break  # the next paragraph would leave the real range: stop inside it
        if len(sections) == 1 or len(sections[-1]["has_parts"]) >= rng.randint(1, 3):
            sections.append({"type": "section", "name": f"Section {len(sections)}", "has_parts": []})
        sections[-1]["has_parts"].append(part)
        size = len(orjson.dumps(record)) + 1
    return record


def generate(path: Path, size: int, seed: int = 1) -> int:
    """Write ``size`` records as JSON lines to ``path``; returns the bytes written."""
    rng = random.Random(seed)
    material = load_material()
    with open(path, "wb") as fh:
        for i in range(size):
            fh.write(orjson.dumps(make_record(i, size, rng, material)) + b"\n")
    return path.stat().st_size


def project(
    half: dict[str, float], full: dict[str, float], records: int = FRWIKI_RECORDS
) -> dict[str, float]:
    """The build time (minutes) and peak RSS (MiB) projected to ``records`` from the half and full runs.

    ``half`` and ``full`` hold ``lines``, ``seconds`` and ``peak_rss_mb`` of :func:`run_corpus_build`.
    Time: at the full run's own rate, or at the marginal rate from half to full where that is slower
    (a cost growing faster than the input). The full run's rate counts its fixed costs (pool start,
    imports) again for every further record, so the projection errs long rather than short. Memory: a
    line through the two runs (a fixed part plus a part per record, never negative), since it follows
    the kept output.
    """
    extra = full["lines"] - half["lines"]
    rate = full["seconds"] / full["lines"]
    if extra > 0:
        rate = max(rate, (full["seconds"] - half["seconds"]) / extra)
        rss_per_record = max(0.0, (full["peak_rss_mb"] - half["peak_rss_mb"]) / extra)
    else:
        rss_per_record = full["peak_rss_mb"] / full["lines"]
    return {
        "projected_frwiki_min": round(rate * records / 60, 1),
        "projected_frwiki_peak_rss_mb": round(
            full["peak_rss_mb"] + rss_per_record * (records - full["lines"])
        ),
    }


def verdict(ratio: float, peak_rss_mb: float = 0.0) -> dict[str, object]:
    """The bars and whether ``ratio`` (corpus throughput / decode throughput) and the full run's peak
    RSS meet them."""
    return {"bar": BAR, "rss_bar_mb": RSS_BAR_MB, "passed": ratio >= BAR and peak_rss_mb < RSS_BAR_MB}


def decode_all(path: Path) -> tuple[int, float]:
    """The baseline: orjson-decode every line. Returns (lines, seconds)."""
    n = 0
    started = time.perf_counter()
    with open(path, "rb") as fh:
        for line in fh:
            orjson.loads(line)
            n += 1
    return n, time.perf_counter() - started


PARTITION = "20240916.fr"


def write_like_the_assets(build: Any, graph: Any, root: Path) -> float:
    """The writes the ``abstracts`` and ``link_graph`` assets do after their builds; returns seconds.

    The builds wrote the split files and the link graph file already (out of core, as the assets
    run them); then the same calls in the same order: the ledger of every kept and dropped abstract,
    their metadata (schema, preview, split counts, funnels, reasons table from the ledger); then the
    link graph's edge ledger and its metadata (top targets, bridge edges).
    """
    from ragsft_assets import storage
    from ragsft_assets.corpus import summaries
    from ragsft_assets.corpus.ledgers import abstracts_ledger, link_graph_ledger
    from ragsft_assets.defs.corpus.assets import PRODUCT, output_metadata
    from ragsft_assets.defs.metadata import funnel_metadata
    from ragsft_assets.ledger import write_ledger

    started = time.perf_counter()
    paths = build.paths
    ledger = write_ledger(
        abstracts_ledger(PARTITION, PRODUCT, build.table, build.rejected), PARTITION, "abstracts", root
    )
    md = output_metadata("abstracts", [paths[s] for s in ("train", "validation", "test")])
    md.update(funnel_metadata(summaries.funnel_rows(build.funnel)))
    md["rejections_by_reason"] = summaries.reason_table([ledger])

    path = storage.asset_path(PARTITION, "link_graph", storage.ALL, root)
    write_ledger(
        link_graph_ledger(PARTITION, PRODUCT, graph.table, graph.dropped), PARTITION, "link_graph", root
    )
    md = output_metadata("link_graph", [path])
    md.update(funnel_metadata(summaries.funnel_rows(graph.funnel)))
    md["bridge_edges"] = summaries.bridge_edges(path)
    md["top_targets"] = summaries.top_targets(path)
    return time.perf_counter() - started


def enum_checked_share_of_files(paths: list[Path]) -> float:
    """:func:`enum_checked_share` of the abstracts split files, a row group at a time."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ragsft_assets.corpus.enumeration import may_hold_enumeration

    checked = total = 0
    for path in paths:
        f = pq.ParquetFile(path)
        for g in range(f.num_row_groups):
            flat = pc.list_flatten(f.read_row_group(g, columns=["sentences"]).column("sentences"))
            checked += (pc.sum(may_hold_enumeration(flat)).as_py() or 0) if len(flat) else 0
            total += len(flat)
    return checked / max(total, 1)


def enum_checked_share(abstracts: Any) -> float:
    """Share of the kept abstracts' sentences that pass the C++ prefilter, i.e. reach the Python rule."""
    import pyarrow.compute as pc

    from ragsft_assets.corpus.enumeration import may_hold_enumeration

    flat = pc.list_flatten(abstracts.column("sentences"))
    return pc.sum(may_hold_enumeration(flat)).as_py() / max(len(flat), 1) if len(flat) else 0.0


def _corpus_job(path: str, workers: int, queue: Any) -> None:
    from ragsft_assets import storage
    from ragsft_assets.corpus.abstracts import AbstractsConfig
    from ragsft_assets.corpus.build import build_abstracts
    from ragsft_assets.corpus.link_graph import LinkGraphConfig, build_link_graph_files
    from ragsft_assets.defs.corpus import assets  # noqa: F401 - imported before the clock starts

    root = Path(tempfile.mkdtemp(prefix="store_", dir=Path(path).parent))
    try:
        started = time.perf_counter()
        cpu_started = time.process_time()
        # Out of core, as the assets run it: the split files and the graph file written by the builds.
        out = {s: storage.asset_path(PARTITION, "abstracts", s, root) for s in storage.SPLITS}
        build = build_abstracts(
            [Path(path)], AbstractsConfig(), workers=workers, tmp_dir=str(root), out_paths=out
        )
        t_build = time.perf_counter() - started
        graph = build_link_graph_files(
            [out[s] for s in storage.SPLITS],
            LinkGraphConfig(),
            storage.asset_path(PARTITION, "link_graph", storage.ALL, root),
            workers=workers,
            tmp_dir=str(root),
        )
        t_graph = time.perf_counter() - started - t_build
        writes = write_like_the_assets(build, graph, root)
        print(f"  abstracts {t_build:.2f}s, link graph {t_graph:.2f}s, writes {writes:.2f}s", flush=True)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started + build.worker_cpu_s + graph.worker_cpu_s
        share = enum_checked_share_of_files([out[s] for s in storage.SPLITS])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    queue.put(
        (elapsed, writes, build.funnel["lines_read"], build.table.num_rows, graph.table.num_rows, share, cpu)
    )


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

    # Spawn, not fork: a forked child inherits this process's fork-server handle (one started by an
    # earlier build here) and then fails to start its pool (ChildProcessError: not its child).
    ctx = mp.get_context("spawn")
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
            # Every sample lists the whole process table (psutil children): at 20 a second it took
            # about 2% of this 2-core machine's samples from the build it measures.
            result = queue.get(timeout=0.2)
        except Exception:  # queue.Empty: still running
            if not proc.is_alive() and queue.empty():
                raise RuntimeError(f"corpus build failed (exit code {proc.exitcode})") from None
    proc.join()
    elapsed, writes, lines, kept, edges, share, cpu = result
    return {
        "seconds": elapsed,
        "writes_s": writes,
        "lines": lines,
        "kept": kept,
        "edges": edges,
        "enum_checked_share": share,
        "cpu_s": cpu,
        "peak_rss_mb": peak / 2**20,
    }


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
        cpu_decode = time.process_time()
        lines, t_decode = decode_all(full)
        cpu_decode = time.process_time() - cpu_decode
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
            f"{full_run['edges']:.0f} edges in {full_run['seconds']:.2f}s (writes {full_run['writes_s']:.2f}s) "
            f"= {rate:.0f} articles/s, "
            f"peak RSS {full_run['peak_rss_mb']:.0f} MiB; CPU {full_run['cpu_s']:.2f}s "
            f"(decode CPU {cpu_decode:.2f}s; load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )
        with open(full, "rb") as fh:
            line_kb = sorted(len(line) / 1024 for line in fh)
        return {
            "ratio": rate / decode_rate,
            **verdict(rate / decode_rate, full_run["peak_rss_mb"]),
            **project(half_run, full_run),
            "record_kb_p50": round(line_kb[len(line_kb) // 2], 2),
            "enum_checked_share": round(full_run["enum_checked_share"], 3),
            "cpu_ratio": round(cpu_decode / full_run["cpu_s"], 3),
            "load_avg": round(os.getloadavg()[0], 1),
            "writes_s": round(full_run["writes_s"], 2),
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
