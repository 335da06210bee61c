"""The GPU proof in one command: GPU tests, learner rates vs an eager peer, dual learners, sampling.

    python tools/bench_gpu.py                         # on the GPU machine: every section, JSON + table
    python tools/bench_gpu.py --device cpu --quick    # the same code paths on the CPU in < 1 min (CI runs it)
    python tools/bench_gpu.py --sections steps critic # some sections only

Sections (each records what it ran; a section that fails records its error and the rest go on):

* ``env``: device name, torch version, cores, load average before and after.
* ``tests``: ``pytest -m gpu`` (the GPU tests: learners on CUDA, dual, resume of a GPU checkpoint on
  the CPU and back, NaN guard, no leaks after kill -9); on the CPU they skip, and the section says so.
* ``steps``: one critic step, eager vs our CUDA-graph runner vs the inductor-compiled step inside our
  graph (``compiled-graph``) vs ``torch.compile(reduce-overhead)`` (tools/gpu_rates.py) -- the
  measurement behind ``--learner-step auto``.
* ``critic``: ``CriticLearner.update()`` frames/s at batch 256 ... 65536 (HalfCheetah sizes, SAC
  256x256), with the device replay mirror, and at batch 256 without it, and with 2, 4 and 8 updates
  per graph replay (``--updates-per-graph``; on CUDA also 4 with ``compiled-graph``), and with the
  weights published and loaded every 8th update instead of every one (``--weight-sync-period 8``), and
  the twin critic's layouts around the batch where a GPU stops batching its networks
  (``stacked/...``: batched at any batch, ``each/...``: one by one; ``networks.Critic.batched_max_rows``).
* ``peer``: the in-run peer, an eager single-process SAC written from the algorithm
  (tools/eager_sac_peer.py), at batch 256: its critic updates/s and full SAC updates/s, and our
  ratios to it.
* ``dual``: SAC updates/s of the two learner processes vs one process alternating both.
* ``sampling``: HalfCheetah-v5 env steps/s with policy inference for sampler processes x envs per
  sampler (tools/bench_sampler.py).

Learning against SB3/SBX (tools/bench_vs_sb3.py) and the autotune grid (tools/bench_autotune.py)
take longer than this command's budget on one machine; their commands are printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spreeze_like.console import run_tool
from spreeze_like.run_launch import run_captured
from spreeze_like.write_guard import tool_output

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

SECTIONS = ("env", "tests", "steps", "critic", "peer", "dual", "sampling")


def _env(device: str) -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__, "cores": os.cpu_count(),
            "load_before": os.getloadavg(), "device": device}
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpus"] = torch.cuda.device_count()
    return info


def _tests(device: str, quick: bool) -> dict:
    if not device.startswith("cuda"):
        return {"skipped": "no CUDA device: the GPU tests skip here (run them on a GPU machine)"}
    args = ["-q", "-m", "gpu", "-p", "no:cacheprovider", str(ROOT / "tests")]
    t0 = time.monotonic()
    proc = _child("pytest", args, 420)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    failures = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return {"returncode": proc.returncode, "summary": tail, "failures": failures[:20],
            "seconds": time.monotonic() - t0, "command": " ".join(["pytest", *args])}


def _steps(device: str, quick: bool) -> dict:
    from gpu_rates import step_modes

    if not device.startswith("cuda"):
        return {str(b): step_modes(device, b, 0.3 if quick else 1.5, ("eager",)) for b in (256, 1024)}
    # every compile costs tens of seconds: reduce-overhead only where launches dominate (batch 256)
    plan = {256: ("eager", "cuda-graph", "compiled-graph", "compile"), 65536: ("eager", "cuda-graph", "compiled-graph")}
    if quick:
        plan = {256: ("eager", "cuda-graph")}
    return {str(b): step_modes(device, b, 0.3 if quick else 1.5, modes) for b, modes in plan.items()}


def _critic(device: str, quick: bool) -> dict:
    from gpu_rates import critic_update_rate, random_storage

    storage = random_storage(20_000 if quick else 1_000_000)
    seconds = 0.3 if quick else 2.0
    cuda = device.startswith("cuda")
    out: dict[str, Any] = {}

    def entry(key: str, batch: int, **kwargs: Any) -> None:
        # one entry's failure is recorded and the others go on; each is printed as it lands, so a time
        # limit that cuts the section short keeps the figures before it in the console log
        try:
            out[key] = critic_update_rate(device, batch, storage, seconds, **{"device_replay": "on", **kwargs})
            shown = f"{out[key]['updates_per_s']:,.0f} updates/s, {out[key]['frames_per_s']:,.0f} frames/s"
        except Exception as exc:  # noqa: BLE001 - recorded, and the other entries go on
            out[key] = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
            shown = out[key]["error"][:300]
        print(f"  critic {key}: {shown}", flush=True)

    # batch 256 first (the open target: >= 3,000 whole updates/s), the large batches after
    entry("mirror/256", 256)
    # the twin critic as two separate MLPs (the layout before 2026-11-27): what the stacked critic buys
    entry("separate/256", 256, separate_critic=True)
    # CrossQ (the default algorithm on HalfCheetah-v5), its critic stacked since 2026-11-27, and before
    entry("crossq/256", 256, algo="crossq")
    entry("crossq-separate/256", 256, algo="crossq", separate_critic=True)
    for k in (2, 4, 8) if not quick else (4,):  # blocks of updates per graph replay (--updates-per-graph)
        entry(f"block{k}/256", 256, updates_per_graph=k)
    # the weights' host traffic (publish + load every update at --weight-sync-period 1) against every 8th
    entry("sync8/256", 256, sync_period=8)
    # the weight copies on the learner's stream, as before 2026-11-29 (mirror/256 has them on their own streams)
    entry("samestream/256", 256, copy_streams=False)
    if cuda:  # the inductor-fused step inside our graph (tens of seconds to compile each)
        entry("compiled/256", 256, step_mode="compiled-graph")
        entry("compiled-block4/256", 256, step_mode="compiled-graph", updates_per_graph=4)
    entry("host/256", 256, device_replay="off")
    for b in (1024,) if quick else (1024, 4096, 8192, 16384, 65536):
        entry(f"mirror/{b}", b)
    # the twin critic's rule (one by one from Critic.batched_max_rows rows on a GPU) against the other side of
    # it at the batches around its limit (each/: one by one below it; stacked/: batched from it on)
    from spreeze_like.algos.networks import Critic

    limit = Critic.batched_max_rows or 0
    for b in (1024,) if quick else (4096, 8192, 16384, 65536):
        beyond = b >= limit
        entry(f"{'stacked' if beyond else 'each'}/{b}", b, critic_layout="batched" if beyond else "each")
    entry("separate/65536" if not quick else "separate/1024", 1024 if quick else 65536, separate_critic=True)
    if cuda:
        entry("compiled/65536", 65536, step_mode="compiled-graph")
    # the best of SAC's critic as a run has it (issue 15's figure)
    rated = [(v["frames_per_s"], k) for k, v in out.items()
             if "frames_per_s" in v and not k.startswith(("separate", "crossq", "stacked", "each"))]
    if rated:
        best = max(rated)
        out["best"] = {"key": best[1], "frames_per_s": best[0]}
    return out


def _peer(device: str, quick: bool, results: dict) -> dict:
    from eager_sac_peer import EagerSACPeer, measure, random_batch
    from gpu_rates import ACT_DIM, OBS_DIM

    seconds = 0.3 if quick else 2.0
    peer = EagerSACPeer(OBS_DIM, ACT_DIM, device, 256)
    batch = random_batch(OBS_DIM, ACT_DIM, 256, device)
    out = {"critic_updates_per_s": measure(peer.critic_update, batch, seconds, device),
           "sac_updates_per_s": measure(peer.update, batch, seconds, device)}
    ours = results.get("critic", {}).get("mirror/256", {}).get("updates_per_s")
    if ours:
        out["ours_critic_updates_per_s"] = ours
        out["ratio_ours_over_peer_critic"] = ours / out["critic_updates_per_s"]
    return out


def _dual(device: str, quick: bool) -> dict:
    from gpu_rates import dual_vs_single

    return dual_vs_single(device, 256, 0.5 if quick else 3.0, rows=20_000 if quick else 200_000)


def _sampling(device: str, quick: bool, json_dir: Path) -> dict:
    out_json = json_dir / "bench_sampler.json"
    args = ["--json", str(out_json), *(["--quick"] if quick else [])]
    proc = _child("bench_sampler", args, 300)
    command = " ".join(["tools/bench_sampler.py", *args])
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout)[-500:], "command": command}
    return {"command": command, **json.loads(out_json.read_text())}


def _child(module: str, args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` (tools/ on its path), in a session of its own: a Ctrl-C, a SIGTERM or the time
    limit stops it with one SIGINT (pytest's orderly stop: fixtures torn down, its tests' runs stopped) and a
    SIGKILL to its group two minutes later. ``subprocess.run`` SIGKILLed pytest a quarter second after a Ctrl-C."""
    path = os.pathsep.join(p for p in (str(ROOT / "tools"), os.environ.get("PYTHONPATH", "")) if p)
    return run_captured(args, module=module, timeout_s=timeout_s, watch_launcher=False,
                        stop_signum=signal.SIGINT, PYTHONPATH=path)


