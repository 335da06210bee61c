"""CrossQ's stacked critic (algos/crossq_critic.CrossQCritic): the same networks as the separate ones of
formats 1 and 2 (tools/bench_critic_layout.SeparateCrossQCritic) on both of its paths, in train mode
through and past the batch-renorm warm-up and in eval mode, and fewer kernels on the GPU's path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from spreeze_like.algos.base import AlgoSpec, Batch
from spreeze_like.algos.crossq_critic import BatchRenorm, CrossQCritic
from spreeze_like.algos.networks import StackedQ

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from bench_critic_layout import KernelOps, SeparateCrossQCritic, build_parts

OBS, ACT, HIDDEN = 5, 3, (16, 16)


def pair(seed: int, n_q: int = 2, warmup: int = 100_000) -> tuple[SeparateCrossQCritic, CrossQCritic]:
    torch.manual_seed(seed)
    separate = SeparateCrossQCritic(OBS, ACT, HIDDEN, n_q)
    torch.manual_seed(seed)
    stacked = CrossQCritic(OBS, ACT, HIDDEN, n_q)
    for m in [*separate.modules(), *stacked.modules()]:
        if isinstance(m, BatchRenorm):
            m.warmup = warmup
    return separate, stacked


def per_network(stacked: CrossQCritic, q: int, n_q: int, grads: bool = False) -> list[tuple[str, torch.Tensor]]:
    """Network ``q``'s share of every stacked parameter and running statistic (``grads``: of every
    parameter's gradient), named as in format 2: ``<module index in the nn.Sequential>.<kind>``, with
    norm ``k`` at index ``3k`` and linear layer ``k`` at ``3k + 1``; linear weights as nn.Linear's [out, in]."""
    def of(t: torch.Tensor) -> torch.Tensor:
        return t.grad if grads else t

    out = []
    for k, (norm, layer) in enumerate(zip(stacked.norms, stacked.layers)):
        width = norm.weight.numel() // n_q
        for kind in ("weight", "bias") if grads else ("weight", "bias", "running_mean", "running_var"):
            out.append((f"{3 * k}.{kind}", of(getattr(norm, kind))[q * width:(q + 1) * width]))
        out += [(f"{3 * k + 1}.weight", of(layer.weight)[q]), (f"{3 * k + 1}.bias", of(layer.bias)[q, :, 0])]
    return out


def separate_tensor(separate: SeparateCrossQCritic, q: int, name: str, grads: bool = False) -> torch.Tensor:
    index, kind = name.split(".")
    tensor = getattr(separate.qs[q][int(index)], kind)
    return tensor.grad if grads else tensor


def inputs(seed: int, rows: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, OBS, generator=g) * 3 + 1, torch.rand(rows, ACT, generator=g) * 2 - 1


