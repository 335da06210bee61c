"""Envs: ids and module:EnvId, space checks, action rescaling, reset errors, derived seeds."""

from __future__ import annotations

import numpy as np
import pytest

from spreeze_like.envs import env_info, make_env, reset_env
from spreeze_like.errors import EnvError
from spreeze_like.seeding import derive_seed

TINY = "trainer.tiny_envs:"


def test_pendulum_actions_are_rescaled_from_unit_box():
    env = make_env("Pendulum-v1")
    assert np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)
    info = env_info("Pendulum-v1")
    assert (info.obs_dim, info.act_dim, info.max_episode_steps) == (3, 1, 200)
    env.close()


def test_module_entry_point_and_rescaling_to_env_bounds():
    env = make_env(TINY + "TinyWalk-v0")  # the env's own bounds are [-2, 2]; reward = received action
    env.reset(seed=0)
    rewards = [env.step(np.array([a], np.float32))[1] for a in (-1.0, 0.0, 0.5, 1.0)]
    assert rewards == pytest.approx([-2.0, 0.0, 1.0, 2.0])


def test_discrete_action_space_is_refused():
    with pytest.raises(EnvError, match="continuous-action agents; .* Discrete action space"):
        make_env(TINY + "TinyDiscrete-v0")
    with pytest.raises(EnvError, match="Discrete"):
        make_env("CartPole-v1")


@pytest.mark.parametrize(
    "env_id, match",
    [
        ("Pendelum-v1", "Did you mean"),
        ("Pendulum-v9", "v9"),
        ("no_such_module_xyz:Foo-v0", "cannot import module"),
    ],
)
def test_unknown_env_is_one_line_env_error(env_id, match):
    with pytest.raises(EnvError, match=match) as info:
        make_env(env_id)
    assert "\n" not in str(info.value)


def test_env_raising_on_reset_is_env_error():
    env = make_env(TINY + "TinyBadReset-v0")
    with pytest.raises(EnvError, match="raised RuntimeError on reset: simulator failed"):
        reset_env(env, "TinyBadReset-v0", seed=1)


def test_derived_seeds_are_stable_and_distinct():
    assert derive_seed(1, "env", 0) == derive_seed(1, "env", 0)
    seeds = {derive_seed(s, r, i, g) for s in (1, 2) for r in ("env", "sampler") for i in (0, 1) for g in (0, 1)}
    assert len(seeds) == 16
    assert all(0 <= s < 2**31 for s in seeds)
