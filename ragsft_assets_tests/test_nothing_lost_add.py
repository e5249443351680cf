"""Issue 34: ``snapshots add`` and ``sources add`` never delete data before the new copy is whole.

Adding from the key's own folder (deploy/README.md has users copy dumps there) registers it in
place; replacing a key's data needs ``--replace``; a folder with no dump is refused at ``add``; a
copy that fails half-way leaves the old data as it was and no staging folder behind.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragsft_assets.cli import main
from ragsft_assets.cli.snapshots import install_snapshot, sample_folder
from ragsft_assets.corpus.snapshot_layout import ADDED_MANIFEST

DATA = Path(__file__).parent / "data" / "hotpotqa" / "hotpotqa_train_distractor_70.json"
KEY = "20250301.fr"


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _partitions(home: Path, name: str) -> list[str]:
    from ragsft_assets.cli.instance import instance

    return list(instance(home).get_dynamic_partitions(name))


def _dump_folder(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "frwiki_namespace_0_0.jsonl").write_text(text, encoding="utf-8")
    return folder


def test_snapshot_added_from_its_own_folder_is_registered_in_place(tmp_home: Path) -> None:
    own = tmp_home / "snapshots" / KEY
    shutil.copytree(sample_folder(), own)  # deploy/README.md: copy the dumps there
    before = _files(own)
    out = _cli("snapshots", "add", KEY, "--from", str(own))
    assert out.exit_code == 0, out.output
    assert "1 file(s)" in out.output and f"partition {KEY} added" in out.output
    after = _files(own)
    assert {n: b for n, b in after.items() if n != ADDED_MANIFEST} == before  # every byte kept
    manifest = json.loads((own / ADDED_MANIFEST).read_text(encoding="utf-8"))
    assert manifest["files"] == {n: len(b) for n, b in before.items()}
    assert _partitions(tmp_home, "snapshot") == [KEY]
    # a dump file of the folder names the folder too
    again = _cli("snapshots", "add", KEY, "--from", str(own / "frwiki_namespace_0_0.jsonl"))
    assert again.exit_code == 0 and _files(own) == after, again.output


def test_replacing_a_snapshot_needs_replace_and_never_merges(tmp_home: Path, tmp_path: Path) -> None:
    first = _dump_folder(tmp_path, "first", '{"a": 1}\n')
    second = tmp_path / "second"
    second.mkdir()
    (second / "other_0.jsonl").write_text('{"b": 2}\n', encoding="utf-8")
    assert _cli("snapshots", "add", KEY, "--from", str(first)).exit_code == 0
    target = tmp_home / "snapshots" / KEY
    kept = _files(target)
    refused = _cli("snapshots", "add", KEY, "--from", str(second))
    assert refused.exit_code != 0
    assert "already has data" in refused.output and "--replace" in refused.output
    assert _files(target) == kept  # nothing changed, nothing merged
    same = _cli("snapshots", "add", KEY, "--from", str(first))  # the same files again: nothing to replace
    assert same.exit_code == 0 and _files(target) == kept, same.output
    replaced = _cli("snapshots", "add", KEY, "--from", str(second), "--replace")
    assert replaced.exit_code == 0, replaced.output
    assert sorted(_files(target)) == sorted([ADDED_MANIFEST, "other_0.jsonl"])  # the old dump is gone
    assert [p.name for p in target.parent.iterdir()] == [KEY]  # no staging or set-aside folder left


def test_a_copy_that_fails_half_way_keeps_the_old_snapshot(
    tmp_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_snapshot(KEY, _dump_folder(tmp_path, "old", '{"old": 1}\n'))
    target = tmp_home / "snapshots" / KEY
    kept = _files(target)
    new = _dump_folder(tmp_path, "new", '{"new": 1}\n')
    (new / "frwiki_namespace_0_1.jsonl").write_text('{"new": 2}\n', encoding="utf-8")
    copies = []
    real = shutil.copy2

    def fail_second(src, dst, **kw):  # noqa: ANN001, ANN003, ANN202 - shutil.copy2's signature
        copies.append(src)
        if len(copies) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dst, **kw)

    monkeypatch.setattr(shutil, "copy2", fail_second)
    with pytest.raises(OSError, match="No space left"):
        install_snapshot(KEY, new, replace=True)
    assert _files(target) == kept
    assert [p.name for p in target.parent.iterdir()] == [KEY]


@pytest.mark.parametrize("kind", ["not a dump", "empty folder", "empty dump"])
def test_a_folder_with_no_dump_is_refused_at_add(tmp_home: Path, tmp_path: Path, kind: str) -> None:
    if kind == "not a dump":  # `--from /etc/hostname`
        source = tmp_path / "hostname"
        source.write_text("box\n", encoding="utf-8")
    else:
        source = tmp_path / "dumps"
        source.mkdir()
        if kind == "empty dump":
            (source / "frwiki_namespace_0_0.jsonl").write_bytes(b"")
    out = _cli("snapshots", "add", KEY, "--from", str(source))
    assert out.exit_code != 0
    assert {"not a dump": "is not a dump file", "empty folder": "no dump file", "empty dump": "empty dump"}[
        kind
    ] in out.output
    assert "Traceback" not in out.output
    assert not (tmp_home / "snapshots" / KEY).exists()
    assert not (tmp_home / "dagster_home").exists() or _partitions(tmp_home, "snapshot") == []


def test_source_added_from_its_own_folder_is_registered_in_place(tmp_home: Path, tmp_path: Path) -> None:
    own = tmp_home / "sources" / "hotpotqa.en"
    own.mkdir(parents=True)
    shutil.copy2(DATA, own / DATA.name)
    out = _cli("sources", "add", "hotpotqa.en", "--from", str(own))
    assert out.exit_code == 0 and "70 question(s)" in out.output, out.output
    assert (own / DATA.name).read_bytes() == DATA.read_bytes() and (own / "source.json").is_file()
    listed = _cli("sources", "list")
    assert "hotpotqa.en\tfolder, partition\tlocal; preset hotpotqa; 70 rows in 1 file(s)" in listed.output


def test_replacing_a_source_needs_replace_and_a_failed_copy_keeps_the_old(
    tmp_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = json.loads(DATA.read_text(encoding="utf-8"))
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps(r) + "\n" for r in rows[:5]), encoding="utf-8")
    assert _cli("sources", "add", "hotpotqa.en", "--from", str(DATA)).exit_code == 0
    target = tmp_home / "sources" / "hotpotqa.en"
    kept = _files(target)
    assert _cli("sources", "add", "hotpotqa.en", "--from", str(DATA)).exit_code == 0  # the same again
    refused = _cli("sources", "add", "hotpotqa.en", "--from", str(small))
    assert refused.exit_code != 0 and "--replace" in refused.output and _files(target) == kept

    def no_space(src, dst, **kw):  # noqa: ANN001, ANN003, ANN202 - shutil.copy2's signature
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(shutil, "copy2", no_space)
        with pytest.raises(OSError, match="No space left"):
            _cli("sources", "add", "hotpotqa.en", "--from", str(small), "--replace")
    assert _files(target) == kept and [p.name for p in target.parent.iterdir()] == ["hotpotqa.en"]
    replaced = _cli("sources", "add", "hotpotqa.en", "--from", str(small), "--replace")
    assert replaced.exit_code == 0 and "5 question(s)" in replaced.output, replaced.output
    assert sorted(_files(target)) == ["small.jsonl", "source.json"]


@pytest.mark.parametrize("command", ["snapshots", "sources"])
@pytest.mark.parametrize("key", ["x.fr\n", "a" * 297 + ".fr"])
def test_keys_with_a_final_newline_or_too_long_are_refused(
    tmp_home: Path, tmp_path: Path, command: str, key: str
) -> None:
    source = str(_dump_folder(tmp_path, "dumps", '{"a": 1}\n')) if command == "snapshots" else str(DATA)
    out = CliRunner().invoke(main, [command, "add", key, "--from", source])
    assert out.exit_code != 0 and not isinstance(out.exception, OSError), out.output
    assert "invalid" in out.output and ("characters at most" in out.output or "\\n" in out.output)
    assert not (tmp_home / command).exists() or list((tmp_home / command).iterdir()) == []


def test_every_key_check_uses_fullmatch() -> None:
    from ragsft_assets.corpus.snapshot_layout import validate_snapshot_key
    from ragsft_assets.defs.partitions import validate_source_key
    from ragsft_assets.recall.registry import check_key

    for check, good in (
        (validate_snapshot_key, "sample.fr"),
        (validate_source_key, "hotpotqa.en"),
        (check_key, "qwen3-4b"),
    ):
        assert check(good) == good
        with pytest.raises(ValueError, match="invalid|use lowercase"):
            check(good + "\n")


def test_the_same_bytes_again_need_no_replace_and_the_bundled_sample_is_refreshed(
    tmp_home: Path, tmp_path: Path
) -> None:
    first = _dump_folder(tmp_path, "first", '{"a": 1}\n')
    install_snapshot(KEY, first)
    copy = tmp_path / "copy"
    shutil.copytree(first, copy, copy_function=shutil.copy)  # same bytes, other times
    assert install_snapshot(KEY, copy) == tmp_home / "snapshots" / KEY
    # the bundled sample is the project's data: a changed copy of it is put back without --replace
    assert _cli("snapshots", "add", "sample.fr", "--sample").exit_code == 0
    installed = tmp_home / "snapshots" / "sample.fr" / "snapshot.json"
    installed.write_text("{}\n", encoding="utf-8")
    again = _cli("snapshots", "add", "sample.fr", "--sample")
    assert again.exit_code == 0, again.output
    assert installed.read_bytes() == (sample_folder() / "snapshot.json").read_bytes()
