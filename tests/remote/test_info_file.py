"""remote_samplers.json's writer: the rate window, the throttle, and a failed write that leaves nothing."""

from __future__ import annotations

from pathlib import Path

from spreeze_like.remote.info_file import (
    INFO_EVERY_S,
    RATE_WINDOW_S,
    REMOTE_INFO_FILE,
    RemoteInfoFile,
    read_remote_info,
)


def _info(state: str = "running", rate: float = 0.0) -> dict:
    return {"ray_address": "127.0.0.1:6400",
            "samplers": {"sampler-1": {"state": state, "pid": 7, "steps_per_s": rate, "policy_lag": 0.5}}}


def test_rate_is_taken_over_a_whole_window() -> None:
    f = RemoteInfoFile(None)
    assert f.steps_per_s("sampler-1", 0, now=10.0) == 0.0  # the window opens
    assert f.steps_per_s("sampler-1", 500, now=10.0 + RATE_WINDOW_S / 2) == 0.0  # too short: no figure yet
    assert f.steps_per_s("sampler-1", 1000, now=10.0 + RATE_WINDOW_S) == 1000 / RATE_WINDOW_S
    # the figure holds until the next window closes, and each role has its own
    assert f.steps_per_s("sampler-1", 1100, now=10.5 + RATE_WINDOW_S) == 1000 / RATE_WINDOW_S
    assert f.steps_per_s("sampler-2", 50, now=10.5 + RATE_WINDOW_S) == 0.0


def test_rates_alone_wait_for_the_period_a_change_does_not(tmp_path: Path) -> None:
    f = RemoteInfoFile(tmp_path)
    f.write(_info(rate=1.0), now=0.0)
    assert read_remote_info(tmp_path)["samplers"]["sampler-1"]["steps_per_s"] == 1.0
    f.write(_info(rate=2.0), now=INFO_EVERY_S / 2)  # only a rate changed, within the period: not written
    assert read_remote_info(tmp_path)["samplers"]["sampler-1"]["steps_per_s"] == 1.0
    f.write(_info(rate=3.0), now=INFO_EVERY_S * 0.6, force=True)
    assert read_remote_info(tmp_path)["samplers"]["sampler-1"]["steps_per_s"] == 3.0
    f.write(_info(state="restarting", rate=3.0), now=INFO_EVERY_S * 0.7)  # a state change: written at once
    assert read_remote_info(tmp_path)["samplers"]["sampler-1"]["state"] == "restarting"
    f.write(_info(state="restarting", rate=4.0), now=INFO_EVERY_S * 1.8)  # the period has passed
    assert read_remote_info(tmp_path)["samplers"]["sampler-1"]["steps_per_s"] == 4.0


def test_a_failed_write_leaves_the_last_file_and_no_tmp(tmp_path: Path) -> None:
    f = RemoteInfoFile(tmp_path)
    f.write(_info(), now=0.0)
    (tmp_path / REMOTE_INFO_FILE).unlink()
    (tmp_path / REMOTE_INFO_FILE).mkdir()  # os.replace onto a folder fails, as a full disk's write would
    f.write(_info(state="done"), now=5.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [REMOTE_INFO_FILE]
    assert read_remote_info(tmp_path) is None  # a folder is not a file: the reader says None, not an error
