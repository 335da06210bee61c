"""Evaluation videos during training (``--video-every N``): episode 0 of an evaluation, as a file in the run folder.

What a user watching a run wants to see is the policy at that point: so the video is the evaluation's own first
episode (its env made with ``render_mode="rgb_array"``; the same seed as every evaluation's episode 0), not an
extra episode, and its return is the one in ``evals.jsonl``. Which evaluations: the first at or after each
multiple of ``video_every`` env steps, and the final one (the trained policy). Files: ``<run>/videos/
eval_<env step, 9 digits>.mp4`` (or ``.gif``), so ``ls`` lists them in training order; a resumed run adds to the
folder.

Cost, paid by the evaluator only (never a sampler or a learner): rendering every step of one episode and
encoding it. On a desktop MuJoCo renders through the GPU's EGL; with no GPU, Mesa renders on the CPU (a 20,000-step
HalfCheetah-v5 run on the 2-core machine took 161 s with two videos against 58 s without: docs/trainer.md), which
is why it is off by default.

Failures never stop training: a write that fails (a full disk) is one warning line (:class:`WriteGuard`) and that
video is dropped, the next is tried at its time; an env whose ``render()`` fails or returns no frame is one
warning line and no more videos this session. The run's start checks that the env renders a frame and that the
format's writer is installed (:func:`spreeze_like.video.check_can_record`), so these are rare. That check renders
one frame in the starting process and closes the env, and with it its GL context (EGL, not CUDA: the supervisor's
rule of never initialising CUDA holds).

Who owns what: the evaluator (its process, or the serial loop) creates ``videos/`` and its files; the user removes
them. A video is written under a temporary name and renamed when complete (:class:`VideoFile`); temporary files
left by a killed evaluator are removed when the next evaluator of the run starts (one evaluator per run folder:
the folder's lock).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from spreeze_like.config import VIDEO_FORMATS
from spreeze_like.errors import ConfigError, EnvError
from spreeze_like.video import VideoFile, VideoWriteError
from spreeze_like.write_guard import WriteGuard

VIDEOS_DIR = "videos"


def video_path(run_dir: str | Path, env_step: int, fmt: str) -> Path:
    """The file of the evaluation at ``env_step``."""
    return Path(run_dir) / VIDEOS_DIR / f"eval_{env_step:09d}.{fmt}"


class EvalVideos:
    """Which evaluations are recorded, and the recording of one; see the module docstring.

    Args:
        run_dir: the run folder (``videos/`` is made in it).
        every: env steps between videos (>= 1).
        fmt: ``"mp4"`` or ``"gif"``.
        start_step: the env step the session starts from (a resume: the schedule continues from there).
        env_id: for the messages.
        say: where the ``video of the evaluation ...`` and warning lines go (the console).
    """

    def __init__(self, run_dir: str | Path, every: int, fmt: str, start_step: int, env_id: str,
                 say: Callable[[str], None]) -> None:
        if every < 1 or fmt not in VIDEO_FORMATS:
            raise ValueError(f"video every {every} in format {fmt!r}")
        self.run_dir, self.every, self.fmt, self.env_id, self.say = Path(run_dir), every, fmt, env_id, say
        self.next_at = (start_step // every + 1) * every
        self.broken = False  # the env's render() failed: no more videos this session
        self.guard = WriteGuard(f"evaluation videos ({self.run_dir / VIDEOS_DIR})",
                                "training goes on; the video of this evaluation is dropped", say, retry_s=0)
        self._remove_stale()

    def _remove_stale(self) -> None:
        """Temporary files of an evaluator killed while recording (VideoFile's ``.<name>.tmp.<pid>``)."""
        for path in (self.run_dir / VIDEOS_DIR).glob(".eval_*.tmp.*"):
            path.unlink(missing_ok=True)

    def due(self, env_step: int, final: bool) -> bool:
        return not self.broken and (final or env_step >= self.next_at)

    def begin(self, env: Any, env_step: int, final: bool) -> Recording | None:
        """A recording of the evaluation at ``env_step`` from ``env`` (made to render rgb_array), or None: not
        due, or the file could not be started (said once)."""
        if not self.due(env_step, final):
            return None
        self.next_at = (env_step // self.every + 1) * self.every  # a dropped video is not retried before its time
        path = video_path(self.run_dir, env_step, self.fmt)
        try:
            path.parent.mkdir(exist_ok=True)
            video = VideoFile(path)
            video.open(env, self.env_id)
        except OSError as exc:
            self.guard.failed(exc)
            return None
        except VideoWriteError as exc:
            self.guard.failed(exc.cause)
            return None
        except (ConfigError, EnvError) as exc:  # the writer or the env cannot do it at all (checked at the start)
            self._stop(str(exc))
            return None
        return Recording(self, video, env_step)

    def _stop(self, why: str) -> None:
        self.broken = True
        self.say(f"[spreeze] warning: no more evaluation videos this session: {why}; training goes on")


class Recording:
    """One evaluation's video: :meth:`frame` after the reset and after every step of its env, then :meth:`end`."""

    def __init__(self, videos: EvalVideos, video: VideoFile, env_step: int) -> None:
        self.videos, self.video, self.env_step = videos, video, env_step
        self.failed = False

    def frame(self, env: Any) -> None:
        if self.failed:
            return
        try:
            frame = env.render()
        except Exception as exc:  # noqa: BLE001 - the env's render (user code): one warning, never the evaluator
            self._render_failed(f"render() of env {self.videos.env_id!r} raised {type(exc).__name__}: {exc}")
            return
        try:
            self.video.add(frame)
        except EnvError as exc:  # not an H x W x 3 uint8 frame
            self._render_failed(str(exc))
        except VideoWriteError as exc:
            self.failed = True
            self.videos.guard.failed(exc.cause)

    def _render_failed(self, why: str) -> None:
        self.failed = True
        self.videos._stop(why)

    def end(self, complete: bool, episode_return: float) -> Path | None:
        """Close the file: kept under its name when the episode was recorded whole, removed otherwise."""
        keep = complete and not self.failed
        try:
            self.video.close(keep=keep)
        except VideoWriteError as exc:
            self.videos.guard.failed(exc.cause)
            return None
        if not keep:
            return None
        self.videos.guard.succeeded()
        self.videos.say(f"[spreeze] video of the evaluation at {self.env_step:,} env steps (episode 0, return "
                         f"{episode_return:.1f}): {self.video.path}")
        return self.video.path
