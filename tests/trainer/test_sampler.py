"""SamplerWorker: true final observation on truncation, bootstrap flags, NaN drops, warm-up, weights; where
observations enter (sampler and evaluator), one that does not match the declared Box is refused (audit finding 11)."""

from __future__ import annotations

import numpy as np
import pytest

from spreeze_like.algos import make_policy
from spreeze_like.algos.base import AlgoSpec
from spreeze_like.algos.networks import get_flat
from spreeze_like.errors import EnvError
from spreeze_like.metrics import stats_schema
from spreeze_like.roles.evaluator import Evaluator
from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
from spreeze_like.roles.sampler import SamplerWorker, random_steps_per_sampler
from spreeze_like.transition import TransitionLayout

TINY = "trainer.tiny_envs:"


class ListSink:
    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []

    def write(self, rows: np.ndarray) -> None:
        self.rows.append(rows.copy())  # the sampler reuses its buffer

    def all(self) -> np.ndarray:
        return np.concatenate(self.rows)


def make_sampler(env: str, n_envs: int = 1, random_steps: int = 10**9, algo: str = "sac"):
    spec = AlgoSpec(algo=algo, obs_dim=2, act_dim=1, hidden_sizes=(8,))
    sink, board, stats = ListSink(), LocalBoard(), LocalStatsBlock(stats_schema(1))
    worker = SamplerWorker(TINY + env, spec, 0, n_envs, random_steps, sink, board, stats.role("sampler-0"))
    return worker, sink, board, stats.role("sampler-0"), TransitionLayout(2, 1)


def test_truncation_keeps_true_final_obs_and_does_not_terminate():
    worker, sink, _, stats, layout = make_sampler("TinyWalk-v0")  # time limit 5, never terminates
    for _ in range(7):
        worker.step()
    c = layout.unpack(sink.all())
    np.testing.assert_array_equal(c["obs"][:, 0], [0, 1, 2, 3, 4, 0, 1])
    np.testing.assert_array_equal(c["next_obs"][:, 0], [1, 2, 3, 4, 5, 1, 2])  # 5: the final obs, not a reset
    np.testing.assert_array_equal(c["next_obs"][4], [5, 15])
    np.testing.assert_array_equal(c["terminated"], np.zeros(7))
    np.testing.assert_array_equal(c["truncated"], [0, 0, 0, 0, 1, 0, 0])
    assert stats.get("episodes") == 1 and stats.get("env_steps") == 7
    assert stats.get("episodic_length.sum") == 5
    # reward = the action the env received, in its own bounds [-2, 2]; stored actions are in [-1, 1]
    np.testing.assert_allclose(c["reward"], 2.0 * c["action"][:, 0], rtol=1e-5)
    assert stats.get("episodic_return.sum") == pytest.approx(float(c["reward"][:5].sum()), rel=1e-5)
    assert np.all(np.abs(c["action"]) <= 1.0)


def test_termination_sets_terminated_only():
    worker, sink, _, _, layout = make_sampler("TinyTerminate-v0")  # terminates at t == 3
    for _ in range(4):
        worker.step()
    c = layout.unpack(sink.all())
    np.testing.assert_array_equal(c["terminated"], [0, 0, 1, 0])
    np.testing.assert_array_equal(c["truncated"], [0, 0, 0, 0])
    np.testing.assert_array_equal(c["next_obs"][2], [3, 13])
    np.testing.assert_array_equal(c["obs"][3], [0, 10])


def test_non_finite_transition_is_dropped_counted_and_env_reset():
    worker, sink, _, stats, layout = make_sampler("TinyNaN-v0")  # obs at t == 2 is NaN
    for _ in range(3):
        worker.step()
    c = layout.unpack(sink.all())
    assert stats.get("nonfinite_dropped") == 1 and stats.get("env_steps") == 3
    assert np.isfinite(sink.all()).all()
    np.testing.assert_array_equal(c["obs"][:, 0], [0, 0])  # step 2 (1 -> NaN) dropped, env reset to 0
    assert stats.get("episodes") == 0  # a broken episode is not reported as a return


def test_several_envs_step_together():
    worker, sink, _, stats, layout = make_sampler("TinyWalk-v0", n_envs=3)
    for _ in range(5):
        assert worker.step() == 3
    c = layout.unpack(sink.all())
    assert len(c["obs"]) == 15 and stats.get("episodes") == 3
    np.testing.assert_array_equal(c["truncated"][-3:], [1, 1, 1])


