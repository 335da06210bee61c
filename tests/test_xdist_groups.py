"""The README's test command keeps a module's tests on one pytest-xdist worker (tests/conftest.py's groups).

Grouping failed silently before 2026-12-03: conftest's hook looked at the ``dist`` option, which xdist sets to
"no" in its workers, so it never added a group (and it ran after xdist's hook that reads the groups); and from
pytest 9.2 xdist's ``--dist loadgroup`` no longer
renames the node ids it schedules by (pytest-xdist issue 1386), so groups are ignored even where they are added.
Either way every test was a unit of its own: a module's fixtures were made on both workers, and two Ray clusters
ran at once. The group shows in the node id (``...::test@tests/test_xdist_groups.py``)."""

from __future__ import annotations

import pytest


def test_this_module_is_one_group_under_dist_loadgroup(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("checks the README's `-n 2 --dist loadgroup` run; this one is not under xdist's loadgroup")
    assert request.node.nodeid.endswith("@tests/test_xdist_groups.py"), request.node.nodeid
