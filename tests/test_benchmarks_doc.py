"""BENCHMARKS.md opens with its headline table, and every command that table names can be run.

The headline table is what a user reads first: one row per figure, ours against the named peer,
with the date, the machine and the command that measured it. A command whose script was renamed or
whose flag was dropped would send a reader to something that no longer runs, so each command is
checked against the tool's own ``--help`` (one subprocess per tool, cached). No benchmark runs here.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

import pytest
from tool_help import accepts

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "BENCHMARKS.md"
README = REPO / "README.md"

HEADLINE_COLUMNS = ["figure", "ours", "peer", "ratio", "date", "machine", "command"]
HEADLINE_HEADING = "## Headline figures"
NOT_MEASURED = "not measured yet"
# What the headline must cover (issue 19): a keyword per figure, matched in the figure column.
REQUIRED_FIGURES = {
    "replay vs cpprb/TorchRL": ("Replay",),
    "ring vs multiprocessing.Queue": ("Ring", "Queue"),
    "ring vs memcpy": ("Ring", "memcpy"),
    "learning vs SB3 on Pendulum-v1": ("SB3", "Pendulum-v1"),
    "learning vs SB3 on HalfCheetah-v5": ("SB3", "HalfCheetah-v5"),
    "learning vs SBX on Pendulum-v1": ("SBX", "Pendulum-v1"),
    "learning vs SBX on HalfCheetah-v5": ("SBX", "HalfCheetah-v5"),
    "learner rate": ("Critic-learner",),
    "mixed precision": ("Mixed precision",),
    "autotune vs grid": ("Autotune", "grid"),
    "GPU": ("GPU",),
}


def _split_row(line: str) -> list[str]:
    """Cells of one markdown table row; a '|' inside a `code span` does not split."""
    cells, cell, in_code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
    cells.append(cell.strip())
    return cells


def _first_table(lines: list[str]) -> tuple[int, list[str], list[list[str]]]:
    """(line index of the header, header cells, body rows) of the first table in ``lines``."""
    for i in range(len(lines) - 1):
        if lines[i].startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            rows = []
            for line in lines[i + 2:]:
                if not line.startswith("|"):
                    break
                rows.append(_split_row(line))
            return i, _split_row(lines[i]), rows
    raise AssertionError("BENCHMARKS.md has no table")


@functools.lru_cache(maxsize=1)
def _headline() -> tuple[int, list[str], list[list[str]]]:
    return _first_table(BENCHMARKS.read_text().splitlines())


def _commands(cell: str) -> list[str]:
    return [c for c in re.findall(r"`([^`]+)`", cell) if c.startswith("python ")]


def _all_commands() -> list[str]:
    _, header, rows = _headline()
    col = header.index("command") if "command" in header else -1
    return sorted({cmd for row in rows for cmd in _commands(row[col])})


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_the_file_opens_with_the_headline_table():
    lines = BENCHMARKS.read_text().splitlines()
    start, header, rows = _headline()
    assert lines[0] == "# Benchmarks"
    assert header == HEADLINE_COLUMNS
    assert rows, "the headline table has no rows"
    headings_before = [line for line in lines[:start] if line.startswith("#")]
    assert headings_before == ["# Benchmarks", HEADLINE_HEADING], headings_before
    assert "## History" in lines and lines.index("## History") > start + len(rows)


def test_every_row_has_its_cells_a_date_a_machine_and_a_command():
    _, header, rows = _headline()
    for row in rows:
        assert len(row) == len(header), f"row with {len(row)} cells: {row[0]!r}"
        cell = dict(zip(header, row))
        measured = re.fullmatch(r"\d{4}-\d{2}-\d{2}", cell["date"]) is not None
        if not measured:
            # An unmeasured figure says so in the date and in our column; it must not carry a number.
            assert cell["date"] == NOT_MEASURED, f"{cell['figure']!r}: date {cell['date']!r}"
            assert "not measured" in cell["ours"], cell["figure"]
        assert cell["machine"] and cell["machine"] != "-", f"{cell['figure']!r} names no machine"
        assert _commands(cell["command"]), f"{cell['figure']!r} names no `python ...` command"


def test_the_headline_covers_every_figure_the_issue_asks_for():
    _, header, rows = _headline()
    figures = [row[header.index("figure")] for row in rows]
    missing = [name for name, words in REQUIRED_FIGURES.items()
               if not any(all(w in f for w in words) for f in figures)]
    assert not missing, f"no headline row for: {missing}"


@pytest.mark.parametrize("command", _all_commands())
def test_every_command_names_an_existing_tool_and_flags_it_accepts(command: str):
    argv = shlex.split(command)
    assert argv[0] == "python" and len(argv) >= 2, command
    script = argv[1]
    assert script.startswith("tools/") and (REPO / script).is_file(), f"no such tool: {script}"
    for token in argv[2:]:
        if token.startswith("--"):
            assert accepts(script, token), f"`{script}` does not accept {token} (not in its --help)"


def test_internal_links_point_at_headings():
    text = BENCHMARKS.read_text()
    anchors = {_slug(line) for line in text.splitlines() if line.startswith("#")}
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert links, "BENCHMARKS.md links none of its sections"
    assert not [a for a in links if a not in anchors], [a for a in links if a not in anchors]


def test_readme_links_the_headline_table_and_shows_only_pictures_that_exist():
    text = README.read_text()
    assert f"BENCHMARKS.md#{_slug(HEADLINE_HEADING)}" in text
    for path in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", text):
        assert (REPO / path).is_file(), f"README shows a picture that is not in the repository: {path}"
