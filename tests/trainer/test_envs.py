"""Envs: ids and module:EnvId, space checks, action rescaling, reset errors, derived seeds."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import warnings

import gymnasium as gym
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


def test_a_failed_make_shows_no_gymnasium_warning_above_the_error():
    """Pendulum-v0: gymnasium warned (two coloured lines on the console) before it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(EnvError, match="Pendulum-v0.*deprecated.*Pendulum-v1"):
            make_env("Pendulum-v0")
    assert [str(w.message) for w in caught] == []


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


# --- audit finding 10: odd action Boxes are refused in one line --------------------------------------------------
@pytest.mark.parametrize(
    "env_id, dtype",
    [(TINY + "TinyIntAction-v0", "int64"), (TINY + "TinyBoolAction-v0", "bool"),
     # gymnasium's own int32 action Box; its tabular envs import jax, which the test install lacks
     pytest.param("tabular/CliffWalking-v0", "int32",
                  marks=pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                                           reason="gymnasium's tabular envs need jax (not in the test install)"))],
)
def test_finding10_integer_box_actions_are_refused(env_id, dtype):
    """Rescaling [-1, 1] onto an integer Box gave NaN/inf actions (audit); gymnasium's own CliffWalking has one."""
    with pytest.raises(EnvError, match=f"{dtype} action Box.*declare the Box with a float dtype") as info:
        make_env(env_id)
    assert "\n" not in str(info.value)


def test_finding10_box_with_low_equal_high_is_refused():
    with pytest.raises(EnvError, match=r"low == high in dimension\(s\) \[1\].*remove it from the action space") as info:
        make_env(TINY + "TinyFixedDim-v0")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("env_id, bound", [("TinyMaxBounds-v0", "3e+38"), ("TinyHugeBounds-v0", "1e+07")])
def test_finding10_huge_action_bounds_are_refused(env_id, bound):
    """+-3e38 float32 bounds are finite, but the rescaled action 0 arrives as 1.8e31; past 1e6 scaling means nothing."""
    with pytest.raises(EnvError, match=re.escape(f"bounds up to {bound} in magnitude") + ".*more than 1e\\+06") as info:
        make_env(TINY + env_id)
    assert "\n" not in str(info.value)


def test_finding10_bounds_at_the_limit_are_still_accepted_and_rescaled():
    """The limit itself (+-1e6) is accepted, and [-1, 1] still maps onto it (reward = the action received)."""
    env = make_env(TINY + "TinyWideBounds-v0")
    env.reset(seed=0)
    rewards = [env.step(np.array([a], np.float32))[1] for a in (-1.0, 0.0, 0.5, 1.0)]
    assert rewards == pytest.approx([-1e6, 0.0, 5e5, 1e6])
    env.close()


def test_finding10_why_the_limit_is_1e6_rescaling_rounding_grows_with_the_bound():
    """The measurement behind MAX_ACTION_BOUND, through gymnasium's RescaleAction on a float32 Box: neighbouring
    float32 agent actions reach the env about B * 2**-24 apart (<= 0.0625 at 1e6, up to 1 at 1e7), and at +-3e38
    the action 0 (the middle) arrives as ~1.8e31."""
    from trainer.tiny_envs import TinyOddAction

    def received_gaps(bound: float) -> np.ndarray:
        unit = np.ones(1, np.float32)
        env = gym.wrappers.RescaleAction(TinyOddAction([-bound], [bound]), -unit, unit)
        actions = [np.float32(0.9)]
        for _ in range(199):
            actions.append(np.nextafter(actions[-1], np.float32(1)))
        received = np.unique([env.action(np.array([a]))[0] for a in actions])
        return np.diff(received)

    assert received_gaps(1e6).max() <= 0.0625
    assert received_gaps(1e7).max() >= 0.5
    env = gym.wrappers.RescaleAction(TinyOddAction([-3e38], [3e38]), -np.ones(1, np.float32), np.ones(1, np.float32))
    assert abs(env.action(np.zeros(1, np.float32))[0]) > 1e30


# --- audit finding 11: an observation that does not match the declared Box is refused ---------------------------
def test_finding11_wrong_observation_shape_from_reset_is_refused():
    env = make_env(TINY + "TinyObsShapeReset-v0")  # declares (2,), resets to shape (3,)
    with pytest.raises(EnvError, match=r"observation of shape \(3,\) and dtype float32 from reset\(\).*\(2,\)") as info:
        reset_env(env, "TinyObsShapeReset-v0", seed=0)
    assert "\n" not in str(info.value)
    env.close()


