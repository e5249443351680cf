"""What a release build left out, said in one run-log line per asset.

The build notes every empty split of every config (``release.stream``): on a run where no question
survives, 24 near-identical lines for six configs, which filled the run's log in the UI. The run
log says them once, condensed the card's way (``card_notes.condense_notes``: one part per cause of
skipped configs, one per shipped config with empty splits); the asset's ``notes`` metadata keeps
the full list.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragsft_assets.release.card_notes import condense_notes


def notes_line(notes: Sequence[str]) -> str | None:
    """One line for a build's ``notes`` (how many, then each condensed part), None without a note."""
    if not notes:
        return None
    return f"left out of the release ({len(notes)} notes): " + "; ".join(condense_notes(notes))
