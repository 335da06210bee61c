"""Start-up of a parallel run (docs/startup.md): what each process imports, the order of its phases.

- The weight-vector sizes the supervisor counts from the layer widths (no torch) equal those of the
  networks built on torch's ``meta`` device, for every algorithm.
- Importing the supervisor imports no torch (it used to, through ``checkpoint``/``parts``: ~0.8 s
  before every spawn), nor does resolving the devices on a CPU-only torch build.
- A real run through the CLI: ``startup.json`` holds every role's phases in order; only the two
  learners had torch loaded; the supervisor had not loaded torch when it spawned the roles; the
  evaluator and the monitor were spawned after both learners' first update.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.devices import build_has_gpu_backend
from spreeze_like.errors import ConfigError
from spreeze_like.procs.segments import vector_sizes
from tests.parallel.helpers import TINY_ARGS, assert_nothing_left, only_run_dir, run_cli


def meta_vector_sizes(spec: AlgoSpec) -> tuple[int, int]:
    """The sizes as the learners' networks have them: parameters plus CrossQ's running statistics plus the
    actor half's extra critic scalars (what ``weight_transfer`` packs into the boards)."""
    import torch

    from spreeze_like.algos import _classes, actor_class
    from spreeze_like.algos.base import critic_class
    from spreeze_like.algos.crossq_critic import running_statistics

    with torch.device("meta"):
        actor = actor_class(spec.algo)(spec.obs_dim, spec.act_dim, spec.hidden_sizes)
        critic = critic_class(spec.algo)(spec.obs_dim, spec.act_dim, spec.critic_widths, spec.n_q)
    extra = int(getattr(_classes(spec.algo)[1], "n_extra_critic_state", 0))
    critic_state = [*critic.parameters(), *running_statistics(critic)]
    return sum(p.numel() for p in actor.parameters()), sum(t.numel() for t in critic_state) + extra


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg", "crossq"])
@pytest.mark.parametrize("hidden, critic", [((256, 256), ()), ((64,), ()), ((32, 48, 16), ()),
                                            ((256, 256), (2048, 2048)), ((64, 64), (32,))])
def test_vector_sizes_match_the_networks(algo, hidden, critic):
    spec = AlgoSpec(algo=algo, obs_dim=17, act_dim=6, hidden_sizes=hidden, critic_hidden_sizes=critic)
    assert vector_sizes(spec) == meta_vector_sizes(spec)


def test_a_parallel_run_with_critics_of_their_own_widths(tmp_path):
    """The weight boards are sized from vector_sizes: a critic wider than the actor (CrossQ, 64 against 32-32)
    runs through them in both directions and the checkpoint holds the critic as given."""
    from spreeze_like.checkpoint import load_latest

    proc = run_cli(*TINY_ARGS, "--algo", "crossq", "--critic-hidden-sizes", "64", "--total-steps", "600",
                   "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    payload, _ = load_latest(run_dir)
    critic = payload["roles"]["critic-learner"]["part"]["modules"]["critic"]
    assert tuple(critic["norms.1.weight"].shape) == (2 * 64,)  # the norm after the hidden layer, both Q networks
    assert tuple(payload["roles"]["actor-learner"]["part"]["modules"]["actor"]["trunk.0.weight"].shape) == (32, 3)
    assert_nothing_left(run_dir)


def test_importing_the_supervisor_imports_no_torch():
    code = "import sys, spreeze_like.supervisor, spreeze_like.procs.parts; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(("text", "has_gpu"), [
    ("cuda: Optional[str] = None\nhip: Optional[str] = None\n", False),  # torch 2.x CPU wheel
    ("cuda = None\nhip = None\n", False),
    ("cuda: Optional[str] = '12.4'\nhip: Optional[str] = None\n", True),
    ("cuda: Optional[str] = None\nhip: Optional[str] = '6.2.41133'\n", True),  # ROCm: torch.cuda is the GPU
    ("", True),  # unknown layout: ask torch
])
def test_a_cpu_only_torch_build_is_told_from_its_version_file(text, has_gpu):
    assert build_has_gpu_backend(text) is has_gpu