def test_random_until_warmup_then_policy_with_newest_weights():
    worker, sink, board, stats, layout = make_sampler("TinyWalk-v0", random_steps=3, algo="td3")
    worker.spec = worker.spec.__class__(**{**worker.spec.__dict__, "exploration_noise": 0.0})
    policy = make_policy(worker.spec)
    for _ in range(3):
        worker.step()
    assert worker.version == 0  # nothing published: random actions
    board.publish(get_flat([policy]))
    worker.step()
    assert worker.version == 1 and stats.get("policy_version") == 1
    c = layout.unpack(sink.all())
    import torch

    with torch.no_grad():
        expected = policy(torch.as_tensor(c["obs"][3:4])).numpy()
    np.testing.assert_allclose(c["action"][3:4], expected, rtol=1e-6)  # deterministic with zero noise
    board.publish(get_flat([policy]))
    board.publish(get_flat([policy]))
    worker.step()
    assert worker.version == 3 and stats.get("policy_lag.count") == 2 and stats.get("policy_lag.sum") == 0


def test_warmup_shares_add_up():
    assert random_steps_per_sampler(1000, 3) * 3 >= 1000
    assert random_steps_per_sampler(0, 4) == 0


# --- audit finding 11 ---------------------------------------------------------------------------------------------
def test_finding11_wrong_observation_shape_from_step_is_refused_not_broadcast():
    """At t == 2 TinyObsShape returns shape (1,) for its (2,) Box: numpy would broadcast [2] into the row [2, 2]."""
    worker, sink, _, stats, _ = make_sampler("TinyObsShape-v0", n_envs=2)
    worker.step()
    with pytest.raises(EnvError, match=r"observation of shape \(1,\) and dtype float32 from step\(\).*\(2,\)") as info:
        worker.step()
    assert "\n" not in str(info.value)
    assert len(sink.rows) == 1 and stats.get("env_steps") == 2  # nothing of the bad step reached the sink


def test_finding11_complex_observations_are_refused():
    worker, sink, _, _, _ = make_sampler("TinyObsComplex-v0")
    with pytest.raises(EnvError, match="dtype complex64 from step.*real numbers"):
        worker.step()
    assert sink.rows == []


def test_finding11_float64_observations_in_a_float32_box_are_accepted_unchanged():
    """Not refused, by decision: every stored observation is float32 whatever the env declares, so a float64
    observation in a float32 Box stores exactly the rows its float32 twin (TinyWalk) stores."""
    rows = []
    for env in ("TinyObsFloat64-v0", "TinyWalk-v0"):
        worker, sink, _, _, _ = make_sampler(env, n_envs=2)
        for _ in range(7):
            worker.step()
        rows.append(sink.all())
    np.testing.assert_array_equal(rows[0], rows[1])
    assert len(rows[0]) == 14


def test_finding11_evaluator_refuses_a_wrong_observation_shape():
    spec = AlgoSpec(algo="sac", obs_dim=2, act_dim=1, hidden_sizes=(8,))
    stats = LocalStatsBlock(stats_schema(1)).role("evaluator")
    evaluator = Evaluator(TINY + "TinyObsShape-v0", spec, LocalBoard(), stats, episodes=2)
    try:
        with pytest.raises(EnvError, match=r"shape \(1,\) .* from step\(\)"):
            evaluator.evaluate(0)
        assert stats.get("evaluations") == 0
    finally:
        evaluator.close()


def test_env_seeds_follow_gymnasium_vector_convention():
    """Env i of a run seeded s starts with reset(seed=s + i), as gymnasium's vector envs (and so SB3, SBX,
    CleanRL) do: a peer run with the same seed plays episodes from the same initial states. Pendulum's
    initial state is random, so a wrong seed gives a different first observation."""
    import gymnasium as gym

    spec = AlgoSpec(algo="sac", obs_dim=3, act_dim=1, hidden_sizes=(8,), seed=7)
    sink, board, stats = ListSink(), LocalBoard(), LocalStatsBlock(stats_schema(2))
    worker = SamplerWorker("Pendulum-v1", spec, 1, 2, 10**9, sink, board, stats.role("sampler-1"))
    for j in range(2):
        expected, _ = gym.make("Pendulum-v1").reset(seed=7 + 2 + j)  # sampler 1 holds global envs 2 and 3
        np.testing.assert_array_equal(worker.obs[j], expected.astype(np.float32))
    # a resumed generation takes other seeds, so it does not replay the first generation's episodes
    resumed = SamplerWorker("Pendulum-v1", spec, 1, 2, 10**9, ListSink(), LocalBoard(),
                            LocalStatsBlock(stats_schema(2)).role("sampler-1"), generation=1)
    assert not np.array_equal(resumed.obs, worker.obs)
    worker.close()
    resumed.close()
