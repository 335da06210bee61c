"""``--critic-hidden-sizes``: critics of their own widths beside the actor's ``--hidden-sizes``.

What a user relies on: the critic (and the actor learner's copy of it) is built with the widths given, the actor
keeps ``--hidden-sizes``, the run records them so that a resume builds the same networks, a resume with other
critic widths is refused in one line before anything starts, and without the flag nothing changes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from spreeze_like.checkpoint import load_latest
from spreeze_like.config import TrainConfig
from spreeze_like.flags import parse_cli
from spreeze_like.policy import load_policy
from spreeze_like.training import train

from .test_cli import assert_one_line_error, run_cli
from .test_serial import TINY


@pytest.fixture(scope="module")
def wide_critic_run(tmp_path_factory):
    """SAC on Pendulum-v1 (obs 3, act 1) with a 32-32 actor and one 48-wide critic layer, serial mode."""
    config = dataclasses.replace(TrainConfig(), logdir=str(tmp_path_factory.mktemp("runs")),
                                 **{**TINY, "hidden_sizes": (32, 32), "critic_hidden_sizes": (48,)})
    return train(config, print_fn=lambda line: None).run_dir


def test_the_critic_has_its_widths_and_the_actor_its_own(wide_critic_run):
    payload, _ = load_latest(wide_critic_run)
    critic = payload["roles"]["critic-learner"]["part"]["modules"]["critic"]
    assert {k: tuple(v.shape) for k, v in critic.items()} == {  # twin Q ensemble: (n_q, in, out)
        "layers.0.weight": (2, 4, 48), "layers.0.bias": (2, 1, 48),
        "layers.1.weight": (2, 48, 1), "layers.1.bias": (2, 1, 1)}
    copy = payload["roles"]["actor-learner"]["part"]["modules"]["critic_copy"]
    assert {k: tuple(v.shape) for k, v in copy.items()} == {k: tuple(v.shape) for k, v in critic.items()}
    actor = payload["roles"]["actor-learner"]["part"]["modules"]["actor"]
    assert tuple(actor["trunk.0.weight"].shape) == (32, 3) and tuple(actor["trunk.2.weight"].shape) == (32, 32)
    assert load_policy(wide_critic_run)(np.zeros(3, np.float32)).shape == (1,)  # the actor vector fits 32-32


def test_a_resume_keeps_them_and_refuses_others(wide_critic_run):
    assert parse_cli(["--resume", str(wide_critic_run)]).critic_hidden_sizes == (48,)
    other = run_cli("--resume", str(wide_critic_run), "--total-steps", "700", "--critic-hidden-sizes", "64")
    assert_one_line_error(other, "holds critics with hidden widths 48, not 64", "--critic-hidden-sizes 48")


def test_without_the_flag_the_critic_has_the_actors_widths(tmp_path):
    run_dir = train(dataclasses.replace(TrainConfig(), logdir=str(tmp_path), **{**TINY, "hidden_sizes": (24,)}),
                    print_fn=lambda line: None).run_dir
    payload, _ = load_latest(run_dir)
    critic = payload["roles"]["critic-learner"]["part"]["modules"]["critic"]
    assert tuple(critic["layers.0.weight"].shape) == (2, 4, 24)
    # the same widths written out are the same networks: the resume is not refused
    assert run_cli("--resume", str(run_dir), "--total-steps", "700", "--critic-hidden-sizes", "24",
                   "--log-interval", "0").returncode == 0


def test_a_bad_width_is_one_line():
    assert_one_line_error(run_cli("--critic-hidden-sizes", "0"), "--critic-hidden-sizes", "widths >= 1")
