"""The one import point of the compiled core ``spreeze_like._native``.

There is no pure-Python fallback on purpose: a trainer that silently ran a slow sum tree
or an unordered ring would be wrong or slow without telling anyone. If the extension is
missing (a source checkout that was never installed, or a stale build after a C++ edit),
the import fails with the command that rebuilds it.
"""

from __future__ import annotations

REBUILD_HINT = (
    "the compiled module spreeze_like._native is missing or stale; rebuild it from the "
    "project root with:  pip install -e .   (needs a C++17 compiler and CMake >= 3.15)"
)

try:
    from spreeze_like import _native  # type: ignore[attr-defined]
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(REBUILD_HINT) from exc

__all__ = ["REBUILD_HINT", "_native"]
