"""Every shell command of the README and docs/*.md: parsed by the real CLI, run where it can run here.

The commands are read from the documents' shell code blocks (```bash, ```sh, and untagged blocks
that start with a command). Each one is

- run for real in a fresh home, on the bundled data, when it is in ``RUN`` (in that order);
- or matched by a ``NOT_RUNNABLE`` pattern, which says why it cannot run here (a cluster, a GPU,
  the network, a model run of minutes that another test covers, a value only the user has).

A command in neither fails the test, so a new documented command gets a decision. Every `ragsft`
command, run or not, is parsed by the real click CLI: its subcommands exist, its options exist and
get their values, its arguments are as many as the command takes, its choices are valid; for
`ragsft materialize`, the asset selection resolves and the run config is valid for the selected
assets' job.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_LANGS = {"bash", "sh", "shell", "console"}
# An untagged block is shell when its first command starts with one of these.
SHELL_STARTS = ("ragsft ", ".venv/bin/", "export ", "git ", "python", "bash ", "pip ", "dagster ", "vllm ")
PLACEHOLDER = re.compile(r"^(<[^>]+>|[A-Z][A-Z0-9_]*(-[A-Z0-9_]+)*)$")  # KEY, ID, RUN_ID, <SHA-256>

# The bundled file that stands for a file the docs name and the user downloads.
SUBSTITUTE = {"hotpot_train_v1.1.json": "ragsft_assets_tests/data/hotpotqa/hotpotqa_train_distractor_70.json"}

# Run for real, in this order, in a fresh working folder whose home is ./.ragsft (the default).
RUN: list[str] = [
    "ragsft snapshots add sample.fr --sample",
    "ragsft snapshots list",
    "ragsft materialize '*abstracts' --partition sample.fr",
    "ragsft materialize 'release*' --partition sample.fr",
    "ragsft verify .ragsft/releases/sample.fr",
    "ragsft catalog --rebuild",
    "ragsft verify .ragsft/releases/sample.fr --catalog",
    "ragsft verify .ragsft/releases/sample.fr --digest '<SHA-256>'",
    "ragsft explain ID --partition sample.fr",
    "ragsft sources add narrativeqa.en --from ragsft_assets_tests/data/narrativeqa/narrativeqa_test_tiny_50.jsonl",
    "ragsft sources add hotpotqa.en --from hotpot_train_v1.1.json",
    "ragsft sources list",
    "ragsft sources remove hotpotqa.en",
    "ragsft base-models add qwen3-4b-base --model Qwen/Qwen3-4B-Base",
    "ragsft base-models add olmo-2-7b --model allenai/OLMo-2-1124-7B --backend openai --base-urls http://gpu-2:8000/v1",
    "ragsft base-models add qwen3-4b-base --model Qwen/Qwen3-4B-Base --backend openai --base-urls http://gpu-3:8000/v1",
    "ragsft runs clean --dry-run",
    "ragsft runs clean",
    "ragsft cache stats",
]

_MODEL_RUN = "runs LLM stages: minutes with the embedded model, or a served model"
# (pattern on the command as normalized, reason): why a documented command does not run here.
NOT_RUNNABLE: list[tuple[str, str]] = [
    (
        r"^bash scripts/bootstrap\.sh\b",
        "creates .venv from the package index (minutes): CI runs it before the tests",
    ),
    (r"^bash scripts/test\.sh\b", "the whole suite, of which this test is a part"),
    (
        r"^ragsft diff \d",
        "needs two built snapshot releases: test_release_diff builds two and checks this command's counts",
    ),
    (
        r"^ragsft release promote ",
        "needs a release pending review: test_release_diff_flow builds one and promotes it",
    ),
    (r"^git clone ", "needs the repository's remote (network)"),
    (r"^cd ragsft$", "the folder of the clone before it"),
    (r"^python3\.11 -m venv ", "creates a virtual environment: the one-GPU install"),
    (
        r"^\.venv/bin/pip install .*\[gpu\]",
        "installs vLLM's CUDA build from the package index (network, a GPU)",
    ),
    (r"^export ", "sets variables for the commands after it"),
    (r"^dagster dev$", "serves the UI until stopped: test_ui starts it"),
    (r"^ragsft ui$", "serves the UI until stopped: test_ui_signal starts it"),
    (
        r"^ragsft demo\b",
        f"full_job or a job of it: {_MODEL_RUN}; test_readme_demo_figures_match_a_real_demo_run runs"
        " `ragsft demo` with the embedded model, test_pipeline_e2e the graph with the oracle double",
    ),
    (r"--hub\b", "streams a dataset from the Hugging Face hub (network)"),
    (r"^ragsft plan ", f"{_MODEL_RUN} on a sample of the partition; test_plan runs it with a double"),
    (
        r"^ragsft bench ",
        "a benchmark: minutes to an hour at its documented size; test_bench_* test each one small",
    ),
    (r"^ragsft recall run ", f"{_MODEL_RUN}; test_recall_job runs it headless with a double"),
    (r"^ragsft recall rule ", "needs a built Recall Rewrite release; test_recall_rule runs it"),
    (r"^python -c .*load_dataset\(\"releases/recall\"", "needs a built Recall Rewrite release"),
    (
        r"^ragsft materialize '\*(multihop_\w+|corpus_filtered_qwen_v2|rag_sft|qa/release)' ",
        f"{_MODEL_RUN}; test_pipeline_e2e and test_qa_sources run these chains with doubles",
    ),
    (r"^ragsft materialize 'qa/rag_prompts\*' ", f"{_MODEL_RUN}, with the user's overrides file"),
    (r"^ragsft materialize review_labels ", "labels a review sample that a model run drew"),
    (
        r"^ragsft materialize '\*long_context/release' ",
        "the embedder over every passage and 32K-token conversations: about a minute on the bundled"
        " NarrativeQA sample (test_long_context_embedded runs it); the other sources are the user's files",
    ),
    (
        r"^ragsft sources add (synthetic_convqa|rag_tge)\.en --from ",
        "the source's file is the user's download",
    ),
    (
        r"^ragsft sources add wiki\.fr --from-snapshot ",
        "needs the snapshot's multi-hop questions built by a model run",
    ),
    (r"^ragsft review sample ", "draws from filter verdicts that a model run wrote"),
    (r"^ragsft agreement rev/", "compares label files of a review (a model's and a person's)"),
    (r"^ragsft citations check answers\.jsonl", "checks a trained model's answers: the user's file"),
    (r"^ragsft snapshots add 20240916\.fr --from DIR", "DIR: the user's dump folder"),
    (r"--partition 20240916\.fr\b", "a whole Wikipedia snapshot, from the hub (network) or the user's dumps"),
    (
        r"(\b(ID|KEY|RUN_ID)\b|<SHA-256>)",
        "names a value only the user has (a row id, a key, a run id, a digest)",
    ),
]


@dataclass(frozen=True)
class DocCommand:
    source: str  # file:line
    argv: tuple[str, ...]  # the command without env assignments, `.venv/bin/` and comments


def normalize(argv: tuple[str, ...]) -> str:
    """One spelling per command: tokens re-quoted only where the shell needs it ('*abstracts')."""
    return " ".join(a if re.fullmatch(r"[\w@%+=:,./\[\]-]+", a) else shlex.quote(a) for a in argv)


def shell_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each shell code block of a Markdown text."""
    blocks: list[tuple[int, list[str]]] = []
    lang: str | None = None
    lines: list[str] = []
    start = 0
    for n, line in enumerate(text.splitlines(), start=1):
        fence = line.strip()
        if fence.startswith("```"):
            if lang is None:
                lang, lines, start = fence[3:].strip() or "untagged", [], n + 1
                continue
            first = next((x.strip() for x in lines if x.strip() and not x.strip().startswith("#")), "")
            if lang in SHELL_LANGS or (lang == "untagged" and first.startswith(SHELL_STARTS)):
                blocks.append((start, lines))
            lang = None
        elif lang is not None:
            lines.append(line)
    return blocks


