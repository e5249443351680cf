"""Temporary files and folders named after the process that owns them, and the clean-up of dead ones.

A process killed with SIGKILL (an OOM kill, a closed laptop, an evicted pod) runs no ``finally``: its
staging folders and half-written temporary files stay where they were. Every temporary name the
project makes beside its outputs therefore carries its owner, ``<prefix><host>-<pid>-<start>-<rand>``
(``start``: the process's start in clock ticks since boot, ``/proc/<pid>/stat`` field 22, so a pid
reused by a later process, as in a container where the CLI is always pid 7, is not taken for the
owner). Never the wall-clock start time: psutil's ``create_time()`` is start ticks plus the current
boot time (``btime``), which moves whenever the wall clock is stepped (NTP, a VM paused and resumed,
a laptop resumed), and a live build's staging folder was once removed as a dead one's. ``host`` is the host name
followed by ``+`` and a short digest of the boot id and the pid namespace (``scope_id``): two
containers with the same host name (``--network host``) but separate pid namespaces, or a host
after a reboot, are different owners. The next writer of the same output removes the entries of
that prefix whose owner is gone **in this scope**; an entry made in another scope (another host, a
shared home) is left alone, since its process cannot be seen from here. A process that exists but
may not be inspected (``AccessDenied``) is alive.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

_HOST_CHARS = re.compile(r"[^A-Za-z0-9.-]")
# The owner's part of a name: host (may hold '-'), pid, start; the random part of tempfile holds no '-'.
_OWNER = re.compile(r"(?P<host>.+)-(?P<pid>\d+)-(?P<start>\d+)-(?P<rest>[^-]*)")


def boot_id() -> str:
    """This machine's boot id (Linux ``/proc/sys/kernel/random/boot_id``); "" where there is none."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """This process's pid namespace (``pid:[4026531836]``); "" where it cannot be read."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


@functools.cache
def scope_id() -> str:
    """8 hex digits naming where this process's pids mean something: boot id and pid namespace."""
    import hashlib

    return hashlib.sha256(f"{boot_id()}\n{pid_namespace()}".encode()).hexdigest()[:8]


def _host() -> str:
    return (_HOST_CHARS.sub("_", socket.gethostname()) or "host") + "+" + scope_id()


def start_ticks(pid: int) -> int | None:
    """The start of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22); None when unreadable.

    Ticks since boot do not move when the wall clock is stepped. Where there is no ``/proc`` (macOS)
    this is None, written as start 0: the pid alone then decides (a reused pid's leftovers wait for
    ``ragsft runs clean`` after it ends; a live owner is never taken for dead).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')': split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 of the line = the 20th after the name (state is field 3)
    except (IndexError, ValueError):
        return None


@functools.cache
def _own_tag(pid: int) -> str:
    return f"{_host()}-{pid}-{start_ticks(pid) or 0}-"


def owner_tag() -> str:
    """``<host>-<pid>-<start>-``: what this process puts after a prefix in the temporary names it makes."""
    return _own_tag(os.getpid())


def owned(prefix: str) -> str:
    """``prefix`` followed by this process's owner tag: the prefix to give ``tempfile.mkstemp``/``mkdtemp``."""
    return prefix + owner_tag()


