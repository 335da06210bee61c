"""``python -m spreeze_like.evaluate RUN``: score (or watch) a trained policy outside the trainer.

    python -m spreeze_like.evaluate runs/Pendulum-v1__sac__1__1795800000          # 10 episodes, the newest checkpoint
    python -m spreeze_like.evaluate runs/.../checkpoints/ckpt_0000020000.pt --episodes 3 --render human
    python -m spreeze_like.evaluate runs/HalfCheetah-v5__sac__1__1795800000 --episodes 2 --video cheetah.mp4

It loads the deterministic policy (:func:`spreeze_like.policy.load_policy`) and runs whole episodes
on the env the trainer makes, one after another, printing each return and then the mean. The start
states are the evaluator's by default (episode ``i`` resets with ``eval_seed(run seed, i)``), so on the
checkpoint a run wrote at its end this repeats the run's final evaluation; ``--seed`` picks other ones.
A run of your own env (``module:EnvId``) is evaluated with ``--env module:EnvId`` typed again: a checkpoint is
data, and the module it names is imported only if you name it (:func:`spreeze_like.rundir.refuse_unnamed_env_module`).
Bad input (no such folder, no checkpoint, a corrupt or foreign file, a bad flag, an env that cannot
be made) is one ``error: ...`` line and exit status 2. Nothing is written anywhere, except the video
file that ``--video`` names (:mod:`spreeze_like.video`: every episode, one after another, for a machine
with no display; needs the ``[video]`` extra).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from spreeze_like.console import exit_status, say

if TYPE_CHECKING:
    from spreeze_like.policy import Policy
    from spreeze_like.video import VideoFile


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from spreeze_like.config_fields import OneLineParser

    parser = OneLineParser(prog="python -m spreeze_like.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="a run folder (its newest checkpoint) or a checkpoint file")
    parser.add_argument("--episodes", type=int, default=10, help="whole episodes to run (default 10)")
    parser.add_argument("--seed", type=int, default=None,
                        help="reset episode i with seed SEED + i (default: the evaluator's start states of the run)")
    parser.add_argument("--env", default=None, metavar="MODULE:ENV_ID",
                        help="the run's own env (module:EnvId), named again: a checkpoint is data, and the module it "
                             "names is imported only if you name it (default: the checkpoint's gymnasium id)")
    parser.add_argument("--render", choices=["human", "rgb_array"], default=None,
                        help="render mode of the env (human: a window, where the env and the display allow one)")
    parser.add_argument("--video", metavar="FILE", default=None,
                        help="write the episodes to this .mp4 (or .gif: short clips) file, rendered off screen; "
                             'needs pip install -e ".[video]"')
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes {args.episodes}: give at least 1")
    if args.seed is not None and args.seed < 0:  # gymnasium refuses it at the first reset, naming the env
        parser.error(f"--seed {args.seed}: give a seed >= 0")
    if args.video is not None and args.render == "human":
        parser.error("--video records rgb_array frames off screen; leave out --render human")
    return args


class Episode(NamedTuple):
    """One episode of :func:`run_episodes`: its return, length and, when the env says, whether it succeeded."""

    ret: float
    length: int
    success: bool | None = None  # the last step's info["is_success"] (or "success"); None: the env does not say


def run_episodes(policy: Policy, episodes: int, seed: int | None, render: str | None,
                 video: VideoFile | None = None) -> list[Episode]:
    """Each episode, acting with ``policy`` from the given start states; ``video`` gets the frame after every
    reset and step (the env is then made with ``render_mode="rgb_array"``)."""
    from spreeze_like.envs import episode_success, obs_vector, reset_env
    from spreeze_like.roles.evaluator import MAX_EVAL_STEPS
    from spreeze_like.seeding import eval_seed

    env = policy.make_env(render_mode="rgb_array" if video is not None else render)
    shape = env.observation_space.shape
    limit = env.spec.max_episode_steps if env.spec is not None else None
    max_steps = min(limit or MAX_EVAL_STEPS, MAX_EVAL_STEPS)  # the evaluator's cap: an env without a time limit
    results, finished = [], False
    try:
        if video is not None:
            video.open(env, policy.env_id)
        for i in range(episodes):
            obs = reset_env(env, policy.env_id, seed=eval_seed(policy.seed, i) if seed is None else seed + i)
            if video is not None:
                video.add(env.render())
            total, length, done, info = 0.0, 0, False, {}
            while not done and length < max_steps:
                o, r, terminated, truncated, info = env.step(policy(obs))
                obs = obs_vector(o, shape, policy.env_id, "step")
                total, length, done = total + float(r), length + 1, terminated or truncated
                if video is not None:
                    video.add(env.render())
            results.append(Episode(total, length, episode_success(info)))
        finished = True
    finally:
        try:
            if video is not None:
                video.close(keep=finished)  # a failed or interrupted evaluation leaves no half-written file
        finally:
            env.close()
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return exit_status(lambda: evaluate(args))


def evaluate(args: argparse.Namespace) -> int:
    from spreeze_like.policy import load_policy

    video = None
    if args.video is not None:
        from spreeze_like.video import VideoFile, check_video_path, prefer_headless_gl

        prefer_headless_gl()  # before MuJoCo is imported (by the first make_env)
        video = VideoFile(check_video_path(args.video))
    policy = load_policy(args.path, env=args.env)
    from spreeze_like.envs import made_with_kwargs

    made_with = made_with_kwargs(policy.env_kwargs)
    say(f"{policy.algo} policy for {policy.env_id}{made_with} after {policy.env_steps:,} env steps "
        f"({policy.checkpoint})")
    results = run_episodes(policy, args.episodes, args.seed, args.render, video)
    said = all(e.success is not None for e in results)  # a goal env: every episode says whether it succeeded
    for i, e in enumerate(results):
        say(f"episode {i}: return {e.ret:.1f}, {e.length} steps" + (f", {'success' if e.success else 'failure'}"
                                                                      if said else ""))
    returns = [e.ret for e in results]
    spread = f" +- {statistics.stdev(returns):.1f}" if len(returns) > 1 else ""
    won = f", success {sum(bool(e.success) for e in results)}/{len(results)}" if said else ""
    say(f"mean return {statistics.fmean(returns):.1f}{spread} over {len(returns)} episodes{won}")
    if video is not None:
        say(f"video: {Path(args.video)} ({video.frames} frames at {video.fps:g} fps, "
            f"{video.frames / video.fps:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
