"""tools/soak.py's transition accounting on made-up final status files (no run): the check must fail when a
transition is missing, also across a resume that loaded the saved replay (--save-replay)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[2] / "tools" / "soak.py"
spec = importlib.util.spec_from_file_location("soak_tool", SOAK)
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)

FLAGS = {"envs": 1, "buffer": 1_000_000, "save_replay": True}


def status(emitted: int, inserted: int, size: int, restarts: int = 0) -> dict:
    counters = {"sampler-0": {"env_steps": emitted, "nonfinite_dropped": 0},
                "replay": {"inserted": inserted, "size": size}}
    return {"env_steps": emitted, "counters": counters, "roles": {"sampler-0": {"restarts": restarts}}}


def test_a_first_session_holds_what_it_inserted():
    assert soak.check_session(status(1000, 990, 990), FLAGS)["ok_ack"]
    assert not soak.check_session(status(1000, 990, 989), FLAGS)["ok_ack"]  # a row lost from replay


@pytest.mark.parametrize(("carried", "size", "ok"), [(990, 1490, True), (990, 1489, False), (0, 500, True),
                                                     (0, 1490, False)])
def test_a_resumed_session_also_holds_the_rows_it_loaded(carried, size, ok):
    assert soak.check_session(status(510, 500, size), FLAGS, carried)["ok_ack"] is ok


def test_the_loaded_line_is_read_from_the_log():
    text = "[spreeze] x\n[spreeze] replay: 84,132 transitions loaded from replay_0000084170 (saved with this checkpoint)\n"
    assert [int(n.replace(",", "")) for n in soak.LOADED.findall(text)] == [84132]