@dataclass(frozen=True, slots=True)
class Owner:
    """The process named in a temporary entry's name."""

    host: str
    pid: int
    start: int

    def alive(self) -> bool:
        """Whether the owner still runs here: same scope, the pid alive, not a zombie, same start tick.

        ``host`` carries the boot id and pid namespace (:func:`scope_id`), so pid and start ticks are
        compared only where they mean the same process; this process's own entries are always alive.
        """
        if self.host != _host():
            return True  # another host's process: cannot be seen from here, so never taken for dead
        if f"{self.host}-{self.pid}-{self.start}-" == owner_tag():
            return True  # a process never removes its own entries, whatever its clock says
        try:
            proc = psutil.Process(self.pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        except psutil.AccessDenied:
            return True  # exists, someone else's: assume alive
        # start 0: the start could not be read when the name was made; the pid alone decides
        if self.start == 0:
            return True
        started = start_ticks(self.pid)
        return started is None or started == self.start  # unreadable now: assume alive


def owner_of(name: str, prefix: str) -> Owner | None:
    """The owner named in ``name`` after ``prefix``, or None when the name is not of that form."""
    if not name.startswith(prefix):
        return None
    m = _OWNER.fullmatch(name[len(prefix) :])
    if m is None:
        return None
    return Owner(m["host"], int(m["pid"]), int(m["start"]))


def stale_entries(parent: Path, prefix: str) -> list[Path]:
    """Entries of ``parent`` named ``prefix<owner>...`` whose owner process is gone on this host, sorted."""
    try:
        names = sorted(os.listdir(parent))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        owner = owner_of(name, prefix)
        if owner is not None and not owner.alive():
            out.append(parent / name)
    return out


def remove(path: Path) -> None:
    """Remove a file, a link or a folder tree (already gone is fine)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass


def remove_stale(parent: Path, prefix: str) -> list[Path]:
    """Remove what :func:`stale_entries` finds; returns the removed paths (each logged as a warning)."""
    removed = stale_entries(parent, prefix)
    for path in removed:
        remove(path)
        log.warning("removed %s, left by a killed process", path)
    return removed


@dataclass(frozen=True, slots=True)
class Stale:
    """A temporary entry of a dead process of this host, found by :func:`find_stale`.

    Attributes:
        path: The entry (a file or a folder).
        prefix: The part of its name before the owner tag (``.<name>.``, ``.<name>.build-``, ...).
    """

    path: Path
    prefix: str

    @property
    def set_aside(self) -> Path | None:
        """For a release set aside by a swap (``.<name>.old-``): the folder it was moved away from."""
        if self.prefix.startswith(".") and self.prefix.endswith(".old-"):
            return self.path.parent / self.prefix[1 : -len(".old-")]
        return None


def _stale_prefix(name: str) -> str | None:
    """The prefix of ``name`` before this host's owner tag, when the owner is dead; else None."""
    if not name.startswith("."):
        return None  # every temporary name the project makes is hidden
    tag = _host() + "-"
    at = name.find(tag, 1)
    while at != -1:
        prefix = name[:at]
        owner = owner_of(name, prefix) if prefix.endswith((".", "-")) else None
        if owner is not None and owner.host == _host():
            return None if owner.alive() else prefix
        at = name.find(tag, at + 1)
    return None


def find_stale(root: Path) -> list[Stale]:
    """Every owner-named temporary entry under ``root`` whose owner process is gone on this host.

    Looks at all depths (a stale folder is not entered: it goes whole); entries of other hosts and
    names that carry no owner are never returned. Sorted by path.
    """
    out = []
    for parent, dirs, files in os.walk(root):
        for name in sorted([*dirs, *files]):
            prefix = _stale_prefix(name)
            if prefix is not None:
                out.append(Stale(Path(parent) / name, prefix))
        dirs[:] = [d for d in dirs if _stale_prefix(d) is None]
    return sorted(out, key=lambda s: str(s.path))


def sibling_prefix(target: Path, kind: str) -> str:
    """The prefix of a temporary entry beside ``target``: ``.<name>.build-`` for a build's staging
    folder, ``.<name>.old-`` for a release a swap set aside (:attr:`Stale.set_aside` reads it back)."""
    return f".{target.name}.{kind}-"


def recover(target: Path) -> list[str]:
    """Clean up what killed builds of ``target`` left beside it; returns one line per thing done.

    Only entries whose owner process is gone on this host are touched: a staging folder
    (``.<name>.build-<owner>``) is removed; an old release set aside by a swap
    (``.<name>.old-<owner>``) is renamed back to ``target`` when ``target`` is missing (the build was
    killed between the two renames: the old release is whole, the new one never got its card and
    manifests), else removed.
    """
    done = []
    for old in stale_entries(target.parent, sibling_prefix(target, "old")):
        if not target.exists():
            os.replace(old, target)
            done.append(f"restored {target} from {old.name}, set aside by a build that was killed")
        else:
            remove(old)
            done.append(f"removed {old}, left by a build that was killed")
    for built in stale_entries(target.parent, sibling_prefix(target, "build")):
        remove(built)
        done.append(f"removed {built}, left by a build that was killed")
    for line in done:
        log.warning(line)
    return done


def sweep(root: Path, dry_run: bool = False) -> list[str]:
    """Remove every temporary entry that a dead process of this host left under ``root``.

    A release set aside by a swap killed between its two renames is put back when its folder is
    missing (:func:`recover`), else removed like the rest.

    Args:
        root: The folder to sweep (``ragsft runs clean`` gives the project home).
        dry_run: Only say what would be done.

    Returns:
        One line per entry: what was (or would be) done.
    """
    lines = []
    recovered: set[Path] = set()
    for stale in find_stale(root):
        target = stale.set_aside
        if dry_run:
            verb = "would restore" if target is not None and not target.exists() else "would remove"
            lines.append(f"{verb} {stale.path}" + (f" as {target}" if verb == "would restore" else ""))
        elif target is not None:
            if target not in recovered:
                recovered.add(target)
                lines += recover(target)
        elif stale.path.exists():  # a release's recover may have removed its staging folder already
            remove(stale.path)
            lines.append(f"removed {stale.path}, left by a killed process")
    return lines
