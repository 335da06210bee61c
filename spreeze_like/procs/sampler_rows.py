"""The supervisor's side of the sampler rows: the ``--ray`` preflight, and each row's quota.

Rows ``sampler-0 .. sampler-(L-1)`` are local processes, ``sampler-L .. sampler-(L+R-1)`` remote
actors that the ``ray-bridge`` child runs (see :mod:`spreeze_like.supervisor`). Every row has a
quota (the control row's ``quota-<i>``), and counts in the end-of-sampling check
(:meth:`SamplerQuotas.sampling_done`).

- :func:`preflight_ray`, before any segment: it checks that Ray is installed
  (``importlib.util.find_spec``: the supervisor never imports ray) and that the cluster's address
  accepts a TCP connection and answers an HTTP/2 greeting, within
  :data:`~spreeze_like.remote.address.ANSWER_S` each; either failure is one line, exit status 2.
- :class:`SamplerQuotas`: when the bridge gives a remote sampler up (``abandoned`` in its row) with
  steps of its quota left, the supervisor hands them to the local samplers
  (:meth:`SamplerQuotas.reassign_abandoned`), or ends the run with one line when no sampler is left
  to take them.

Owns no process, segment or file: :class:`SamplerQuotas` writes the quota slots of the control row,
which the supervisor creates and removes with the stats block (:mod:`.segments`); a crash takes
the quotas with the block.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from spreeze_like.config import TrainConfig
from spreeze_like.errors import ConfigError
from spreeze_like.ipc.stats_block import RoleStats, StatsBlock
from spreeze_like.procs import pacing
from spreeze_like.procs.control import quota_slot
from spreeze_like.remote.address import ANSWER_S, parse_ray_address, resolve_ray_address, unanswered_reason
from spreeze_like.remote.info_file import REMOTE_INFO_FILE

RAY_MISSING = 'error: --ray needs Ray: pip install "spreeze_like[ray]"'


def preflight_ray(cfg: TrainConfig) -> str | None:
    """``--ray``: Ray installed, and the cluster's address accepting a TCP connection (one line, exit 2).

    Returns ``--ray`` resolved (auto: $RAY_ADDRESS or the local default), None without ``--ray``.
    Only a connection is tried, never ``import ray`` (this process stays light; the bridge is the
    one Ray driver), so a wrong Ray version or a token mismatch is the bridge's one line later.
    """
    if cfg.ray is None:
        return None
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(RAY_MISSING.removeprefix("error: "))
    ray_address = resolve_ray_address(cfg.ray)
    host, port = parse_ray_address(cfg.ray)
    said = f"--ray {cfg.ray}" + (f" ({ray_address})" if ray_address != cfg.ray else "")
    why = unanswered_reason(host, port, ANSWER_S)
    if why is not None:
        raise ConfigError(f"{said}: no Ray cluster answers at {host}:{port} ({why}; waited up to {ANSWER_S:.0f} s); "
                          f"start one there (ray start --head --port={port}) or give its head's host:port")
    return ray_address


class SamplerQuotas:
    """Per sampler row, what the control row's ``quota-<i>`` holds (only the supervisor writes them).

    Made once the stats block exists: each row's quota is in the control row before any sampler or
    the bridge exists (they read it every loop).
    """

    def __init__(self, cfg: TrainConfig, block: StatsBlock, control: RoleStats, remaining: int, run_dir: Path,
                 say: Callable[[str], None]) -> None:
        self.samplers, self.rows = cfg.samplers, cfg.sampler_rows
        self.block, self.control, self.run_dir, self.say = block, control, run_dir, say
        self.quotas = pacing.sampler_quotas(remaining, self.rows)
        for i, quota in enumerate(self.quotas):
            control.set(quota_slot(i), float(quota))

    def sampling_done(self, snap: dict[str, dict[str, float]]) -> bool:
        """Every sampler row, remote ones included, is done with its quota as it stands now.

        ``done`` alone is not enough: a local sampler that finished its quota is still ``done`` for an
        instant after :meth:`reassign_abandoned` raised it.
        """
        return all(snap[f"sampler-{i}"]["done"] and snap[f"sampler-{i}"]["env_steps"] >= quota
                   for i, quota in enumerate(self.quotas))

    def reassign_abandoned(self, resume_hint: Callable[[], str]) -> str | None:
        """Hand the steps left of each remote sampler the bridge gave up to the samplers still there.

        The bridge kills the actor and drops its late rows before it sets ``abandoned``, so the row's
        ``env_steps`` (read after ``abandoned``) is final. Its quota becomes that count and the rest goes
        to the local samplers, split evenly (exact total); with no local sampler, to the remote samplers
        not given up. With neither, the run ends with one line (exit status 2): the line is returned,
        and the caller stops the run with it.
        """
        for i in range(self.samplers, self.rows):
            row = self.block.role(f"sampler-{i}")
            if not row.get("abandoned"):
                continue
            taken = int(row.get("env_steps"))
            left = self.quotas[i] - taken
            if left <= 0:
                continue
            receivers = list(range(self.samplers)) or [
                j for j in range(self.samplers, self.rows)
                if j != i and not self.block.role(f"sampler-{j}").get("abandoned")]
            if not receivers:
                return (f"no sampler can be placed: remote sampler-{i} was given up with {left:,} of its env steps left "
                        f"and no local or remote sampler is left to take them (see the ray-bridge's line above and "
                        f"{self.run_dir / REMOTE_INFO_FILE}); add Ray nodes with free CPUs or local samplers "
                        f"(--samplers N) and resume: {resume_hint()}")
            new = pacing.reassign_quota(self.quotas, i, taken, receivers)
            for j in receivers:  # raise the receivers first: the total never dips below the run's steps
                self.control.set(quota_slot(j), float(new[j]))
            self.control.set(quota_slot(i), float(new[i]))
            self.quotas = new
            who = ", ".join(f"sampler-{j}" for j in receivers)
            self.say(f"[spreeze] remote sampler-{i} was given up after {taken:,} env steps; its {left:,} steps left go "
                     f"to {who}")
        return None
