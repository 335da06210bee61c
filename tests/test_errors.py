"""``errors.first_line``: the one place that turns an exception into a line for a one-line error."""

from __future__ import annotations

import pytest

from spreeze_like.errors import first_line


class _Silent(Exception):
    """An exception raised with no message."""


def test_the_first_line_of_a_long_message():
    exc = RuntimeError("  cannot reach the head\n  at node 10.0.0.2\n  (more)  ")
    assert first_line(exc) == "cannot reach the head"
    assert first_line(exc, named=True) == "RuntimeError: cannot reach the head"


@pytest.mark.parametrize("named", [False, True])
def test_no_message_gives_the_type(named: bool):
    assert first_line(_Silent(), named=named) == "_Silent"
    assert first_line(_Silent("   \n  "), 10, named) == "_Silent"


def test_a_limit_cuts_with_an_ellipsis_and_keeps_short_lines():
    exc = ValueError("x" * 50)
    assert first_line(exc, 20) == "x" * 17 + "..."
    assert len(first_line(exc, 20, named=True)) == 20 and first_line(exc, 20, named=True).startswith("ValueError: ")
    assert first_line(ValueError("short"), 20) == "short"
    assert first_line(ValueError("x" * 20), 20) == "x" * 20  # exactly the limit: uncut
