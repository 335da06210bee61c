"""What a CUDA graph capture demands of a learner's update, checked on the CPU.

A captured update (``algos/graphed.py``: the mirror's draw, the guard's reset, the step, the guard's
count, the metric sums; K of them in a block) must not read the device from the host: under capture
such a read fails, or, in the eager warm-up, stalls every update. And it must not make new state
tensors once warmed up: a tensor made inside a capture lives in the graph's pool and its zero-fill
is replayed every update (Adam's moments, the metric sums reset each time). Both show only on a GPU
there, where device minutes are scarce; here the same Python runs eagerly on the CPU, so the
dispatcher sees every op it issues.

A host read on a source line that itself tests for the CPU (``x.device.type == "cpu"``) is a
CPU-only branch and allowed (CrossQ's batch renorm warm-up shortcut).
"""

from __future__ import annotations

import gc
import linecache
import traceback

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from spreeze_like.algos.graphed import StepRunner
from spreeze_like.algos.networks import Critic, StackedQ
from tests.trainer.test_gpu_steps import learners

# ops that read a tensor's value on the host, or whose output shape depends on it
HOST_READS = {"_local_scalar_dense", "nonzero", "is_nonzero", "equal", "masked_select", "unique", "_unique2",
              "unique_consecutive", "repeat_interleave"}
CPU_BRANCH = 'device.type == "cpu"'


@pytest.fixture(autouse=True)
def gpu_critic_path(monkeypatch):
    """The GPU's critic path, which a capture records: the batched layers (CrossQ: without its CPU-only
    warm-up shortcut)."""
    monkeypatch.setattr(StackedQ, "batched_on_cpu", True)


@pytest.fixture(params=["batched", "large-batch"])
def critic_layout(request, monkeypatch):
    """For the tests of a learner's updates, both of the GPU's critic paths: the batched layers, or, past
    ``Critic.batched_max_rows`` (lowered under these tests' 64 rows), the networks one by one on their
    slices of the stack, which a GPU takes at large batches."""
    if request.param == "large-batch":
        monkeypatch.setattr(Critic, "batched_max_rows", 32)


def gpu_path_learners(algo: str = "sac", **kwargs):
    """Learners that run, on the CPU, the update a GPU captures: autograd's ``step`` (``--learner-step auto``
    on a CPU learner takes the explicit step instead, which no GPU runs) from a device mirror."""
    critic, actor, stats = learners("cpu", algo, step_mode="eager", device_replay="on", **kwargs)
    for learner in (critic, actor):
        assert learner.part_step == learner.part.step, "not the step a GPU captures"
    return critic, actor, stats


def _caller() -> str:
    """``file:line: text`` of the innermost frame in spreeze_like (the code that asked for the read)."""
    for frame in reversed(traceback.extract_stack()):
        if "/spreeze_like/" in frame.filename:
            return f"{frame.filename.split('/spreeze_like/')[1]}:{frame.lineno}: " + \
                linecache.getline(frame.filename, frame.lineno).strip()
    return "?"


class HostReads(TorchDispatchMode):
    """Records the host reads issued while it is active, with the line that issued each."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in HOST_READS:
            where = _caller()
            if CPU_BRANCH not in where:
                self.reads.append(f"{func.overloadpacket.__name__} at {where}")
        return func(*args, **(kwargs or {}))


def captured_body(runner: StepRunner) -> None:
    """What ``StepRunner._capture`` records for one update: the runner's own ``one_update``, uncached casts."""
    runner.one_update(cache=False)


