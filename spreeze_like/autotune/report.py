"""Probe results for people: a plain-text report, and the curves as TensorBoard scalars.

TensorBoard layout (one run folder, ``runs/profile__<time>/``), so that the curves read as curves:
the x axis ("step") is the batch size for update figures, the envs per sampler for one sampler's
figures and the number of sampler processes for the multi-process curve; a single figure (memcpy, ring, raw env step) is written at step 0.

==================================================  ===========================================
tag                                                 x axis
==================================================  ===========================================
``updates/<device>_<threads>t/critic_updates_per_s``  batch size
``updates/<device>_<threads>t/actor_updates_per_s``   batch size
``updates/<device>_<threads>t/critic_frames_per_s``   batch size (transitions/s = rate x batch)
``updates/<device>_<threads>t/peak_memory_mib``       batch size (CUDA only)
``env/sampler_steps_per_s``                           envs per sampler
``env/samplers_x<K>envs_steps_per_s``                 sampler processes stepping at once (total)
``env/step_alone_per_s``, ``data/memcpy_gb_per_s``,   -- (step 0)
``data/ring_transitions_per_s``
==================================================  ===========================================

The report text itself is also stored as TensorBoard text (``profile/report``).
"""

from __future__ import annotations

from pathlib import Path

from spreeze_like.autotune.results import ProbeResults, Rate


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _flag(rate: Rate) -> str:
    return " *" if rate.estimate else ""


def report_text(r: ProbeResults) -> str:
    """The readable report of every probe figure; figures marked ``*`` are estimates (listed at the end)."""
    hw = r.hardware
    lines = [
        (f"spreeze_like hardware profile, {r.created}: {r.elapsed_s:.0f} s (measuring budget {r.budget_s:.0f} s), "
        f"load average {hw.load_average:.2f} before, {r.load_after:.2f} after"),
        f"  machine   {r.fingerprint} ({hw.hostname})",
        (f"  CPU       {hw.cpu_model}: {hw.physical_cores} physical / {hw.logical_cores} logical cores, "
        f"{hw.usable_cores} usable by this process"),
        f"  memory    {_gib(hw.memory_available)} free of {_gib(hw.memory_total)}",
        f"  /dev/shm  {_gib(hw.shm_free)} free of {_gib(hw.shm_total)}",
        f"  torch     {hw.torch_version}",
    ]
    if hw.gpus:
        for g in hw.gpus:
            lines.append(f"  GPU       {g.device} {g.name}: {_gib(g.total_memory)} ({_gib(g.free_memory)} free), "
                         f"compute capability {g.capability}")
    else:
        lines.append(f"  GPUs      none: {hw.gpu_note}")
    width = 2 * r.env.obs_dim + r.env.act_dim + 3
    lines += [
        "data path",
        f"  memcpy (1 process, 64 MiB)     {r.memcpy.value / 1e9:8.1f} GB/s{_flag(r.memcpy)}",
        (f"  ring (process -> process)      {r.ring.value:14,.0f} transitions/s of {width} float32 "
        f"({r.ring.value * width * 4 / 1e9:.1f} GB/s){_flag(r.ring)}"),
        f"env {r.env_id} (obs {r.env.obs_dim}, action {r.env.act_dim}), sampler loop with its numpy policy",
        f"  env.step alone                 {r.env.step.value:14,.0f} steps/s{_flag(r.env.step)}",
        (f"  with policy (1 env, 1 forward) {r.env.step_with_policy.value:14,.0f} steps/s"
        f"{_flag(r.env.step_with_policy)}"),
    ]
    for n, rate in sorted(r.env.per_sampler.items()):
        lines.append(f"  sampler with {n} env(s), batched {rate.value:12,.0f} steps/s{_flag(rate)}")
    lines += _parallel_lines(r)
    critic = f", critic {'x'.join(map(str, r.critic_hidden_sizes))}" if r.critic_hidden_sizes else ""
    lines.append(f"updates ({r.algo}, hidden {'x'.join(map(str, r.hidden_sizes))}{critic}): replay sample + copy to "
                 "the device + one update of each half")
    for c in r.updates:
        lines.append(f"  {c.device}, {c.threads} torch thread(s), {c.precision}; stopped: {c.stop_reason or 'n/a'}")
        lines.append(f"    {'batch':>7} {'critic/s':>10} {'actor/s':>10} {'critic frames/s':>16} {'peak MiB':>9}")
        for p in c.points:
            mem = f"{p.peak_memory / 2**20:9,.0f}" if p.peak_memory else f"{'-':>9}"
            lines.append(f"    {p.batch_size:7d} {p.critic.value:10,.1f}{_flag(p.critic):2}{p.actor.value:8,.1f}"
                         f"{_flag(p.actor):2}{p.critic_frames:14,.0f}   {mem}")
        if not c.points:
            lines.append("    (no batch size could be measured)")
    estimates = r.estimates()
    if estimates:
        lines.append("estimates (* above): figures the budget did not allow to measure properly")
        lines += [f"  {e}" for e in estimates]
    return "\n".join(lines)


def _parallel_lines(r: ProbeResults) -> list[str]:
    """The multi-process sampler curve as a table: total env steps/s, processes down, envs each across."""
    if not r.env.parallel:
        return [f"  sampler processes at once: not measured ({r.env.parallel_note or 'probe file of schema 2'})"]
    ks = sorted({k for by_k in r.env.parallel.values() for k in by_k})
    lines = ["  sampler processes at once, total env steps/s (envs per sampler across):",
             "    " + f"{'processes':>9}" + "".join(f"{k:>12}" for k in ks)]
    for n, by_k in sorted(r.env.parallel.items()):
        cells = "".join(f"{by_k[k].value:10,.0f}{_flag(by_k[k]):2}" if k in by_k else f"{'-':>12}" for k in ks)
        lines.append(f"    {n:>9}{cells}")
    return lines


def write_tensorboard(r: ProbeResults, log_dir: str | Path) -> Path:
    """Write the curves and the report to TensorBoard event files in ``log_dir``; returns it."""
    from spreeze_like.event_writer import EventWriter

    log_dir = Path(log_dir)
    writer = EventWriter(log_dir)
    try:
        for c in r.updates:
            prefix = f"updates/{c.device.replace(':', '')}_{c.threads}t"
            for p in c.points:
                writer.add_scalar(f"{prefix}/critic_updates_per_s", p.critic.value, p.batch_size)
                writer.add_scalar(f"{prefix}/actor_updates_per_s", p.actor.value, p.batch_size)
                writer.add_scalar(f"{prefix}/critic_frames_per_s", p.critic_frames, p.batch_size)
                if p.peak_memory:
                    writer.add_scalar(f"{prefix}/peak_memory_mib", p.peak_memory / 2**20, p.batch_size)
        for n, rate in sorted(r.env.per_sampler.items()):
            writer.add_scalar("env/sampler_steps_per_s", rate.value, n)
        for n, by_k in sorted(r.env.parallel.items()):
            for k, rate in sorted(by_k.items()):
                writer.add_scalar(f"env/samplers_x{k}envs_steps_per_s", rate.value, n)
        writer.add_scalar("env/step_alone_per_s", r.env.step.value, 0)
        writer.add_scalar("data/memcpy_gb_per_s", r.memcpy.value / 1e9, 0)
        writer.add_scalar("data/ring_transitions_per_s", r.ring.value, 0)
        # four leading spaces: TensorBoard renders the text as markdown, this keeps it a code block
        writer.add_text("profile/report", "\n".join("    " + ln for ln in report_text(r).splitlines()), 0)
    finally:
        writer.close()
    return log_dir