def split_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line (`a && b ; c`), comments left out."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise ValueError(f"{line!r}: {exc}") from None
    for token in tokens:
        if token in (";", "&&", "||", "|", "&"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def commands_of(path: Path) -> list[DocCommand]:
    out: list[DocCommand] = []
    for start, lines in shell_blocks(path.read_text(encoding="utf-8")):
        joined: list[tuple[int, str]] = []
        pending, first = "", 0
        for i, line in enumerate(lines):
            if not pending:
                first = start + i
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            joined.append((first, pending + line))
            pending = ""
        for n, line in joined:
            for tokens in split_commands(line):
                while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
                    tokens = tokens[1:]  # VAR=value before the command
                if not tokens:
                    continue
                if tokens[0].endswith("/ragsft"):
                    tokens[0] = "ragsft"
                out.append(DocCommand(f"{path.relative_to(REPO)}:{n}", tuple(tokens)))
    return out


TABLE_COMMAND = re.compile(r"`(ragsft [^`]* --[^`]*)`")


def table_commands_of(path: Path) -> list[DocCommand]:
    """The commands in table cells (the README's "built by" column): code spans of `ragsft` with an option."""
    out: list[DocCommand] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("|"):
            for m in TABLE_COMMAND.finditer(line):
                out.append(DocCommand(f"{path.relative_to(REPO)}:{n}", tuple(shlex.split(m.group(1)))))
    return out


def all_commands() -> list[DocCommand]:
    return [c for path in DOCS for c in (*commands_of(path), *table_commands_of(path))]


def reason_not_runnable(cmd: str) -> str | None:
    for pattern, reason in NOT_RUNNABLE:
        if re.search(pattern, cmd):
            return reason
    return None


# --- parsing with the real CLI -------------------------------------------------------------------


def _missing(value: object) -> bool:
    """No value given: None, an empty tuple, or click's UNSET sentinel (click 8.3)."""
    return value is None or value == () or repr(value) == "Sentinel.UNSET"


def parse(argv: list[str]) -> tuple[click.Command, dict[str, object], list[str]]:
    """Resolve ``ragsft ARGV``'s command and parse its arguments as click does, without running it.

    Types are not converted (a path the docs name need not exist here), but choices are checked.

    Raises:
        click.UsageError: an unknown command or option, a missing option value, too few or too many
            arguments, a value outside a choice.
    """
    ctx = click.Context(main, info_name="ragsft")
    cmd: click.Command = main
    args = [a[1:] if a.startswith("[") else a for a in argv]  # `[--out FILE]`: an optional part
    args = [a[:-1] if a.endswith("]") and not a.endswith("[]") and "[" not in a else a for a in args]
    while isinstance(cmd, click.Group):
        if not args:
            raise click.UsageError(f"{ctx.command_path}: a command is missing")
        _, sub, args = cmd.resolve_command(ctx, args)
        assert sub is not None
        ctx = click.Context(sub, info_name=sub.name, parent=ctx)
        cmd = sub
    values, extra, _ = cmd.make_parser(ctx).parse_args(args)  # arguments land in values too
    if extra and not cmd.allow_extra_args:
        raise click.UsageError(f"{ctx.command_path}: unexpected extra arguments {extra}")
    for p in cmd.params:
        if isinstance(p, click.Argument) and p.required and _missing(values.get(p.name or "")):
            raise click.UsageError(f"{ctx.command_path}: missing argument {p.human_readable_name}")
    for p in cmd.params:
        value = values.get(p.name or "")
        if isinstance(p.type, click.Choice) and value is not None:
            for v in value if isinstance(value, list | tuple) else [value]:
                if not PLACEHOLDER.match(str(v)):
                    p.type.convert(v, p, ctx)
    return cmd, values, extra


def check_materialize(values: dict[str, object]) -> None:
    """The selection resolves to one job's assets and the run config is valid for them."""
    import dagster as dg
    import orjson

    from ragsft_assets.cli.materialize import resolve_selection

    job, keys = resolve_selection(str(values["selection"]))
    if values.get("config_json"):
        config = orjson.loads(str(values["config_json"]))
        try:
            dg.validate_run_config(job.get_subset(asset_selection=set(keys)), config)
        except dg.DagsterInvalidConfigError as exc:
            raise AssertionError(
                f"run config {config} is not valid for {values['selection']}: {exc}"
            ) from None


def test_every_command_runs_here_or_says_why_not() -> None:
    commands = all_commands()
    assert len(commands) > 40, "the extractor found too few commands: is it still reading the docs?"
    run = set(RUN)
    unclassified = [
        f"{c.source}: {normalize(c.argv)}"
        for c in commands
        if normalize(c.argv) not in run and reason_not_runnable(normalize(c.argv)) is None
    ]
    assert not unclassified, (
        "documented commands that neither run in this test (RUN) nor say why they cannot"
        " (NOT_RUNNABLE):\n" + "\n".join(unclassified)
    )
    documented = {normalize(c.argv) for c in commands}
    stale = [c for c in RUN if c not in documented]
    assert not stale, f"RUN names commands no document shows any more: {stale}"


@pytest.mark.parametrize("cmd", [c for c in all_commands() if c.argv[0] == "ragsft"], ids=lambda c: c.source)
def test_ragsft_command_parses(cmd: DocCommand) -> None:
    try:
        command, values, _ = parse(list(cmd.argv[1:]))
    except click.UsageError as exc:
        pytest.fail(f"{cmd.source}: `{normalize(cmd.argv)}` does not parse: {exc.format_message()}")
    if command.name == "materialize":
        check_materialize(values)


def test_parse_fails_on_what_the_cli_does_not_take() -> None:
    for argv in (
        ["snapshots", "add", "sample.fr", "--nope"],  # no such option
        ["snapshots", "grow"],  # no such command
        ["verify"],  # a missing argument
        ["review", "sample", "--partition", "sample.fr", "--design", "odd"],  # not a choice
        ["materialize", "*abstracts", "--partition"],  # an option without its value
    ):
        with pytest.raises(click.UsageError):
            parse(argv)
    with pytest.raises(click.UsageError):
        check_materialize({"selection": "no_such_asset"})
    with pytest.raises(AssertionError):
        check_materialize(
            {
                "selection": "*long_context/release",
                "config_json": '{"ops": {"long_context__examples": {"config": {"splitz": []}}}}',
            }
        )


def placeholder_value(home: Path, token: str) -> str | None:
    """What stands for a placeholder once the commands before it ran: a corpus row id, the root digest."""
    if token == "ID":
        import pyarrow.parquet as pq

        return str(
            pq.read_table(home / "assets" / "sample.fr" / "abstracts" / "train.parquet").column("id")[0]
        )
    if token == "<SHA-256>":
        import orjson

        lines = (home / "release_digests.jsonl").read_bytes().splitlines()
        return str(orjson.loads(lines[-1])["digest"])
    return None


def test_documented_commands_run_on_the_bundled_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RUN's commands, in order, in a fresh folder whose home is the default ./.ragsft."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "ragsft_assets_tests").symlink_to(REPO / "ragsft_assets_tests")
    (work / "dagster.yaml").symlink_to(REPO / "dagster.yaml")  # the instance settings, as from the repo
    monkeypatch.chdir(work)
    monkeypatch.delenv("RAGSFT_HOME", raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(work / ".ragsft" / "dagster"))  # restored after the test
    runner = CliRunner()
    for text in RUN:
        argv = [placeholder_value(work / ".ragsft", a) or SUBSTITUTE.get(a, a) for a in shlex.split(text)[1:]]
        result = runner.invoke(main, argv, catch_exceptions=False)
        assert result.exit_code == 0, f"`{text}` exited {result.exit_code}:\n{result.output}"
        if argv[0] == "verify":
            assert result.output.splitlines()[-1].startswith("OK"), result.output
        if argv[0] == "explain":
            assert f"corpus row {argv[1]}" in result.output, result.output
    release = work / ".ragsft" / "releases" / "sample.fr"
    assert (release / "README.md").is_file() and (work / ".ragsft" / "catalog.duckdb").is_file()
    import datasets

    # releases.md's example, on the release just built (the demo's release holds `corpus` only)
    loaded = datasets.load_dataset(str(release), "corpus")
    assert sum(loaded.num_rows.values()) > 0
    listed = runner.invoke(main, ["sources", "list"]).output
    assert "narrativeqa.en" in listed and "hotpotqa.en" not in listed


LOAD_DATASET = re.compile(r"load_dataset\(\s*\"([^\"]+)\",\s*\"([^\"]+)\"\s*\)")


def test_every_loaded_config_is_one_the_project_publishes() -> None:
    """`load_dataset(FOLDER, CONFIG)` in the docs names a config a recipe builds by default."""
    import ragsft_assets.definitions  # noqa: F401 - registers every family's recipes
    from ragsft_assets import recipes

    published = set(recipes.names())
    found = [
        (path.name, m.group(2))
        for path in DOCS
        for m in LOAD_DATASET.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found, "no load_dataset call found: is the pattern still right?"
    for doc, config in found:
        assert config in published or re.fullmatch(r"[\w.-]+-(sft|full)", config), (doc, config)


def test_sources_add_help_lists_every_preset() -> None:
    from ragsft_assets.sources.read import PRESETS

    out = CliRunner().invoke(main, ["sources", "add", "--help"], terminal_width=400).output
    missing = [p for p in PRESETS if p not in out]
    assert not missing, f"`ragsft sources add --help` leaves out presets {missing}"


def test_every_relative_link_points_to_a_file() -> None:
    broken, seen = [], 0
    for path in [*DOCS, REPO / "deploy" / "README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            seen += 1
            if "://" not in target and not (path.parent / target).exists():
                broken.append(f"{path.relative_to(REPO)} -> {target}")
    assert seen > 20 and not broken, broken


def test_product_docs_name_no_issue() -> None:
    """The user documentation speaks of the product, not of the tracker that shaped it."""
    hits = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in [*DOCS, REPO / "deploy" / "README.md"]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"\bissues?\s+#?\d+|(?<![\w&])#\d{1,3}\b", line, flags=re.IGNORECASE)
    ]
    assert not hits, hits


# The README's copy of what `ragsft demo` prints at its end: the fenced block after this marker.
DEMO_MARKER = "<!-- the demo's closing summary -->"
MAX_DEMO_LINES = 80  # what a newcomer's terminal shows for the whole demo, at most


def readme_demo_block() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert DEMO_MARKER in text, f"README.md lost the marker {DEMO_MARKER!r} before the demo's summary"
    block = text.split(DEMO_MARKER, 1)[1].split("```", 2)[1]
    return [line for line in block.splitlines()[1:] if line.strip()]  # [0]: the fence's language


def demo_block_problems(readme: list[str], printed: list[str]) -> list[str]:
    """Where the README's copy of the demo's summary differs from what a run printed.

    The corpus figures and the draft slots do not depend on the model: they must be the run's, to
    the digit. What the 135M model writes may vary with the CPU's arithmetic (bf16 or fp32): of
    those lines the README must give the run's reasons, its most frequent one and its verdict on
    the release; a different count of them is not a difference.
    """
    problems: list[str] = []
    start = next((i for i, line in enumerate(printed) if line.startswith("funnel (")), None)
    if start is None:
        return ["the run printed no funnel"]
    ran = printed[start : start + len(readme)]
    if len(ran) != len(readme):
        return [f"the run printed {len(ran)} summary lines, the README shows {len(readme)}"]
    numbers = re.compile(r"\d[\d,]*")
    family, in_funnel = "", False
    for mine, theirs in zip(readme, ran, strict=True):
        if mine.startswith("funnel ("):
            in_funnel = True
        elif not mine.startswith("  "):
            in_funnel = False
        elif in_funnel and mine[2] != " ":
            family = mine.split()[0]  # a family's first line; its other segments follow, indented
        if mine.startswith("funnel (") or (in_funnel and family == "corpus"):
            exact = mine == theirs
        elif in_funnel:  # a model-written family: the same stages and reasons, the slots to the digit
            exact = numbers.sub("N", mine) == numbers.sub("N", theirs) and (
                numbers.findall(mine)[:1] == numbers.findall(theirs)[:1]
            )
        elif mine.startswith("why one was dropped"):
            exact = mine.split(": ", 1)[0] == theirs.split(": ", 1)[0]  # the id is the run's own
        else:  # the most frequent reason, the release's configs and why
            exact = numbers.sub("N", mine) == numbers.sub("N", theirs)
        if not exact:
            problems.append(f"README: {mine}\n   run: {theirs}")
    return problems


def test_demo_block_comparison_catches_a_wrong_readme() -> None:
    """The comparison itself: what the README says that no run printed is found."""
    printed = [
        "  bridge_pairs   0s  24 bridge pairs",
        "funnel (from the decision ledger):",
        "  corpus    137 records -> 116 abstracts (5 too_short)",
        "            216 links -> 189 link edges (27 enumeration)",
        "  multihop  72 draft slots -> 43 drafts (29 generation_missing) -> 0 past the checks (43 answer_not_in_b)",
        "most candidates were dropped by question_checks: answer_not_in_b (43)",
        "the release holds only the corpus config: no candidate got through (multihop at question_checks)",
        "  expected with a 135M model",
        "why one was dropped (question_checks, answer_not_in_b): ragsft explain abc --partition sample.fr",
    ]
    good = printed[1:]
    assert demo_block_problems(good, printed) == []
    other_cpu = [*good[:3], good[3].replace("43", "40").replace("29", "32"), *good[4:]]
    assert demo_block_problems(other_cpu, printed) == []  # the model's counts may differ
    for i, wrong in (
        (1, good[1].replace("116", "114")),  # a corpus figure
        (2, good[2].replace("189", "188")),  # a corpus figure on a segment's own line
        (3, good[3].replace("72 draft", "71 draft")),  # the slots
        (3, good[3].replace("generation_missing", "unreadable")),  # a reason the run never gave
        (4, good[4].replace("answer_not_in_b", "unreadable")),  # another most frequent reason
        (5, good[5].replace("only the corpus config", "only the default config")),
        (7, good[7].replace("(question_checks", "(question_drafts")),
    ):
        readme = [*good[:i], wrong, *good[i + 1 :]]
        assert demo_block_problems(readme, printed), wrong
    assert readme_demo_block()[0] == "funnel (from the decision ledger):"


@pytest.mark.integration
def test_readme_demo_figures_match_a_real_demo_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's demo figures are a real run's, and the run's console is a newcomer's: at most
    80 lines, no Dagster DEBUG event, a summary that names the reason that dropped the most."""
    from ragsft_assets_tests.demo_run import shared_demo_run

    run = shared_demo_run()
    printed = run.output.splitlines()
    assert len(printed) <= MAX_DEMO_LINES, f"the demo printed {len(printed)} lines:\n{run.output}"
    assert not [line for line in printed if " - DEBUG - " in line or "STEP_START" in line], run.output
    assert not [line for line in printed if "Attempted to load weight" in line or "FutureWarning" in line]
    top = next((line for line in printed if line.startswith("most candidates were dropped by ")), None)
    assert top is not None, run.output
    problems = demo_block_problems(readme_demo_block(), printed)
    assert not problems, "README.md's demo summary is not what the demo printed:\n" + "\n".join(problems)
    # the explain command it gives answers for that dropped candidate
    explain_line = next(line for line in printed if line.startswith("why one was dropped"))
    argv = shlex.split(explain_line.split(": ", 1)[1])[1:]
    monkeypatch.setenv("RAGSFT_HOME", str(run.home))
    out = CliRunner().invoke(main, argv)
    assert out.exit_code == 0 and "dropped at " in out.output, out.output
