"""Learner update rates for tools/bench_gpu.py: step modes, the full critic update, dual learners.

Every rate here is measured on synthetic replay (random transitions of the env's sizes), so it is
the learner alone: no samplers, no pacing. What each function times:

* :func:`step_modes`: one SAC critic step on a fixed batch, four ways: eager PyTorch, our
  :class:`~spreeze_like.algos.graphed.StepRunner` replaying a captured CUDA graph, the same with the
  step compiled by inductor first (``compiled-graph``), and ``torch.compile(mode="reduce-overhead")``
  of the step (inductor + its CUDA graph trees).
  Compile time is reported separately. This is the measurement that chose the graph path.
* :func:`critic_update_rate`: ``CriticLearner.update()`` as the trainer calls it (batch drawn from
  the replay -- on the device mirror when it is on --, step, metrics, weight publish every
  ``sync_period``): the headline "critic update frames/s".
* :func:`dual_vs_single`: SAC updates/s of the two learners in two processes (real shared-memory
  weight boards between them, each with its own process and CUDA context) against one process
  that alternates the critic and the actor update.

Timing: wall clock around N updates with a device synchronisation at both ends; the first
``warmup`` updates (graph capture, allocator, cuBLAS) are excluded and reported as start-up.
Nothing here is shared beyond the dual measurement's two boards, which the parent creates and
unlinks in a ``finally`` (a crash of a child leaves them to that ``finally``; a crash of the
parent leaves them to the next run's sweep of dead creators).
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_module
import time
import traceback
from typing import Any

import numpy as np

OBS_DIM, ACT_DIM = 17, 6  # HalfCheetah-v5


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _spec(algo: str = "sac", precision: str = "fp32") -> Any:
    from spreeze_like.algos.spec import AlgoSpec

    return AlgoSpec(algo=algo, obs_dim=OBS_DIM, act_dim=ACT_DIM, hidden_sizes=(256, 256), precision=precision)


def random_storage(rows: int) -> Any:
    """A local replay storage holding ``rows`` random HalfCheetah-sized transitions."""
    from spreeze_like.replay import ReplayStorage

    rng = np.random.default_rng(0)
    storage = ReplayStorage.local(rows, OBS_DIM, ACT_DIM)
    for start in range(0, rows, 65536):
        n = min(65536, rows - start)
        storage.add(rng.normal(size=(n, OBS_DIM)), rng.uniform(-1, 1, (n, ACT_DIM)), rng.normal(size=n),
                    rng.normal(size=(n, OBS_DIM)), (rng.random(n) < 0.01).astype(np.float32))
    return storage


def _timed(fn: Any, device: str, seconds: float, min_calls: int = 20) -> tuple[float, int]:
    """(calls/s, calls) of ``fn`` for about ``seconds`` (synchronised at both ends)."""
    _sync(device)
    t0, calls = time.perf_counter(), 0
    while True:
        for _ in range(min_calls):
            fn()
        calls += min_calls
        if time.perf_counter() - t0 >= seconds:
            break
    _sync(device)
    return calls / (time.perf_counter() - t0), calls


def step_modes(device: str, batch: int, seconds: float, modes: tuple[str, ...], precision: str = "fp32") -> dict:
    """Critic step rate per mode on one fixed batch (see the module docstring)."""
    import torch

    from spreeze_like.algos import make_critic_part
    from spreeze_like.algos.graphed import CRITIC_INPUTS, StepRunner, untraced_optimizers
    from spreeze_like.roles.nonfinite import NonFiniteGuard
    from spreeze_like.roles.ports import LocalStatsBlock

    out: dict[str, Any] = {}
    for mode in modes:
        part = make_critic_part(_spec(precision=precision), device)
        guard = NonFiniteGuard(part, "critic-learner", LocalStatsBlock({"c": ["nonfinite_steps"]}).role("c"), 10**9)
        runner = StepRunner(part, lambda b, part=part: part.step(b)[0], batch, CRITIC_INPUTS, begin=guard.begin,
                            mode=mode if mode in ("cuda-graph", "compiled-graph") else "eager")
        g = torch.Generator(device=device).manual_seed(0)
        for t in runner.inputs.values():
            t.copy_(torch.rand(t.shape, generator=g, device=device))
        t0 = time.perf_counter()
        try:
            if mode == "compile":
                for _ in range(3):  # the optimiser's state exists before tracing (as our graph's warm-up does)
                    part.step(runner.batch)
                untraced_optimizers(part)  # as compiled-graph does
                # used within this iteration only; a closure, as dynamo traces it best
                compiled = torch.compile(lambda: part.step(runner.batch)[0], mode="reduce-overhead")  # noqa: B023

                def call(guard=guard, compiled=compiled) -> None:
                    guard.begin()
                    compiled()
            else:
                call = runner.run  # type: ignore[assignment]
            for _ in range(5):  # warm-up (and capture / compilation)
                call()
            _sync(device)
            start_s = time.perf_counter() - t0
            rate, calls = _timed(call, device, seconds)
            out[mode] = {"updates_per_s": rate, "frames_per_s": rate * batch, "startup_s": start_s, "calls": calls}
        except Exception as exc:  # noqa: BLE001 - a mode that fails here is reported, not hidden
            # the first line of an inductor error names only the backend: keep the traceback's end too
            out[mode] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                         "detail": traceback.format_exc()[-4000:]}
    return out


def make_critic(device: str, batch: int, storage: Any, sync_period: int = 1, step_mode: str = "auto",
                device_replay: str = "auto", precision: str = "fp32", publishing_actor: bool = True,
                updates_per_graph: int = 1, separate_critic: bool = False, algo: str = "sac",
                critic_layout: str = "auto", copy_streams: bool = True) -> Any:
    """A CriticLearner of ``algo`` over ``storage`` with local boards (the actor board gets a new version
    each look).

    ``separate_critic``: with the twin Q networks as separate networks, the layout before the stacked
    critic (``tools/bench_critic_layout.SeparateCritic``, ``SeparateCrossQCritic``), for an A/B of the
    two in the same call.
    ``critic_layout``: ``auto`` (the product's rule, ``StackedQ.batched``), ``batched`` (the batched layers
    at any batch) or ``each`` (the networks one by one on a GPU too), for an A/B of the rule's limit.
    ``copy_streams``: False queues the weight copies on the learner's stream (``weight_transfer.COPY_STREAMS``),
    for an A/B of their own streams.
    """
    if separate_critic:
        from bench_critic_layout import separate_critic_classes

        with separate_critic_classes():
            return make_critic(device, batch, storage, sync_period, step_mode, device_replay, precision,
                               publishing_actor, updates_per_graph, algo=algo)
    from spreeze_like.algos import make_critic_part
    from spreeze_like.algos.networks import get_flat
    from spreeze_like.metrics import stats_schema
    from spreeze_like.replay import UniformSampler
    from spreeze_like.roles import weight_transfer
    from spreeze_like.roles.critic_learner import CriticLearner
    from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock

    spec = _spec(algo, precision=precision)
    actor_vec = get_flat([make_critic_part(spec, "cpu").actor])
    source = LocalBoard()
    source.publish(actor_vec)
    stats = LocalStatsBlock(stats_schema(1))
    before, weight_transfer.COPY_STREAMS = weight_transfer.COPY_STREAMS, copy_streams
    try:
        critic = CriticLearner(spec, device, UniformSampler(storage, seed=0), source, LocalBoard(),
                               stats.role("critic-learner"), batch, sync_period, step_mode=step_mode,
                               device_replay=device_replay, updates_per_graph=updates_per_graph)
    finally:
        weight_transfer.COPY_STREAMS = before
    if critic_layout != "auto":
        limit = {"batched": None, "each": 1}[critic_layout]
        for q in (critic.part.critic, getattr(critic.part, "critic_target", None)):
            if q is not None:
                q.batched_max_rows = limit  # an instance attribute over the class's rule
    if publishing_actor:  # as in a run: the actor learner publishes about once per critic update
        critic._actor_vec, critic._actor_board = actor_vec, source
    return critic


def critic_update_rate(device: str, batch: int, storage: Any, seconds: float, **kwargs: Any) -> dict:
    """``CriticLearner.update()`` rate (see the module docstring)."""
    critic = make_critic(device, batch, storage, **kwargs)

    def call() -> None:
        if hasattr(critic, "_actor_board"):
            critic._actor_board.publish(critic._actor_vec)
        critic.update()

    # 40 calls: a whole number of blocks (--updates-per-graph 1, 2, 4, 8), so that every timed chunk of 40
    # calls runs all the updates it takes (none left pending when the clock stops)
    t0 = time.perf_counter()
    for _ in range(40):
        call()
    _sync(device)
    start_s = time.perf_counter() - t0
    rate, calls = _timed(call, device, seconds, min_calls=40)
    pending = critic.runner.pending
    critic.flush()
    return {"updates_per_s": rate, "frames_per_s": rate * batch, "startup_s": start_s, "calls": calls,
            "step_mode": critic.runner.mode, "device_replay": type(critic.batches).__name__,
            "updates_per_graph": critic.runner.block, "pending_at_stop": pending}


# --- dual learners: two processes vs one ---------------------------------------------------------------
def _learner_proc(role: str, device: str, batch: int, rows: int, names: dict, seconds: float,
                  sync_period: int, queue: Any, go: Any) -> None:
    import torch

    from spreeze_like.ipc.weight_board import WeightBoard
    from spreeze_like.metrics import stats_schema
    from spreeze_like.roles.ports import LocalStatsBlock

    torch.set_num_threads(1)
    storage = random_storage(rows)
    stats = LocalStatsBlock(stats_schema(1))
    actor_board = WeightBoard.attach(names["actor"], "writer" if role == "actor" else "reader")
    critic_board = WeightBoard.attach(names["critic"], "writer" if role == "critic" else "reader")
    try:
        _learner_windows(role, device, batch, storage, stats, actor_board, critic_board, seconds, sync_period, queue, go)
    except Exception as exc:  # the parent waits on the queue: a learner that cannot start says why, not nothing
        queue.put((role, {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}))
        raise
    finally:
        actor_board.close()
        critic_board.close()


def _learner_windows(role: str, device: str, batch: int, storage: Any, stats: Any, actor_board: Any,
                     critic_board: Any, seconds: float, sync_period: int, queue: Any, go: Any) -> None:
    """One learner of the dual section: warm up, say ready, time its window when both are ready."""
    from spreeze_like.replay import UniformSampler
    from spreeze_like.roles.actor_learner import ActorLearner
    from spreeze_like.roles.critic_learner import CriticLearner

    if role == "critic":
        learner: Any = CriticLearner(_spec(), device, UniformSampler(storage, seed=0), actor_board, critic_board,
                                     stats.role("critic-learner"), batch, sync_period)
    else:
        learner = ActorLearner(_spec(), device, UniformSampler(storage, seed=1), critic_board, actor_board,
                               stats.role("actor-learner"), batch, sync_period)
    for _ in range(10):
        learner.update()
    _sync(device)
    queue.put((role, "ready"))
    go.wait(300)  # both timed windows start together
    rate, calls = _timed(learner.update, device, seconds)
    learner.flush()
    queue.put((role, {"updates_per_s": rate, "calls": calls, "copy_version": learner.copy_version,
                      "publishes": learner.publisher.published, "merged": learner.publisher.merged}))


def dual_vs_single(device: str, batch: int, seconds: float, rows: int = 200_000, sync_period: int = 1) -> dict:
    """SAC updates/s: critic and actor learners in two processes vs alternating in one (module docstring)."""
    from spreeze_like.algos import make_actor_part, make_critic_part
    from spreeze_like.ipc import naming
    from spreeze_like.ipc.weight_board import WeightBoard
    from spreeze_like.metrics import stats_schema
    from spreeze_like.replay import UniformSampler
    from spreeze_like.roles.actor_learner import ActorLearner
    from spreeze_like.roles.critic_learner import CriticLearner
    from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock

    spec = _spec()
    sizes = {"actor": make_actor_part(spec, "cpu").actor_vector().size,
             "critic": make_critic_part(spec, "cpu").critic_vector().size}
    run_id = naming.new_run_id()
    boards = {k: WeightBoard.create(naming.segment_name(run_id, f"bench{k}"), n) for k, n in sizes.items()}
    ctx = mp.get_context("spawn")
    queue, go = ctx.Queue(), ctx.Event()
    names = {k: b.name for k, b in boards.items()}
    procs = [ctx.Process(target=_learner_proc, args=(role, device, batch, rows, names, seconds, sync_period, queue, go))
             for role in ("critic", "actor")]
    dual: dict[str, Any] = {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + 300
        while len(dual) < 4:
            try:
                role, value = queue.get(timeout=1.0)
            except queue_module.Empty:  # a learner that died without a word (killed, or its queue put failed)
                dead = [f"{p.name} exit {p.exitcode}" for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"dual learners: {', '.join(dead) or 'no report within 300 s'}") from None
                continue
            if isinstance(value, dict) and "error" in value:
                raise RuntimeError(f"dual learners: the {role} learner failed: {value['error']}")
            dual[f"{role}_ready" if value == "ready" else role] = value
            if "critic_ready" in dual and "actor_ready" in dual:
                go.set()
    finally:
        reported = len(dual) == 4  # else the other learner may wait for its go: not 60 s more for it
        for p in procs:
            p.join(timeout=60 if reported else 1)
            if p.is_alive():
                p.kill()
                p.join()
        for b in boards.values():
            b.close()
            b.unlink()
    # one process, the same two learners, alternating (local boards: no IPC needed in one process)
    storage = random_storage(rows)
    stats = LocalStatsBlock(stats_schema(1))
    a_board, c_board = LocalBoard(), LocalBoard()
    critic = CriticLearner(spec, device, UniformSampler(storage, seed=0), a_board, c_board,
                           stats.role("critic-learner"), batch, sync_period)
    actor = ActorLearner(spec, device, UniformSampler(storage, seed=1), c_board, a_board,
                         stats.role("actor-learner"), batch, sync_period)

    def both() -> None:
        critic.update()
        actor.update()

    for _ in range(10):
        both()
    single, _ = _timed(both, device, seconds)
    pair = min(dual["critic"]["updates_per_s"], dual["actor"]["updates_per_s"])
    return {"dual": dual, "dual_sac_updates_per_s": pair, "single_sac_updates_per_s": single,
            "ratio_dual_over_single": pair / single}
