"""The eager SAC peer (tools/eager_sac_peer.py) learns, tunes alpha the right way, and its timer counts.

A peer that did not learn would make any speed ratio against it meaningless, so its math is checked
here: on one fixed synthetic batch the soft TD loss must fall, and alpha must move towards the
target entropy from both sides. Speed itself is measured by the tool, not checked here.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("eager_sac_peer", ROOT / "tools" / "eager_sac_peer.py")
peer_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peer_mod)

OBS, ACT, BATCH = peer_mod.HALF_CHEETAH_OBS, peer_mod.HALF_CHEETAH_ACT, 256


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_critic_loss_falls_and_alpha_falls_when_entropy_is_above_target() -> None:
    batch = peer_mod.random_batch(OBS, ACT, BATCH, "cpu", seed=1)
    peer = peer_mod.EagerSACPeer(OBS, ACT, "cpu", BATCH, seed=1)
    with torch.no_grad():
        loss_before = peer.critic_loss(batch).item()
        _, log_pi = peer.actor.sample(batch.obs)
    # precondition: the fresh policy (log-std near the middle of [-5, 2]) is more random than -act_dim
    assert -log_pi.mean().item() > peer.target_entropy
    for _ in range(200):
        peer.update(batch)
    with torch.no_grad():
        loss_after = peer.critic_loss(batch).item()
    assert math.isfinite(loss_after) and loss_after < 0.25 * loss_before, (loss_before, loss_after)
    assert peer.critic_updates == peer.actor_updates == 200
    assert peer.alpha.item() < 0.9  # entropy above target: alpha shrinks (200 Adam steps of ~1e-3 in log alpha)
    assert set(peer.logged) == {"qf_loss", "actor_loss", "alpha_loss", "alpha"}  # read at update 100 and 200
    assert peer.logged["alpha"] == pytest.approx(peer.alpha.item())


def test_alpha_grows_when_the_target_entropy_is_out_of_reach() -> None:
    batch = peer_mod.random_batch(OBS, ACT, BATCH, "cpu", seed=2)
    peer = peer_mod.EagerSACPeer(OBS, ACT, "cpu", BATCH, seed=2)
    # a tanh-squashed policy on [-1, 1]^6 has entropy at most 6 log 2 ~ 4.16 (uniform): 5 is never reached
    peer.target_entropy = 5.0
    for _ in range(50):
        peer.actor_update(batch)
    assert peer.alpha.item() > 1.02
    assert peer.critic_updates == 0  # actor_update alone touches neither Q step nor targets


def test_critic_update_moves_targets_by_polyak_tau() -> None:
    batch = peer_mod.random_batch(OBS, ACT, 32, "cpu", seed=3)
    peer = peer_mod.EagerSACPeer(OBS, ACT, "cpu", 32, seed=3, hidden=(16, 16))
    target_before = [p.detach().clone() for p in peer.qf1_target.parameters()]
    peer.critic_update(batch)
    for before, online, target in zip(target_before, peer.qf1.parameters(), peer.qf1_target.parameters()):
        torch.testing.assert_close(target, before + peer.tau * (online.detach() - before))
    assert any(not torch.equal(b, t) for b, t in zip(target_before, peer.qf1_target.parameters()))


def test_measure_returns_the_rate_of_calls() -> None:
    batch = peer_mod.random_batch(4, 2, 8, "cpu")
    calls = []
    rate = peer_mod.measure(lambda b: calls.append(b), batch, 0.05, "cpu", warmup=3)
    assert rate > 0
    timed = len(calls) - 3
    assert timed >= 1 and timed / rate >= 0.05  # timed calls over the rate is the elapsed time, >= the ask


def test_command_line_prints_both_rates(tmp_path: Path) -> None:
    out = tmp_path / "peer.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "eager_sac_peer.py"), "--device", "cpu",
                           "--batch", "32", "--seconds", "0.2", "--threads", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "critic updates/s" in proc.stdout and "full updates/s" in proc.stdout
    figures = json.loads(out.read_text())
    assert figures["critic_updates_per_s"] > 0 and figures["full_updates_per_s"] > 0
    assert figures["critic_frames_per_s"] == pytest.approx(32 * figures["critic_updates_per_s"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_peer_runs_and_learns_on_cuda() -> None:
    batch = peer_mod.random_batch(OBS, ACT, BATCH, "cuda", seed=1)
    peer = peer_mod.EagerSACPeer(OBS, ACT, "cuda", BATCH, seed=1)
    with torch.no_grad():
        loss_before = peer.critic_loss(batch).item()
    assert peer_mod.measure(peer.update, batch, 0.5, "cuda") > 0
    with torch.no_grad():
        assert peer.critic_loss(batch).item() < 0.5 * loss_before
