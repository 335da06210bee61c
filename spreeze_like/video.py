"""Episode videos for ``python -m spreeze_like.evaluate RUN --video FILE``: a trained policy, watched headless.

A desktop reached over SSH has no window for ``--render human``; a video file is what the user can open.
The env is made with ``render_mode="rgb_array"``; :class:`VideoFile` takes the frame after every
``reset`` and every ``step`` (all episodes, one after another, in one file) and streams them to disk
through imageio, so a long evaluation never holds its frames in memory (a HalfCheetah frame is
480 x 480 x 3 bytes: 10 episodes of 1,000 steps would be 6.9 GB). ``.mp4`` (H.264 through the ffmpeg
that imageio-ffmpeg carries) is the format to use; ``.gif`` (Pillow) suits a short clip, as Pillow keeps
a GIF's frames until it closes the file and drops a frame equal to the one before.

imageio and imageio-ffmpeg are the ``[video]`` extra: nothing else needs them, and writing video is
what they do well (CleanRL and SB3 record through moviepy, which wraps the same ffmpeg binary).

MuJoCo renders through OpenGL, and its default backend (GLFW) needs a display. With no ``DISPLAY``,
:func:`prefer_headless_gl` picks EGL unless the user chose a backend in ``MUJOCO_GL``: Mesa's EGL
renders on the CPU where there is no GPU (HalfCheetah-v5 on the 2-core CI machine, 2026-11-29: one episode,
1,001 frames of 480 x 480 with its steps and the H.264 encoding, in 50 s, after a one-second start). It must
run before MuJoCo is imported.

Who owns what: the file is the user's; it is written to a temporary name beside it and renamed when
the last frame is in, so an interrupted or failed evaluation leaves no half-written video under the
name asked for (the temporary file is removed).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from spreeze_like.errors import ConfigError, EnvError

FORMATS = (".mp4", ".gif")
DEFAULT_FPS = 30  # where the env's metadata has no render_fps


class VideoWriteError(ConfigError):
    """The file could not be written (a full disk, a folder gone): one line for the command line, and the
    ``OSError`` for a caller that goes on without the video (training's evaluation videos)."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(f"cannot write {path}: {cause.strerror or cause}")
        self.cause = cause


def check_video_path(path: str) -> Path:
    """The video file to write: a known suffix, in a folder that exists. ConfigError (one line) otherwise."""
    out = Path(path)
    if out.is_dir():
        raise ConfigError(f"--video {path}: that is a folder; name a file in it, e.g. {out / 'policy.mp4'}")
    if out.suffix.lower() not in FORMATS:
        raise ConfigError(f"--video {path}: name a .mp4 or .gif file (the suffix picks the format)")
    if not out.parent.is_dir():
        raise ConfigError(f"--video {path}: no folder {out.parent}; create it first")
    return out


def prefer_headless_gl() -> None:
    """Render MuJoCo through EGL when there is no display and the user chose no backend (see the docstring)."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")


def _imageio(flag: str = "--video") -> Any:
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ConfigError(f'{flag} needs imageio: pip install -e ".[video]" (imageio and imageio-ffmpeg)') from None
    return imageio


def _check_writer(fmt: str, flag: str, gif_hint: str) -> None:
    """mp4's writer is imageio-ffmpeg (not in [test]); without it imageio fails only at the first file it opens,
    with a ValueError listing plugins, so it is looked for before anything runs."""
    if fmt == "mp4" and importlib.util.find_spec("imageio_ffmpeg") is None:
        raise ConfigError(f'{flag} with mp4 needs imageio-ffmpeg: pip install -e ".[video]", or choose '
                          f"{gif_hint} (Pillow, which imageio brings)")


def check_can_record(env_id: str, env_kwargs: Mapping[str, Any] | None, fmt: str, flag: str) -> None:
    """Before a run that records videos (``--video-every``): the format's writer is installed and the env renders
    an H x W x 3 uint8 frame after a reset. ConfigError or EnvError, one line, otherwise: found at the start,
    not by the evaluator an hour in. Call :func:`prefer_headless_gl` first (before MuJoCo is imported)."""
    from spreeze_like.envs import make_env, reset_env

    _imageio(flag)
    _check_writer(fmt, flag, "--video-format gif")
    env = make_env(env_id, render_mode="rgb_array", env_kwargs=env_kwargs)
    try:
        _check_renders(env, env_id, flag)
        reset_env(env, env_id, seed=0)
        try:
            frame = env.render()
        except Exception as exc:  # noqa: BLE001 - the env's render (user code, or MuJoCo's GL set-up): one line
            fix = "fix its render()"
            if "mujoco" in type(env.unwrapped).__module__:
                fix = "with no display MuJoCo renders through EGL (MUJOCO_GL=egl) or OSMesa (MUJOCO_GL=osmesa): install one"
            elif isinstance(exc, ImportError) or "DependencyNotInstalled" in type(exc).__name__:
                fix = "install what it names"
            raise EnvError(f"env {env_id!r} could not render a frame ({type(exc).__name__}: {exc}); {fix}, or leave "
                           f"out {flag}") from None
        frame_array(frame, env_id, flag)
    finally:
        env.close()


def _check_renders(env: Any, env_name: str, flag: str) -> None:
    modes = (getattr(env, "metadata", None) or {}).get("render_modes") or []
    if "rgb_array" not in modes:
        raise EnvError(f"env {env_name!r} does not render rgb_array frames (its render_modes: {list(modes)}); "
                       f"{flag} needs an env that does")


def frame_array(frame: Any, env_name: str, flag: str = "--video") -> np.ndarray:
    """``env.render()``'s frame as an H x W x 3 (or 4) uint8 array; EnvError (one line) for anything else."""
    array = np.asarray(frame) if frame is not None else None
    if array is None or array.ndim != 3 or array.shape[2] not in (3, 4) or array.dtype != np.uint8:
        got = "None" if array is None else f"an array of shape {array.shape} and dtype {array.dtype}"
        raise EnvError(f"env {env_name!r} rendered {got} in rgb_array mode; {flag} needs H x W x 3 uint8 "
                       "frames: fix the env's render()")
    return array


class VideoFile:
    """Frames of an env, appended as they come, written to ``path`` when closed (see the module docstring).

    Made before the run (a missing imageio is then the first thing said); :meth:`open` starts the file at
    the env's frame rate once the env is made."""

    def __init__(self, path: Path) -> None:
        self._imageio = _imageio()
        _check_writer(path.suffix.lower().lstrip("."), "--video", "a .gif file")
        self.path, self.frames, self.fps = path, 0, float(DEFAULT_FPS)
        self._tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}{path.suffix}")
        self._writer: Any = None

    def open(self, env: Any, env_name: str) -> None:
        """Check that ``env`` renders frames, and start the file at its frame rate."""
        _check_renders(env, env_name, "--video")
        self.env_name, self.fps = env_name, env_fps(env)
        try:
            if self.path.suffix.lower() == ".gif":
                self._writer = self._imageio.get_writer(self._tmp, duration=1000.0 / self.fps, loop=0)
            else:  # macro_block_size 1: frames of any size, not resized to multiples of 16
                self._writer = self._imageio.get_writer(self._tmp, fps=self.fps, macro_block_size=1)
        except (ImportError, RuntimeError, ValueError) as exc:  # no backend for the format (imageio 2.38: ValueError)
            raise ConfigError(f"--video {self.path}: cannot write {self.path.suffix} ({exc}); install the [video] "
                              'extra: pip install -e ".[video]"') from None
        except OSError as exc:
            raise VideoWriteError(self.path, exc) from None

    def add(self, frame: Any) -> None:
        """One frame from ``env.render()``: an H x W x 3 (or 4) uint8 array."""
        array = frame_array(frame, self.env_name)
        try:
            self._writer.append_data(array[:, :, :3])
        except OSError as exc:
            raise VideoWriteError(self.path, exc) from None
        self.frames += 1

    def close(self, keep: bool) -> None:
        """Finish the file and give it its name (``keep``), or remove it (a failed or interrupted evaluation)."""
        try:
            if self._writer is not None:
                self._writer.close()
                if keep:
                    os.replace(self._tmp, self.path)
        except OSError as exc:
            raise VideoWriteError(self.path, exc) from None
        finally:
            self._tmp.unlink(missing_ok=True)


def env_fps(env: Any) -> float:
    """Frames per second of the env's own clock (``metadata["render_fps"]``: HalfCheetah-v5's 20), else 30."""
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    return float(fps) if isinstance(fps, (int, float)) and fps > 0 else float(DEFAULT_FPS)