def _table(results: dict) -> str:
    lines = ["section   figure                                      value"]

    def row(section: str, name: str, value: Any) -> None:
        text = f"{value:,.0f}" if isinstance(value, (int, float)) else str(value)
        lines.append(f"{section:<9} {name:<43} {text}")

    for b, modes in results.get("steps", {}).items():
        if isinstance(modes, dict):
            for mode, r in modes.items():
                row("steps", f"critic step b={b} {mode} updates/s", r.get("updates_per_s", r.get("error")))
    for key, r in results.get("critic", {}).items():
        if key != "best" and isinstance(r, dict) and "updates_per_s" in r:
            row("critic", f"{key} updates/s | frames/s", f"{r['updates_per_s']:,.0f} | {r['frames_per_s']:,.0f}")
        elif isinstance(r, dict) and "error" in r:
            row("critic", f"{key} error", r["error"][:200])
    if "best" in results.get("critic", {}):
        row("critic", f"best frames/s ({results['critic']['best']['key']})", results["critic"]["best"]["frames_per_s"])
    peer = results.get("peer", {})
    for key in ("critic_updates_per_s", "sac_updates_per_s", "ratio_ours_over_peer_critic"):
        if key in peer:
            row("peer", key, f"{peer[key]:.2f}" if key.startswith("ratio") else peer[key])
    dual = results.get("dual", {})
    for key in ("dual_sac_updates_per_s", "single_sac_updates_per_s", "ratio_dual_over_single"):
        if key in dual:
            row("dual", key, f"{dual[key]:.2f}" if key.startswith("ratio") else dual[key])
    for env, curve in results.get("sampling", {}).get("envs", {}).items():
        best = max(curve.get("points", []), key=lambda p: p["steps_per_s"], default=None)
        if best:
            row("sampling", f"{env} best {best['processes']} proc x {best['envs_per_sampler']} envs steps/s",
                best["steps_per_s"])
    tests = results.get("tests", {})
    if tests:
        row("tests", "pytest -m gpu", tests.get("summary", tests.get("skipped", tests.get("error"))))
    for section, r in results.items():
        if isinstance(r, dict) and "error" in r:
            row(section, "error", r["error"][:200])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (cuda:0 when CUDA is available, else cpu), cuda:N or cpu")
    parser.add_argument("--quick", action="store_true", help="short timings, small batches (the CI smoke)")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--json", default="bench_gpu.json", help="where to write the figures")
    args = parser.parse_args(argv)
    tool_output(parser, args.json)  # tried now, not after the measuring
    from spreeze_like.devices import tool_device

    device = tool_device(parser, args.device)
    import torch

    torch.set_num_threads(1)  # as every learner process runs (--torch-threads 1), ours and the peer alike
    if device.startswith("cuda"):  # TF32 matmuls, as our CUDA learners use them (algos/base.py): the peer too
        torch.backends.cuda.matmul.allow_tf32 = True
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)}
    json_path = Path(args.json)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    for section in ("env", *[s for s in SECTIONS if s in args.sections and s != "env"]):
        t0 = time.monotonic()
        try:
            if section == "env":
                results[section] = _env(device)
            elif section == "peer":
                results[section] = _peer(device, args.quick, results)
            elif section == "sampling":
                results[section] = _sampling(device, args.quick, json_path.parent)
            else:
                results[section] = globals()[f"_{section}"](device, args.quick)
        except Exception as exc:  # noqa: BLE001 - one broken section must not hide the others' figures
            results[section] = {"error": f"{type(exc).__name__}: {exc}"}
        results[section]["section_s"] = time.monotonic() - t0
        json_path.write_text(json.dumps(results, indent=1, default=str))
        print(f"[{section}] done in {time.monotonic() - t0:.1f} s", flush=True)
    results["env"]["load_after"] = os.getloadavg()
    json_path.write_text(json.dumps(results, indent=1, default=str))
    print(_table(results))
    print(f"figures: {json_path}")
    return results


if __name__ == "__main__":
    run_tool(main)