# --- audit finding 17: any failure of the user's env code is one line -------------------------------------------
def _module(tmp_path, monkeypatch, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_finding17_env_module_with_a_syntax_error_is_one_line(tmp_path, monkeypatch):
    module = _module(tmp_path, monkeypatch, "spz_syntax_error_envs", "import gymnasium\ndef broken(:\n    pass\n")
    expected = f"importing module '{module}'.* raised SyntaxError.*line 2.*fix the module"
    with pytest.raises(EnvError, match=expected) as info:
        make_env(f"{module}:Broken-v0")
    assert "\n" not in str(info.value)


def test_finding17_env_module_raising_on_import_is_one_line(tmp_path, monkeypatch):
    module = _module(tmp_path, monkeypatch, "spz_raising_envs", "x = 1\nraise KeyError('MUJOCO_GL')\n")
    expected = f"importing module '{module}'.* raised KeyError at spz_raising_envs.py:2: 'MUJOCO_GL'; fix the module"
    with pytest.raises(EnvError, match=expected) as info:
        make_env(f"{module}:Any-v0")
    assert "\n" not in str(info.value)


def test_finding17_env_constructor_raising_is_one_line():
    expected = "making env .* raised RuntimeError at tiny_envs.py:[0-9]+: simulator licence not found; fix the env"
    with pytest.raises(EnvError, match=expected) as info:
        make_env(TINY + "TinyCtorRaises-v0")
    assert "\n" not in str(info.value)


def test_finding17_class_name_instead_of_a_registered_id_says_register_it(tmp_path, monkeypatch):
    """``module:ClassName`` with an unregistered class: the hint says the id must be *registered*, and how."""
    source = "import gymnasium\n\nclass Odd(gymnasium.Env):\n    pass\n\n" \
             "gymnasium.register('SpzOther-v0', entry_point='spz_class_envs:Odd')\n"
    module = _module(tmp_path, monkeypatch, "spz_class_envs", source)
    with pytest.raises(EnvError) as info:
        make_env(f"{module}:Odd")
    message = str(info.value)
    assert "\n" not in message
    assert "registers no env id 'Odd'" in message and "it registers: SpzOther-v0" in message
    assert "gymnasium.register('Odd-v0', entry_point='spz_class_envs:Odd')" in message
    assert "pass spz_class_envs:Odd-v0" in message


@pytest.mark.parametrize(("base", "named"), [("Nope-v0", "`Nope`"), ("Pendulum-v99", "`v99`")])
def test_a_registered_wrapper_whose_base_env_is_unknown_names_the_base_error_not_its_own_id(tmp_path, monkeypatch,
                                                                                          base, named):
    """A registered id whose constructor asks gymnasium for an unknown env (a wrapper given a misspelt base env):
    before, the error said the module registers no such id, then listed that very id among those it registers."""
    name = f"spz_wrapper_envs_{named.strip('`').lower()}"  # a module per case: an imported one is not imported again
    source = ("import gymnasium\n\n"
              "class Wrapper(gymnasium.Wrapper):\n"
              "    def __init__(self, base):\n"
              "        super().__init__(gymnasium.make(base))\n\n"
              f"gymnasium.register('{name}/Wrapper-v0', entry_point='{name}:Wrapper', kwargs={{'base': {base!r}}})\n")
    module = _module(tmp_path, monkeypatch, name, source)
    with pytest.raises(EnvError) as info:
        make_env(f"{module}:{name}/Wrapper-v0")
    message = str(info.value)
    assert "\n" not in message and "registers no env id" not in message, message
    assert message.startswith(f"making env '{module}:{name}/Wrapper-v0' raised gymnasium's "), message
    assert "for an env its constructor makes: " in message and named in message, message


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="needs MuJoCo (gymnasium[mujoco])")
def test_mujocos_settotalmass_deprecation_is_dropped_and_its_other_warnings_still_shown(tmp_path):
    """gymnasium's own model files make MuJoCo 4 warn about 'settotalmass' once per env made (to stderr and
    to MUJOCO_LOG.TXT in the working directory); that one is dropped, any other warning still reaches stderr."""
    script = (
        "import mujoco\n"
        "from spreeze_like.envs import make_env\n"
        "make_env('HalfCheetah-v5').close()\n"
        "make_env('Hopper-v5').close()\n"
        "model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><body><freejoint/><geom size=\".1\"/>"
        "</body></worldbody></mujoco>')\n"
        "data = mujoco.MjData(model)\n"
        "data.qpos[:] = float('nan')\n"  # MuJoCo's own instability warning, which must not be swallowed
        "mujoco.mj_step(model, data)\n"
        "print('stepped')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0 and "stepped" in proc.stdout, proc.stderr[-2000:]
    assert "settotalmass" not in proc.stderr + proc.stdout
    assert "WARNING: Nan, Inf or huge value in QPOS" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


@pytest.mark.parametrize(
    "mode, fragment",
    [
        ("raise", "raised TypeError at tiny_envs.py:"),
        ("old_api", "its step() returns old gym's 4-tuple"),
        ("no_reward", "returned the reward None (1 value(s) of dtype object)"),
        ("two_rewards", "(2 value(s) of dtype float64) from step()"),
    ],
)
def test_an_env_whose_first_step_fails_is_refused_by_the_first_step_check(mode, fragment):
    with pytest.raises(EnvError) as info:
        env_info(TINY + "TinyOddStep-v0", {"mode": mode}, first_step=True)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert env_info(TINY + "TinyOddStep-v0", {"mode": mode}).act_dim == 1  # sizes only: nothing stepped


def test_the_first_step_check_passes_envs_that_step():
    assert env_info(TINY + "TinyOddStep-v0", first_step=True).obs_dim == 2
    assert env_info(TINY + "TinyObsFloat64-v0", first_step=True).obs_dim == 2  # float64 in a float32 Box: accepted
    assert env_info("Pendulum-v1", first_step=True).max_episode_steps == 200


def test_the_first_step_check_refuses_an_env_that_raises_on_reset():
    with pytest.raises(EnvError, match="raised RuntimeError on reset: simulator failed"):
        env_info(TINY + "TinyBadReset-v0", first_step=True)