@pytest.mark.parametrize("n_q", [1, 2, 3])
def test_initial_state_is_that_of_separate_networks_built_in_turn(n_q):
    separate, stacked = pair(seed=11, n_q=n_q)
    for q in range(n_q):
        for name, tensor in per_network(stacked, q, n_q):
            torch.testing.assert_close(tensor, separate_tensor(separate, q, name), rtol=0, atol=0)


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
def test_train_steps_through_the_warmup_and_eval_match_separate_networks(batched, monkeypatch):
    """Five joint forward/backward/commit rounds with a warm-up of two: the last three use r and d."""
    monkeypatch.setattr(StackedQ, "batched_on_cpu", batched)
    separate, stacked = pair(seed=5, warmup=2)
    for round_ in range(5):
        obs, action = inputs(seed=round_)
        a_sep, a_stk = action.clone().requires_grad_(True), action.clone().requires_grad_(True)
        q_sep, q_stk = separate(obs, a_sep), stacked(obs, a_stk)
        for got, expected in zip(q_stk, q_sep, strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        weights = torch.linspace(0.5, 1.5, len(q_sep))  # a different loss weight per network
        sum(w * q.square().mean() for w, q in zip(weights, q_sep)).backward()
        sum(w * q.square().mean() for w, q in zip(weights, q_stk)).backward()
        torch.testing.assert_close(a_stk.grad, a_sep.grad, rtol=1e-5, atol=1e-5)
        for q in range(2):
            for name, grad in per_network(stacked, q, 2, grads=True):
                torch.testing.assert_close(grad, separate_tensor(separate, q, name, grads=True), rtol=1e-4, atol=1e-5)
        for m in (separate, stacked):
            m.zero_grad(set_to_none=True)
            m.commit_statistics()
    assert all(norm.steps.item() == 5 and norm.steps.item() > norm.warmup for norm in stacked.norms)
    for q in range(2):  # the running statistics took the same batches
        for name, tensor in per_network(stacked, q, 2):
            torch.testing.assert_close(tensor, separate_tensor(separate, q, name), rtol=1e-5, atol=1e-6)
    separate.eval()
    stacked.eval()
    obs, action = inputs(seed=9)
    with torch.no_grad():
        for got, expected in zip(stacked(obs, action), separate(obs, action), strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


class OutputDtypes(TorchDispatchMode):
    """The output dtype of every matmul and batch norm, in call order."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in ("addmm", "baddbmm", "native_batch_norm"):
            self.seen.append((name, (out[0] if isinstance(out, tuple) else out).dtype))
        return out


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
def test_bf16_autocast_runs_the_hidden_layers_in_bf16_and_norms_and_heads_in_fp32(batched, monkeypatch):
    monkeypatch.setattr(StackedQ, "batched_on_cpu", batched)
    _, stacked = pair(seed=2)
    obs, action = inputs(seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16), OutputDtypes() as mode:
        q1, q2 = stacked(obs, action)
    per_call = 1 if batched else 2  # the one-by-one path makes each call once per network
    norms = [dtype for name, dtype in mode.seen if name == "native_batch_norm"]
    layers = [dtype for name, dtype in mode.seen if name != "native_batch_norm"]
    assert norms == [torch.float32] * 3 * per_call
    assert layers == [torch.bfloat16] * 2 * per_call + [torch.float32] * per_call  # the heads last
    assert q1.dtype == q2.dtype == torch.float32


def test_the_gpu_path_halves_the_crossq_critic_steps_matmuls_and_norms(monkeypatch):
    """Counted with the GPU's path on the CPU (batched layers, no warm-up shortcut), HalfCheetah sizes."""
    monkeypatch.setattr(StackedQ, "batched_on_cpu", True)
    spec = AlgoSpec(algo="crossq", obs_dim=17, act_dim=6, hidden_sizes=(256, 256))
    g = torch.Generator().manual_seed(0)
    batch = Batch(torch.randn(64, 17, generator=g), torch.rand(64, 6, generator=g), torch.randn(64, generator=g),
                  torch.randn(64, 17, generator=g), torch.zeros(64))
    counts = {}
    for layout, separate in (("separate", True), ("stacked", False)):
        part = build_parts(spec, "cpu", separate)["critic"]
        for _ in range(2):
            part.step(batch)
        with KernelOps() as mode:
            part.step(batch)
        counts[layout] = mode.count
    sep, stk = counts["separate"], counts["stacked"]
    matmuls = ("mm", "addmm", "bmm", "baddbmm")
    assert sum(stk[op] for op in matmuls) < 0.6 * sum(sep[op] for op in matmuls)
    assert sep["native_batch_norm"] == 6 and stk["native_batch_norm"] == 3  # three norms, twin Q
    assert sum(stk.values()) < 0.7 * sum(sep.values())


def test_the_gpu_path_ends_the_warmup_by_the_host_count_and_updates_as_the_cpu_path(monkeypatch):
    """A graph cannot read the layers' committed-update count: on the GPU's path the critic half's own update
    count picks the warm-up shortcut (step_variant 0) or the device's r and d (1). Six updates with a
    warm-up of three on both paths: the same Q values and running statistics at every step, and the
    variant turns at the third update."""
    from spreeze_like.algos import make_critic_part

    spec = AlgoSpec(algo="crossq", obs_dim=OBS, act_dim=ACT, hidden_sizes=HIDDEN, seed=4)
    parts = {}
    for batched in (False, True):
        monkeypatch.setattr(StackedQ, "batched_on_cpu", batched)
        part = make_critic_part(spec, "cpu")
        for norm in part.critic.norms:
            norm.warmup = 3
        variants, errors = [], []
        for k in range(6):
            obs, action = inputs(seed=k, rows=32)
            g = torch.Generator().manual_seed(100 + k)
            b = Batch(obs, action, torch.randn(32, generator=g), obs + torch.randn(32, OBS, generator=g), torch.zeros(32))
            variants.append(part.step_variant())
            errors.append(part.step(b)[0])
        parts[batched] = (part, variants, errors)
    (cpu, cpu_variants, cpu_errors), (gpu, gpu_variants, gpu_errors) = parts[False], parts[True]
    assert cpu_variants == gpu_variants == [0, 0, 0, 1, 1, 1]  # the count is the same on both paths
    for a, b in zip(cpu_errors, gpu_errors, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    for a, b in zip(cpu.critic.norms, gpu.critic.norms, strict=True):
        assert a.steps.item() == b.steps.item() == 6
        torch.testing.assert_close(b.running_var, a.running_var, rtol=1e-5, atol=1e-6)
