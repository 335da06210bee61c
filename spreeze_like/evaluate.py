"""``python -m spreeze_like.evaluate RUN``: score (or watch) a trained policy outside the trainer.

    python -m spreeze_like.evaluate runs/Pendulum-v1__sac__1__1795800000          # 10 episodes, the newest checkpoint
    python -m spreeze_like.evaluate runs/.../checkpoints/ckpt_0000020000.pt --episodes 3 --render human

It loads the deterministic policy (:func:`spreeze_like.policy.load_policy`) and runs whole episodes
on the env the trainer makes, one after another, printing each return and then the mean. The start
states are the evaluator's by default (episode ``i`` resets with ``eval_seed(run seed, i)``), so on the
checkpoint a run wrote at its end this repeats the run's final evaluation; ``--seed`` picks other ones.
Bad input (no such folder, no checkpoint, a corrupt or foreign file, a bad flag, an env that cannot
be made) is one ``error: ...`` line and exit status 2. Nothing is written anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import TYPE_CHECKING, NamedTuple

from spreeze_like.console import exit_status, say

if TYPE_CHECKING:
    from spreeze_like.policy import Policy


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from spreeze_like.config_fields import OneLineParser

    parser = OneLineParser(prog="python -m spreeze_like.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="a run folder (its newest checkpoint) or a checkpoint file")
    parser.add_argument("--episodes", type=int, default=10, help="whole episodes to run (default 10)")
    parser.add_argument("--seed", type=int, default=None,
                        help="reset episode i with seed SEED + i (default: the evaluator's start states of the run)")
    parser.add_argument("--render", choices=["human", "rgb_array"], default=None,
                        help="render mode of the env (human: a window, where the env and the display allow one)")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes {args.episodes}: give at least 1")
    return args


class Episode(NamedTuple):
    """One episode of :func:`run_episodes`: its return, length and, when the env says, whether it succeeded."""

    ret: float
    length: int
    success: bool | None = None  # the last step's info["is_success"] (or "success"); None: the env does not say


def run_episodes(policy: Policy, episodes: int, seed: int | None, render: str | None) -> list[Episode]:
    """Each episode, acting with ``policy`` from the given start states."""
    from spreeze_like.envs import episode_success, obs_vector, reset_env
    from spreeze_like.roles.evaluator import MAX_EVAL_STEPS
    from spreeze_like.seeding import eval_seed

    env = policy.make_env(render_mode=render)
    shape = env.observation_space.shape
    limit = env.spec.max_episode_steps if env.spec is not None else None
    max_steps = min(limit or MAX_EVAL_STEPS, MAX_EVAL_STEPS)  # the evaluator's cap: an env without a time limit
    results = []
    try:
        for i in range(episodes):
            obs = reset_env(env, policy.env_id, seed=eval_seed(policy.seed, i) if seed is None else seed + i)
            total, length, done, info = 0.0, 0, False, {}
            while not done and length < max_steps:
                o, r, terminated, truncated, info = env.step(policy(obs))
                obs = obs_vector(o, shape, policy.env_id, "step")
                total, length, done = total + float(r), length + 1, terminated or truncated
            results.append(Episode(total, length, episode_success(info)))
    finally:
        env.close()
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return exit_status(lambda: evaluate(args))


def evaluate(args: argparse.Namespace) -> int:
    from spreeze_like.policy import load_policy

    policy = load_policy(args.path)
    made_with = f" made with --env-kwargs {json.dumps(policy.env_kwargs)}" if policy.env_kwargs else ""
    say(f"{policy.algo} policy for {policy.env_id}{made_with} after {policy.env_steps:,} env steps "
        f"({policy.checkpoint})")
    results = run_episodes(policy, args.episodes, args.seed, args.render)
    said = all(e.success is not None for e in results)  # a goal env: every episode says whether it succeeded
    for i, e in enumerate(results):
        say(f"episode {i}: return {e.ret:.1f}, {e.length} steps" + (f", {'success' if e.success else 'failure'}"
                                                                      if said else ""))
    returns = [e.ret for e in results]
    spread = f" +- {statistics.stdev(returns):.1f}" if len(returns) > 1 else ""
    won = f", success {sum(bool(e.success) for e in results)}/{len(results)}" if said else ""
    say(f"mean return {statistics.fmean(returns):.1f}{spread} over {len(returns)} episodes{won}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
