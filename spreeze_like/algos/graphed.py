"""How a learner half's update runs: eagerly, or replayed from captured CUDA graphs.

A :class:`StepRunner` owns the *static batch*: fixed tensors on the learner's device that the
learner fills before every update (gathered from the device replay mirror, or copied from a host
batch). ``run()`` then performs one update of the half on that batch:

* ``eager``: calls the half's ``step`` (bf16 autocast where the CPU has it);
* ``explicit``: calls the half's ``explicit_step``, its update with the backward pass written out by hand
  (the CPU's default in fp32; ``explicit_grad.py``, ``explicit_renorm.py``). The runner runs it as it
  runs ``eager``: the role hands it the half's ``explicit_step`` instead of ``step``;
* ``compiled-graph``: as ``cuda-graph``, with the step first compiled by ``torch.compile`` (inductor,
  default mode: fused elementwise kernels; the optimiser step, the generator's draws and
  ``backward()`` stay graph breaks), then captured in our graph: fewer kernels per replay, at the cost
  of tens of seconds of compiling during the warm-up updates;
* ``cuda-graph``: the first ``warmup`` updates of each *variant* run eagerly on a side stream (they
  are real updates: cuBLAS and the optimiser's lazily created state need them before a capture),
  the next one is captured into a ``torch.cuda.CUDAGraph`` (recording launches nothing) and every
  later update replays it. One replay is the whole update: the non-finite guard's reset, forward,
  backward, the gradient check, the fused Adam step, the soft target update. No host
  synchronisation and no ``.item()``: the step's outputs (TD errors, metric scalars) are static
  tensors that the caller reads asynchronously (``roles/learning.py``).

Why graphs: a 256x256 SAC update is dozens of small kernels, each with microseconds of CPU launch
cost, so at batch 256 the GPU would wait on Python. A replay launches them all from one call.
Measured on an H100 (``tools/bench_gpu.py --sections steps``, batch 256, SAC critic step):
eager 279-299 updates/s, ``torch.compile(mode="reduce-overhead")`` 405-510 (its graph trees break
at the generator draws, ``backward()`` and the optimiser), ``cuda-graph`` 2,787-2,804,
``compiled-graph`` 3,784-3,792. ``auto`` keeps ``cuda-graph``: ``compiled-graph`` compiles first (11.3 s
for the first step of a process, cold cache), and no full run with it has yet been seen to finish
on a GPU (docs/gpu.md).

Variants: a step whose Python control flow depends on a host counter (TD3/DDPG move their targets
every ``policy_delay`` updates) gets one graph per value of ``part.step_variant()``; each graph has
its own memory pool because the variants do not replay in a fixed order.

Host state: capturing executes the Python of ``step`` without running kernels, so host counters
it advances (``part.updates``) are restored after the capture, and a replay advances them itself.
Random numbers: the half's ``torch.Generator`` is registered with each graph, so every replay draws
fresh noise (the generator's offset advances per replay, as in eager mode).

Blocks of updates (``updates_per_replay`` K > 1, only where ``fill`` draws each update's batch on
the device): the runner takes K updates and runs them together when the K-th is due, from one graph
holding K whole updates (each with its own draw), so the graph launch is paid once per K updates
(the caller's bookkeeping per update, counters and syncs, is not). Until then the taken updates are
*pending*: the caller counts them (``LearnerRole.updates`` = done + pending) and :meth:`drain` runs
them one by one before anything reads the weights as of a count (flush, checkpoint), so update
counts stay exact. A pending update
draws its batch when it runs, from the rows synced by then. The block graph is keyed by the
variants of its K updates (TD3's delayed target update falls at a fixed place in it).

Owns device tensors and graphs of its process only; nothing shared, nothing to clean up on a crash.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from spreeze_like.algos.base import Batch
from spreeze_like.errors import ConfigError
from spreeze_like.replay.device_replay import column_view, packed_layout

STEP_MODES = ("auto", "eager", "explicit", "cuda-graph", "compiled-graph")
_STAY = contextlib.nullcontext()  # reusable: entering it does nothing
GRAPH_MODES = ("cuda-graph", "compiled-graph")
CRITIC_INPUTS = ("obs", "action", "reward", "next_obs", "terminated")
ACTOR_INPUTS = ("obs",)  # every actor loss here reads observations only


def resolve_step_mode(mode: str, device: str | torch.device, explicit_ok: bool = False) -> str:
    """``auto`` -> ``cuda-graph`` on a CUDA device; on the CPU ``explicit`` where the half can take it
    (``explicit_ok``: ``part.explicit_ok()``, see algos/explicit_grad.py), else ``eager``. A mode the
    device or the half cannot run is a ConfigError."""
    kind = torch.device(device).type
    if mode == "auto":
        if kind == "cuda":
            return "cuda-graph"
        return "explicit" if explicit_ok else "eager"
    if mode not in STEP_MODES:
        raise ConfigError(f"--learner-step {mode!r}: use one of {', '.join(STEP_MODES)}")
    if mode in GRAPH_MODES and kind != "cuda":
        raise ConfigError(f"--learner-step {mode} needs a CUDA learner device, not {device}; use auto or eager")
    if mode == "explicit" and not explicit_ok:
        raise ConfigError(f"--learner-step explicit needs a CPU learner in fp32 (this one: "
                          f"{device}); use auto or eager")
    return mode


def untraced_optimizers(part: Any) -> None:
    """Keep ``torch.compile`` out of the half's optimiser steps (they run eagerly inside a compiled step).

    Their lazily created state and the fused kernel's in-place updates trip inductor's
    functionalization ("mutating a non-functional tensor", torch 2.13); eagerly they are one fused
    kernel per group either way. Wrapped per instance, not with a decorator on the class: that would
    import torch._dynamo (1+ s of CPU) in every learner, compiled or not (tests/trainer/test_optim.py).
    """
    for optimizer in part.optimizers.values():
        optimizer.step = torch.compiler.disable(optimizer.step)


class StepRunner:
    """Runs one half's update on a static batch; see the module docstring.

    Args:
        part: a :class:`~spreeze_like.algos.base.CriticPart` or ``ActorPart``.
        step: the update (``part.step``), called with a :class:`Batch` of the static tensors.
        batch_size: rows per update (fixed: the graphs are captured for it).
        inputs: names of the batch columns the step reads (critic: all five; actor: ``obs``).
        with_weights: also a static ``weights`` column (prioritized replay's importance weights).
        begin: called at the start of every update inside the captured region (the guard's reset).
        fill: called with the runner before ``begin`` inside the captured region: device work that
            fills the static batch (a device replay mirror's uniform draw and gather), or None.
        generators: generators that ``fill`` draws from, registered with each graph like the half's.
        mode: ``eager``, ``explicit``, ``cuda-graph`` or ``compiled-graph`` (resolved; see :func:`resolve_step_mode`).
        warmup: eager updates per variant before its capture.
        updates_per_replay: K updates run together when the K-th is due (see the module docstring);
            used only with ``fill`` (each update draws its own batch on the device), else 1.
    """

    def __init__(self, part: Any, step: Callable[[Batch], Any], batch_size: int, inputs: Sequence[str],
                 with_weights: bool = False, begin: Callable[[], None] | None = None, mode: str = "eager",
                 warmup: int = 3, fill: Callable[[StepRunner], None] | None = None,
                 generators: Sequence[torch.Generator] = (), updates_per_replay: int = 1) -> None:
        if mode in GRAPH_MODES and warmup < 1:
            # the optimiser's state and the metric sums are made by the first update: made inside a capture,
            # their zero-fill would be replayed every update
            raise ValueError(f"warmup must be >= 1 eager update before a capture, got {warmup}")
        self.part, self.batch_size, self.mode, self.warmup = part, batch_size, mode, warmup
        self.fill, self.generators = fill, tuple(generators)
        if isinstance(updates_per_replay, bool) or not isinstance(updates_per_replay, int) or updates_per_replay < 1:
            raise ValueError(f"updates_per_replay must be a whole number >= 1, got {updates_per_replay!r}")
        self.block = updates_per_replay if fill is not None else 1
        self.pending = 0  # updates taken by run() and not yet run (block mode)
        self._out: Any = None  # the outputs of the last update that ran
        if mode == "compiled-graph":
            untraced_optimizers(part)
            # compiled during the warm-up updates; dynamic=None: the host counter the step advances
            # (part.updates) becomes symbolic after one recompile (dynamic=False recompiled on every call)
            step = torch.compile(step)
        self.step = step
        self.begin = begin or (lambda: None)
        spec, device = part.spec, part.device
        # the replay columns as views of one packed [batch, width] tensor, in the layout of a device
        # mirror of the same columns: a batch is then one gather (DeviceReplay.gather_packed)
        self.layout = packed_layout(tuple(inputs), spec.obs_dim, spec.act_dim)
        self.packed = torch.zeros((batch_size, sum(w for _, _, w in self.layout)), dtype=torch.float32,
                                  device=device)
        self.inputs: dict[str, torch.Tensor] = {n: column_view(self.packed, n, a, w) for n, a, w in self.layout}
        if with_weights:
            self.inputs["weights"] = torch.zeros(batch_size, dtype=torch.float32, device=device)
        self.batch = Batch(**{f: self.inputs.get(f) for f in Batch._fields})
        self._graphs: dict[Any, tuple[torch.cuda.CUDAGraph, Any]] = {}  # a variant, or ("block", variants)
        self._eager_runs: dict[int, int] = {}
        self._stream = torch.cuda.Stream(device) if mode in GRAPH_MODES else None
        # the GPU to make current around captures and replays, when it is not the process's current one (serial
        # mode on two GPUs; a learner process binds its own GPU first, devices.bind_learner_device): decided once
        index = torch.device(device).index if mode in GRAPH_MODES else None
        self._switch_to = index if index is not None and index != torch.cuda.current_device() else None
        self.captures = 0

    def reset(self) -> None:
        """Drop the captured graphs (after a checkpoint load replaced optimiser state tensors and the
        generator state they were captured with); the next updates warm up and capture again."""
        if self.pending:
            raise RuntimeError(f"{self.pending} pending updates: drain() before replacing the state they would update")
        self._graphs.clear()
        self._eager_runs.clear()

    def one_update(self, batch: Batch | None = None, cache: bool = True) -> Any:
        """One whole update's device work, as every mode runs it (eagerly, warming up, or being captured):
        the fill (a mirror's draw and gather), ``begin`` (the guard's reset), the step on the static
        batch (or ``batch``, eager mode). tests/trainer/test_capture_safety.py runs it as a capture would."""
        if self.fill is not None:
            self.fill(self)
        self.begin()
        with self.part.autocast(cache=cache):
            return self.step(self.batch if batch is None else batch)

    def fill_from_host(self, raw: Any) -> None:
        """Copy a host batch (numpy columns, e.g. a replay sampler's) into the static tensors."""
        for name, t in self.inputs.items():
            src = torch.as_tensor(getattr(raw, name)).reshape(t.shape)
            t.copy_(src, non_blocking=True)

    def run(self, batch: Batch | None = None) -> Any:
        """One update; returns the step's outputs (static tensors in graph mode).

        ``batch``: eager mode only, a batch to use instead of the static one (the CPU path hands
        the host sampler's arrays over without a copy). Graph mode always reads the static batch.
        Block mode: the update is taken and runs with its block (the outputs are the last update's
        that ran, None before the first block).
        """
        if self.block == 1:
            with self._on_device():
                return self._run_one(batch)
        if batch is not None:
            raise ValueError("block mode draws every batch inside the update: do not pass one")
        self.pending += 1
        if self.pending == self.block:
            with self._on_device():
                self._run_block()
        return self._out

    def drain(self) -> None:
        """Run the pending updates now, one by one (before a flush, a checkpoint or a weight read)."""
        with self._on_device():
            self._drain()

    def _drain(self) -> None:
        while self.pending:
            self.pending -= 1
            self._out = self._run_one()

    def _on_device(self) -> Any:
        """The learner's GPU as the current device while graphs are captured and replayed.

        A capture registers the generators' graph state on the current device and a replay's
        prologue fills it there; a learner process makes its device current at start
        (``devices.bind_learner_device``), but serial mode holds two learners, on two GPUs if there are two.
        A fresh context each time: ``torch.cuda.device`` remembers the device it replaced, so a shared
        instance entered twice would restore the wrong one.
        """
        return _STAY if self._switch_to is None else torch.cuda.device(self._switch_to)

    def _block_key(self) -> tuple[int, ...]:
        updates = self.part.updates
        try:
            variants = []
            for j in range(self.block):
                self.part.updates = updates + j
                variants.append(self.part.step_variant())
        finally:
            self.part.updates = updates
        return tuple(variants)

    def _run_block(self) -> None:
        key = ("block", self._block_key())
        graph = self._graphs.get(key)
        if graph is not None:
            updates = self.part.updates
            graph[0].replay()
            self.part.updates = updates + self.block
            self.pending, self._out = 0, graph[1]
            return
        # not captured yet: single updates (their warm-up and capture) until every variant of the
        # block has its own graph, i.e. has warmed up; then capture the block and replay it from now on
        ready = self.mode in GRAPH_MODES and all(v in self._graphs for v in key[1])
        if not ready:
            self._drain()
            return
        self._graphs[key] = self._capture(self.block)
        self._run_block()

    def _run_one(self, batch: Batch | None = None) -> Any:
        if self.mode not in GRAPH_MODES:  # eager, explicit: the step as it is
            return self.one_update(batch)
        if batch is not None:
            raise ValueError("graph mode reads the static batch: fill runner.inputs instead of passing a batch")
        variant = self.part.step_variant()
        graph = self._graphs.get(variant)
        if graph is not None:
            updates = self.part.updates
            graph[0].replay()
            self.part.updates = updates + 1
            return graph[1]
        if self._eager_runs.get(variant, 0) < self.warmup:
            self._eager_runs[variant] = self._eager_runs.get(variant, 0) + 1
            return self._side_stream_step()
        self._graphs[variant] = self._capture()
        return self._run_one()

    def _side_stream_step(self) -> Any:
        # Warm-up work on a side stream, as CUDA graph capture wants (the allocator keeps its blocks apart).
        stream, current = self._stream, torch.cuda.current_stream(self.part.device)
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            out = self.one_update()
        current.wait_stream(stream)
        return out

    def _capture(self, updates_in_graph: int = 1) -> tuple[torch.cuda.CUDAGraph, Any]:
        graph = torch.cuda.CUDAGraph()
        for generator in (self.part.generator, *self.generators):
            graph.register_generator_state(generator)  # fresh noise and fresh batch indices per replay
        updates = self.part.updates
        for optimizer in self.part.optimizers.values():
            optimizer.zero_grad(set_to_none=True)  # backward allocates the gradients from the graph's pool
        torch.cuda.synchronize(self.part.device)
        with torch.cuda.graph(graph, stream=self._stream):
            for _ in range(updates_in_graph):  # each a whole update: its draw, reset, step, counts
                out = self.one_update(cache=False)  # a cached cast would outlive the weights it was made from
        if self.part.updates != updates + updates_in_graph:
            raise RuntimeError(f"{type(self.part).__name__}.step must advance updates by exactly one per call")
        self.part.updates = updates  # the capture ran no kernels: the update happens at the first replay
        self.captures += 1
        return graph, out
