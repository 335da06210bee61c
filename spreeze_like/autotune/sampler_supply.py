"""What sampler processes can deliver: total env steps/s of N samplers x K envs each, from the probes.

The planner asks two questions of the probe results: how many env steps/s the samplers the cores
allow can make at most (:func:`best_setup`), and the cheapest samplers x envs that make a given
rate (:func:`setup_for`). Both read :func:`supply`:

* a measured point of the multi-process curve (``EnvRates.parallel``, N processes stepping at
  once) is taken as it is;
* between two measured process counts, the total is interpolated linearly;
* beyond the largest measured count, each further process is assumed to add that count's
  per-process rate (``extrapolated``);
* with no multi-process curve for K (probe files of schema 2, or a failed probe), N times the
  one-process rate ``per_sampler[K]`` (``assumed linear``) -- the plan notes this.

Pure functions of the probe results, like the rest of the planner.
"""

from __future__ import annotations

from dataclasses import dataclass

from spreeze_like.autotune.results import EnvRates

SETUP_TOLERANCE = 0.05  # setups within this fraction of the fastest count as equally fast (measurement noise)


@dataclass(frozen=True)
class SamplerSetup:
    """N sampler processes with K envs each, and the env steps/s they make together."""

    samplers: int
    envs_per_sampler: int
    steps_hz: float
    how: str  # "measured", "interpolated", "extrapolated" or "assumed linear"

    @property
    def text(self) -> str:
        return f"{self.samplers} x {self.envs_per_sampler} env(s): {self.steps_hz:,.0f} env steps/s ({self.how})"


def envs_options(env: EnvRates) -> list[int]:
    """The envs-per-sampler counts the probes measured (one process or several)."""
    ks = set(env.per_sampler) | {k for by_k in env.parallel.values() for k in by_k}
    return sorted(ks) or [1]


def supply(env: EnvRates, samplers: int, k: int) -> SamplerSetup:
    """Total env steps/s of ``samplers`` processes with ``k`` envs each (see the module docstring)."""
    measured = {n: by_k[k].value for n, by_k in env.parallel.items() if k in by_k}
    if samplers in measured:
        return SamplerSetup(samplers, k, measured[samplers], "measured")
    if measured:
        below = [n for n in measured if n < samplers]
        above = [n for n in measured if n > samplers]
        if below and above:
            lo, hi = max(below), min(above)
            value = measured[lo] + (measured[hi] - measured[lo]) * (samplers - lo) / (hi - lo)
            return SamplerSetup(samplers, k, value, "interpolated")
        if below:
            top = max(below)
            return SamplerSetup(samplers, k, measured[top] * samplers / top, "extrapolated")
        low = min(above)  # fewer processes than any measured count: the smallest count's rate per process
        return SamplerSetup(samplers, k, measured[low] * samplers / low, "extrapolated")
    one = env.per_sampler.get(k) or (env.step_with_policy if k == 1 else None)
    rate = one.value if one is not None else 0.0
    return SamplerSetup(samplers, k, samplers * rate, "assumed linear")


def _candidates(env: EnvRates, limit: int, samplers: int | None, k: int | None) -> list[SamplerSetup]:
    counts = [samplers] if samplers else list(range(1, max(1, limit) + 1))
    ks = [k] if k else envs_options(env)
    return [supply(env, n, kk) for n in counts for kk in ks]


def best_setup(env: EnvRates, limit: int, samplers: int | None = None, k: int | None = None) -> SamplerSetup:
    """The most env steps/s with at most ``limit`` samplers (or the user's ``samplers`` / ``k``).

    Among setups within :data:`SETUP_TOLERANCE` of the fastest: the fewest processes, then the
    fewest envs each (fewer processes leave cores free; fewer envs, a fresher policy per step).
    """
    setups = _candidates(env, limit, samplers, k)
    top = max(s.steps_hz for s in setups)
    return min((s for s in setups if s.steps_hz >= (1.0 - SETUP_TOLERANCE) * top),
               key=lambda s: (s.samplers, s.envs_per_sampler))


def setup_for(env: EnvRates, need_hz: float, limit: int, samplers: int | None = None,
              k: int | None = None) -> SamplerSetup:
    """The fewest processes, then the fewest envs each, that make ``need_hz``; the best setup if none does."""
    setups = [s for s in _candidates(env, limit, samplers, k) if s.steps_hz >= need_hz]
    if not setups:
        return best_setup(env, limit, samplers, k)
    return min(setups, key=lambda s: (s.samplers, s.envs_per_sampler))


def scaling_note(env: EnvRates, setup: SamplerSetup) -> str:
    """A plan note when the setup's rate was not measured as such; empty otherwise."""
    if setup.how == "measured":
        return ""
    if setup.how == "assumed linear":
        why = env.parallel_note or "this probe file has no multi-process sampler curve (probe schema 2)"
        return (f"samplers: {why}; {setup.samplers} x {setup.envs_per_sampler} env(s) is assumed to make "
                f"{setup.samplers} x one sampler's rate ({setup.steps_hz:,.0f} env steps/s); --reprobe measures it")
    return (f"samplers: {setup.samplers} x {setup.envs_per_sampler} env(s) was not measured as such; its "
            f"{setup.steps_hz:,.0f} env steps/s is {setup.how} from the measured process counts")