def state_tensors(learner) -> dict[str, int]:
    """Every state tensor of a learner that a captured update writes: name -> storage address."""
    out = {}
    for name, opt in learner.part.optimizers.items():
        for i, state in enumerate(opt.state.values()):
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    out[f"{name}[{i}].{key}"] = value.data_ptr()
    for owner, obj in (("guard", learner.guard), ("metrics", learner.metrics)):
        for key, value in vars(obj).items():
            if isinstance(value, torch.Tensor):
                out[f"{owner}.{key}"] = value.data_ptr()
    return out


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg", "crossq"])
@pytest.mark.parametrize("updates_per_graph", [1, 4])
@pytest.mark.usefixtures("critic_layout")
def test_a_captured_update_reads_nothing_on_the_host(algo, updates_per_graph, monkeypatch):
    critic, actor, _ = gpu_path_learners(algo, updates_per_graph=updates_per_graph)
    for learner in (critic, actor):
        learner.batches.sync()
        for _ in range(3):  # the warm-up a capture follows (StepRunner's default)
            learner.runner._run_one()
        # host copies that bypass the dispatcher
        copies: list[str] = []
        for method in ("tolist", "numpy", "item"):
            original = getattr(torch.Tensor, method)

            def recorded(self, *a, _original=original, _name=method, _copies=copies, **k):
                _copies.append(f"Tensor.{_name} at {_caller()}")
                return _original(self, *a, **k)

            monkeypatch.setattr(torch.Tensor, method, recorded)
        reads = HostReads()
        with reads:
            for _ in range(updates_per_graph):  # a block graph holds K whole updates
                captured_body(learner.runner)
        monkeypatch.undo()
        found = reads.reads + [c for c in copies if CPU_BRANCH not in c]
        assert not found, f"{type(learner).__name__} ({algo}) reads the device from the host: {found}"


@pytest.mark.parametrize("algo", ["sac", "td3", "crossq"])
@pytest.mark.usefixtures("critic_layout")
def test_warmed_up_updates_make_no_new_state_tensors(algo):
    critic, actor, _ = gpu_path_learners(algo)
    for learner in (critic, actor):
        learner.batches.sync()
        for _ in range(3):
            learner.runner._run_one()
        before = state_tensors(learner)
        assert any(".exp_avg" in k for k in before) and "metrics._sum" in before and "guard.found" in before
        for _ in range(4):  # TD3: both variants (with and without the delayed target update)
            captured_body(learner.runner)
        assert state_tensors(learner) == before


def test_the_checks_catch_a_host_read_and_new_state(monkeypatch):
    """The two tests above fail on the bugs they are for (a .item() in the step, state made late)."""
    critic, _, _ = gpu_path_learners("sac")
    critic.batches.sync()
    for _ in range(3):
        critic.runner._run_one()
    step = critic.runner.step

    def step_with_a_read(batch):
        out = step(batch)
        float(batch.reward.mean())  # the bug: a host read inside the update
        critic.metrics._sum = critic.metrics._sum.clone()  # the bug: state replaced after the warm-up
        return out

    monkeypatch.setattr(critic.runner, "step", step_with_a_read)
    before = state_tensors(critic)
    reads = HostReads()
    with reads:
        captured_body(critic.runner)
    assert any(r.startswith("_local_scalar_dense") for r in reads.reads)
    assert state_tensors(critic) != before


def test_a_graph_runner_needs_an_eager_warm_up():
    part = learners("cpu")[0].part
    with pytest.raises(ValueError, match="warmup"):
        StepRunner(part, part.step, 8, ("obs",), mode="cuda-graph", warmup=0)
    StepRunner(part, part.step, 8, ("obs",), mode="eager", warmup=0)  # eager has nothing to capture


def _live_autograd_graphs() -> dict[int, str]:
    """Every live tensor that holds an autograd graph: id -> shape and node."""
    gc.collect()
    out = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.grad_fn is not None:
            out[id(obj)] = f"{tuple(obj.shape)} {type(obj.grad_fn).__name__}"
    return out


@pytest.mark.parametrize("algo", ["sac", "td3", "crossq"])
@pytest.mark.usefixtures("critic_layout")
def test_no_autograd_graph_outlives_the_learners_updates(algo):
    """A tensor with a graph that lives between updates (a view of a parameter made with grad enabled)
    holds the parameter's gradient accumulator, made on the stream current at the time: every backward
    then accumulates on the default stream, and a CUDA graph capture fails on it (the first capture of
    every process on the H200, 2026-11-27, from the weight publisher's flat views)."""
    before = _live_autograd_graphs()
    critic, actor, _ = gpu_path_learners(algo)
    for _ in range(3):
        critic.update()
        actor.update()
    critic.flush()
    actor.flush()
    left = {k: v for k, v in _live_autograd_graphs().items() if k not in before}
    assert not left, f"tensors that keep an autograd graph alive between updates: {sorted(left.values())}"