def test_resolving_devices_imports_no_torch_on_any_build():
    """A CPU build is told from its version file; a CUDA or ROCm build (a GPU user's, the device
    machine's) is asked in a subprocess: the caller, as the supervisor, neither imports torch nor
    initialises CUDA. The count is the one torch gives in a process of its own."""
    code = ("import sys; from spreeze_like.devices import resolve_devices, cuda_device_count; "
            "print(cuda_device_count(), 'torch' in sys.modules, *resolve_devices('auto', 'auto'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    count, torch_loaded, actor, critic = out.stdout.split()
    ask_torch = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    asked = subprocess.run([sys.executable, "-c", ask_torch], capture_output=True, text=True, check=True,
                           timeout=120).stdout.strip()
    assert (count, torch_loaded) == (asked, "False"), out.stderr
    assert (actor, critic) == {"0": ("cpu", "cpu"), "1": ("cuda:0", "cuda:0")}.get(count, ("cuda:0", "cuda:1"))


def test_a_failed_gpu_count_reads_as_no_gpu_and_says_so(monkeypatch, capsys):
    from spreeze_like import devices
    from spreeze_like.autotune import hardware

    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout"))

    monkeypatch.setattr(devices, "_torch_version_file", lambda: "cuda: Optional[str] = '13.0'\nhip = None\n")
    monkeypatch.setattr(devices, "_counted", {})
    monkeypatch.setattr(hardware.subprocess, "run", hang)
    assert devices.cuda_device_count() == 0
    assert "warning: counting GPUs failed (GPU probe subprocess timed out" in capsys.readouterr().err
    assert devices.cuda_device_count() == 0 and capsys.readouterr().err == ""  # asked once per process...
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert devices.cuda_device_count() == 0 and "warning" in capsys.readouterr().err  # ...and set of visible GPUs
    with pytest.raises(ConfigError, match="CUDA is not available on this machine"):
        devices.resolve_devices("cuda:0", "auto")


@pytest.mark.multiproc
def test_startup_json_phases_and_imports_of_a_real_run(tmp_path):
    # two torch threads per learner: the only parallel test of --torch-threads > 1
    proc = run_cli(*TINY_ARGS, "--total-steps", "700", "--torch-threads", "2", "--logdir", str(tmp_path), timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert_nothing_left(run_dir)
    record = json.loads((run_dir / "startup.json").read_text())
    sup, roles = record["supervisor"], record["roles"]
    assert set(roles) == {"critic-learner", "actor-learner", "sampler-0", "evaluator", "monitor"}
    assert 0 < sup["t_exec"] <= sup["t_run"] <= sup["t_segments"] <= sup["t_spawned/critic-learner"]
    assert sup["torch_at_spawn"] == 0.0, "the supervisor imported torch before it spawned the roles"
    for role, t in roles.items():
        # t_exec has one clock tick of resolution (10 ms) and may read a little after t_main
        assert t["t_exec"] > 0 and t["t_exec"] - 0.02 <= t["t_main"] <= t["t_imported"] <= t["t_ready"], (role, t)
        assert t["t_main"] >= sup[f"t_spawned/{role}"] - 1.0, (role, t)  # started by this supervisor
        assert t["torch_loaded"] == (1.0 if role.endswith("learner") else 0.0), (role, t)
    for learner in ("critic-learner", "actor-learner"):
        assert roles[learner]["t_first"] >= roles[learner]["t_ready"], learner
        if platform.machine() in ("x86_64", "AMD64"):  # torch.set_flush_denormal works on x86 only
            # both of its threads flush subnormals, the pool's as well as its own (cpu_math.py)
            assert roles[learner]["flushing_threads"] == 2.0, (learner, roles[learner])
    assert roles["critic-learner"]["t_ready"] <= roles["critic-learner"]["t_data"] <= roles["critic-learner"]["t_first"]
    assert roles["sampler-0"]["t_first"] >= roles["sampler-0"]["t_ready"]
    learned = max(roles["critic-learner"]["t_first"], roles["actor-learner"]["t_first"])
    for deferred in ("evaluator", "monitor"):
        assert sup[f"t_spawned/{deferred}"] >= learned, deferred
