"""The GPU fast path's pieces, on the CPU (always) and on CUDA (skipped cleanly without it).

CPU: the step runner's eager path, the weight transfer, the device-mirror batch source with device
"cpu", the step-mode and device-replay flags. CUDA: a captured CUDA graph replays the same update
as eager PyTorch, metrics and the non-finite guard work inside the graph, asynchronous publishes
and loads carry exactly the weights (their copies, on a stream of their own, keep stream order with
the learner's updates), prioritized writes land one update later.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch

from spreeze_like.algos import make_actor_part, make_critic_part
from spreeze_like.algos.graphed import CRITIC_INPUTS, StepRunner, resolve_step_mode
from spreeze_like.algos.networks import Critic, get_flat
from spreeze_like.algos.spec import AlgoSpec
from spreeze_like.config import TrainConfig
from spreeze_like.errors import ConfigError
from spreeze_like.metrics import stats_schema
from spreeze_like.replay import PrioritizedConfig, PrioritizedSampler, ReplayStorage, SumTree, UniformSampler
from spreeze_like.roles.actor_learner import ActorLearner
from spreeze_like.roles.critic_learner import CriticLearner
from spreeze_like.roles.learning import to_batch
from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
from spreeze_like.roles.weight_transfer import FlatLoader, FlatPublisher

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda:0", marks=[pytest.mark.gpu,
                                                 pytest.mark.skipif(not CUDA, reason="needs a CUDA device")])]


def spec(algo: str = "sac") -> AlgoSpec:
    return AlgoSpec(algo=algo, obs_dim=5, act_dim=2, hidden_sizes=(32, 32), policy_delay=2 if algo == "td3" else 1)


def storage_with(rows: int = 512, capacity: int = 1024) -> ReplayStorage:
    rng = np.random.default_rng(0)
    s = ReplayStorage.local(capacity, 5, 2)
    s.add(rng.normal(size=(rows, 5)), rng.uniform(-1, 1, (rows, 2)), rng.normal(size=rows), rng.normal(size=(rows, 5)),
          (rng.random(rows) < 0.1).astype(np.float32))
    return s


def learners(device: str, algo: str = "sac", step_mode: str = "auto", device_replay: str = "auto",
             prioritized: bool = False, storage: ReplayStorage | None = None, updates_per_graph: int = 1):
    storage = storage or storage_with()
    stats = LocalStatsBlock(stats_schema(1))
    a_board, c_board = LocalBoard(), LocalBoard()
    if prioritized:
        sampler = PrioritizedSampler(storage, SumTree.local(storage.capacity), PrioritizedConfig(), seed=3)
        sampler.tree.set_max(np.arange(storage.size))
    else:
        sampler = UniformSampler(storage, seed=3)
    critic = CriticLearner(spec(algo), device, sampler, a_board, c_board, stats.role("critic-learner"), 64,
                           prioritized=prioritized, step_mode=step_mode, device_replay=device_replay,
                           updates_per_graph=updates_per_graph)
    actor = ActorLearner(spec(algo), device, UniformSampler(storage, seed=4), c_board, a_board,
                         stats.role("actor-learner"), 64, step_mode=step_mode, device_replay=device_replay,
                         updates_per_graph=updates_per_graph)
    return critic, actor, stats


# --- flags -------------------------------------------------------------------------------------------
def test_step_mode_resolution():
    assert resolve_step_mode("auto", "cpu") == "eager"
    assert resolve_step_mode("auto", "cuda:0") == "cuda-graph"
    with pytest.raises(ConfigError, match="needs a CUDA learner device"):
        resolve_step_mode("cuda-graph", "cpu")


def test_cuda_graph_flag_on_cpu_learners_is_a_one_line_error():
    with pytest.raises(ConfigError) as info:
        dataclasses.replace(TrainConfig(), learner_step="cuda-graph", actor_device="cpu", critic_device="cpu").resolve()
    assert "--learner-step" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="device-replay"):
        dataclasses.replace(TrainConfig(), device_replay="maybe").validate()


# --- both devices ------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_learners_with_the_device_mirror_train_and_publish(device, algo):
    critic, actor, stats = learners(device, algo, device_replay="on")
    for _ in range(30):
        critic.update()
        for _ in range(actor.updates_due(critic.updates)):
            actor.update()
    critic.flush()
    actor.flush()
    assert critic.batches.size == 512 and type(critic.batches).__name__ == "MirrorBatches"
    assert critic.version > 1 and actor.version > 1  # both published after their updates
    # the copy lags the actor's board by the asynchronous pipeline: on the CPU at most the version the
    # actor published after the critic's last refresh; on a GPU also a publish still in flight and one
    # folded into it (seen: 2 behind on the H100, every algorithm)
    assert 0 <= actor.version - critic.copy_version <= (1 if device == "cpu" else 3)
    if device != "cpu":
        torch.cuda.synchronize(device)  # the loader's own pinned copy has landed: nothing defers the next
    critic.refresh_copy()
    assert critic.copy_version == actor.version  # the newest published actor reaches the copy
    snap = stats.snapshot()
    assert snap["critic-learner"]["qf1_loss.count"] == 30  # every update's metrics reached the stats, none twice
    np.testing.assert_array_equal(critic.part.critic_vector(), critic.sink._vec)  # the board holds the newest


def batch_slots(learner, storage: ReplayStorage) -> np.ndarray:
    """The storage slots of the rows in a learner's static batch (its obs rows are unique normals)."""
    where = {storage.obs[i].tobytes(): i for i in range(storage.size)}
    obs = learner.runner.inputs["obs"].cpu().numpy()
    return np.array([where[row.tobytes()] for row in obs])


@pytest.mark.parametrize("device", DEVICES)
def test_mirror_batches_are_drawn_inside_the_update_over_the_latest_sync(device):
    """The uniform draw and gather are part of the update (on CUDA, of its captured graph): every update
    gets a fresh batch of complete storage rows, and after more rows are synced the same graph draws
    over them too (the size lives on the device, not baked into the capture)."""
    storage = storage_with(rows=40)
    critic, actor, _ = learners(device, storage=storage, device_replay="on")
    seen = []
    for _ in range(8):  # on CUDA: 3 warm-up updates, the capture, then replays
        critic.update()
        seen.append(batch_slots(critic, storage))
        for name in CRITIC_INPUTS:  # every column of the static batch is the storage's row at those slots
            got = critic.runner.inputs[name].cpu().numpy()
            np.testing.assert_array_equal(got, getattr(storage, name)[seen[-1]].reshape(got.shape), err_msg=name)
    assert all(s.max() < 40 for s in seen)
    assert len({s.tobytes() for s in seen}) == 8  # a fresh draw each update, replays included
    if device != "cpu":
        assert critic.runner.captures == 1
    rng = np.random.default_rng(1)
    storage.add(rng.normal(size=(400, 5)), rng.uniform(-1, 1, (400, 2)), rng.normal(size=400),
                rng.normal(size=(400, 5)), np.zeros(400, np.float32))
    later = []
    for _ in range(4):
        critic.update()  # syncs the 400 new rows, then draws over 440
        later.append(batch_slots(critic, storage))
    drawn = np.concatenate(later)
    assert drawn.max() < 440 and (drawn >= 40).mean() > 0.8  # 400 of 440 rows are new: about 91 % of draws
    actor.update()
    assert batch_slots(actor, storage).max() < 440
    # the FIFO wraps (1,140 rows into 1,024 slots): the same graph gathers the overwritten slots' new rows
    storage.add(rng.normal(size=(700, 5)), rng.uniform(-1, 1, (700, 2)), rng.normal(size=700),
                rng.normal(size=(700, 5)), np.zeros(700, np.float32))
    assert storage.size == storage.capacity == 1024
    wrapped = []
    for _ in range(4):
        critic.update()
        wrapped.append(batch_slots(critic, storage))
        for name in CRITIC_INPUTS:
            got = critic.runner.inputs[name].cpu().numpy()
            np.testing.assert_array_equal(got, getattr(storage, name)[wrapped[-1]].reshape(got.shape), err_msg=name)
    assert (np.concatenate(wrapped) < 116).any()  # slots 0..115 hold the newest rows now: drawn too
    if device != "cpu":
        assert critic.runner.captures == 1


def close(a: np.ndarray, b: np.ndarray, device: str) -> None:
    """Equal on the CPU (the same kernels in the same order); on CUDA up to a graph's reassociation."""
    if device == "cpu":
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algo", ["sac", "td3", "crossq"])
def test_blocks_of_updates_run_when_the_last_is_due_and_keep_counts_exact(device, algo):
    """--updates-per-graph 4: the updates taken wait for their block, run together (on CUDA from one graph,
    once every variant has warmed up), and make the same updates as one at a time; a flush runs what is
    pending, so counts and weights agree at every checkpoint."""
    one, _, _ = learners(device, algo, device_replay="on")
    four, four_actor, stats = learners(device, algo, device_replay="on", updates_per_graph=4)
    assert four.runner.block == 4 and one.runner.block == 1
    start = four.part.critic_vector()
    for _ in range(3):
        four.update()
    assert four.updates == 3 and four.part.updates == 0 and four.runner.pending == 3
    np.testing.assert_array_equal(four.part.critic_vector(), start)  # taken, not run yet
    four.update()  # the fourth: the block runs
    assert four.updates == four.part.updates == 4 and four.runner.pending == 0
    for _ in range(4):
        one.update()
    close(four.part.critic_vector(), one.part.critic_vector(), device)
    for _ in range(30):  # on CUDA: single-update warm-up and captures, then the block graph
        four.update()
        one.update()
    four.update()  # 35 taken: 32 done, 3 pending
    one.update()
    assert four.part.updates == 32 and four.updates == 35
    four.flush()
    one.flush()
    assert four.part.updates == 35 and four.runner.pending == 0
    close(four.part.critic_vector(), one.part.critic_vector(), device)
    if device != "cpu":
        assert any(isinstance(k, tuple) and k[0] == "block" for k in four.runner._graphs), four.runner._graphs.keys()
    assert stats.snapshot()["critic-learner"]["qf1_loss.count"] == 35  # every update's metrics, once
    for _ in range(four_actor.updates_due(four.updates)):
        four_actor.update()
    assert four_actor.updates == 35 // four_actor.policy_delay
    four_actor.flush()
    assert four_actor.part.updates == four_actor.updates
    state = four.state_dict()
    assert state["updates"] == 35


def test_blocks_of_updates_need_batches_drawn_on_the_device():
    host, _, _ = learners("cpu", device_replay="off", updates_per_graph=4)
    assert host.runner.block == 1  # host batches are filled before the update: one update per batch
    with pytest.raises(ConfigError) as info:
        dataclasses.replace(TrainConfig(), updates_per_graph=4, prioritized=True).resolve()
    assert "--updates-per-graph" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="updates-per-graph 0"):
        dataclasses.replace(TrainConfig(), updates_per_graph=0).validate()


@pytest.mark.parametrize("step_mode", ["eager", "explicit"])
def test_cpu_steps_take_the_host_rows_without_a_copy(step_mode):
    """Without a graph nothing reads the runner's static batch: the sampled rows are handed to the step as
    they are (tensors sharing the sampler's arrays), in the autograd and in the explicit step alike."""
    critic, _, _ = learners("cpu", step_mode=step_mode, device_replay="off")
    assert critic.runner.mode == step_mode
    drawn = critic.batches.draw(critic.runner)
    assert drawn.batch is not None
    assert drawn.batch.obs.shape == (64, 5) and drawn.batch.reward.shape == (64,)
    before = critic.runner.packed.clone()
    critic.runner.run(drawn.batch)
    assert torch.equal(critic.runner.packed, before)  # the static batch was not filled
    raw = critic.replay.sample(64)
    batch = to_batch(raw, torch.device("cpu"), use_weights=False)
    assert np.shares_memory(batch.obs.numpy(), raw.obs) and np.shares_memory(batch.terminated.numpy(), raw.terminated)


@pytest.mark.parametrize("device", DEVICES)
def test_weight_transfer_round_trip(device):
    part = make_critic_part(spec(), device)
    other = make_actor_part(spec(), device)
    board = LocalBoard()
    publisher = FlatPublisher(part.published_tensors(), board)
    loader = FlatLoader(other.copy_tensors(), board)

    def publish_and_load(version: int) -> None:
        publisher.request()
        publisher.poll(block=True)
        assert board.version() == version
        loader.refresh()
        if device != "cpu":
            torch.cuda.synchronize()
        np.testing.assert_array_equal(get_flat(other.copy_tensors()), get_flat(part.published_tensors()))
        assert loader.version == version

    # both keep flat views made once: they must see every in-place change, and a checkpoint load
    with torch.no_grad():
        for t in part.published_tensors():
            t.add_(1.0)
    publish_and_load(1)
    with torch.no_grad():
        for t in part.published_tensors():
            t.mul_(-0.5)
    publish_and_load(2)
    part.load_state_dict(make_critic_part(dataclasses.replace(spec(), seed=7), device).state_dict())
    publish_and_load(3)


@pytest.mark.parametrize("device", DEVICES)
def test_prioritized_critic_writes_priorities(device):
    critic, _, _ = learners(device, prioritized=True, device_replay="on")
    before = critic.replay.tree.total()
    for _ in range(5):
        critic.update()
    critic.flush()
    assert critic.replay.tree.total() != before and critic.priorities.dropped_nonfinite == 0


# --- CUDA only ---------------------------------------------------------------------------------------
BUSY_CYCLES = 400_000_000  # torch.cuda._sleep: about 0.2 s at the H200's 1.98 GHz, long enough to hold a stream


def board_vector(board: LocalBoard, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.float32)
    board.read(out)
    return out


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_publish_on_the_copy_stream_takes_the_snapshot_queued_behind_the_update():
    """The copy runs on its own stream, yet after the ``cat`` behind the update, and not after later updates."""
    part = make_critic_part(spec(), "cuda:0")
    tensors = part.published_tensors()
    n = sum(t.numel() for t in tensors)
    board = LocalBoard()
    publisher = FlatPublisher(tensors, board)
    publisher.publish_now()
    torch.cuda.synchronize()
    torch.cuda._sleep(BUSY_CYCLES)  # an update still running on the learner's stream
    with torch.no_grad():
        for t in tensors:
            t.fill_(1.0)  # what that update leaves
    assert publisher.request() is None
    with torch.no_grad():
        for t in tensors:
            t.fill_(2.0)  # the next update: not part of the snapshot
    assert publisher.poll() is None, "the copy did not wait for the update the publish was requested behind"
    assert publisher.poll(block=True) == 2
    np.testing.assert_array_equal(board_vector(board, n), np.ones(n, dtype=np.float32))
    torch.cuda.synchronize()
    assert all(bool((t == 2.0).all()) for t in tensors)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_load_waits_for_the_learner_to_scatter_the_vector_before_copying_the_next():
    """The copy stream must not overwrite the device buffer while the learner's stream has yet to read it."""
    other = make_actor_part(spec(), "cuda:0")
    tensors = other.copy_tensors()
    n = sum(t.numel() for t in tensors)
    board = LocalBoard()
    loader = FlatLoader(tensors, board)
    board.publish(np.full(n, 1.0, dtype=np.float32))
    torch.cuda.synchronize()
    torch.cuda._sleep(BUSY_CYCLES)  # the learner's stream is busy with an update
    busy = torch.cuda.Event()
    busy.record()
    assert loader.refresh() == 1  # its scatter waits behind the busy stream
    with torch.no_grad():
        seen = torch.cat([t.reshape(-1) for t in tensors])  # what the next update reads: version 1
    board.publish(np.full(n, 2.0, dtype=np.float32))
    for _ in range(1000):  # the first copy lands at once (its stream is idle); then version 2 is taken
        if loader.refresh() == 2:
            break
        time.sleep(0.001)
    assert loader.version == 2
    assert not busy.query(), "the learner's stream finished before the second load: the test did not race"
    torch.cuda.synchronize()
    np.testing.assert_array_equal(seen.cpu().numpy(), np.ones(n, dtype=np.float32))
    np.testing.assert_array_equal(get_flat(tensors), np.full(n, 2.0, dtype=np.float32))


def eager_and_graphed(algo_spec: AlgoSpec, updates: int = 12, modes: tuple[str, ...] = ("eager", "cuda-graph")
                      ) -> dict:
    """The same critic updates on the same batches, eagerly and by CUDA graph: ``{mode: (part, runner)}``."""
    g = torch.Generator(device="cuda:0").manual_seed(0)
    o, a = algo_spec.obs_dim, algo_spec.act_dim
    batches = [{n: torch.rand(s, generator=g, device="cuda:0") for n, s in
                (("obs", (64, o)), ("action", (64, a)), ("reward", (64,)), ("next_obs", (64, o)),
                 ("terminated", (64,)))} for _ in range(updates)]
    parts = {}
    for mode in modes:
        part = make_critic_part(algo_spec, "cuda:0")
        runner = StepRunner(part, lambda b, p=part: p.step(b)[0], 64, CRITIC_INPUTS, mode=mode, warmup=2)
        for b in batches:
            for n, t in b.items():
                runner.inputs[n].copy_(t)
            runner.run()
        parts[mode] = (part, runner)
    return parts


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("layout", ["batched", "each"])
@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_graph_replays_the_eager_update(algo, layout, monkeypatch):
    """``each``: the twin critic's large-batch path (``Critic.batched_max_rows``, lowered below these 64 rows),
    the networks one by one on their slices of the stack inside the captured graph."""
    if layout == "each":
        monkeypatch.setattr(Critic, "batched_max_rows", 32)
    assert Critic(5, 2, (32, 32)).batched(torch.device("cuda:0"), 64) == (layout == "batched")
    parts = eager_and_graphed(spec(algo))
    eager, graphed = parts["eager"][0], parts["cuda-graph"][0]
    assert parts["cuda-graph"][1].captures >= 1 and eager.updates == graphed.updates == 12
    tol = 0 if algo == "ddpg" else 1e-5  # ddpg draws no noise: the same kernels give the same bits
    for a, b in zip(eager.published_tensors(), graphed.published_tensors()):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    for a, b in zip(eager.critic_target_params, graphed.critic_target_params):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize(("algo", "layout"), [("td3", "batched"), ("sac", "batched"), ("crossq", "batched"),
                                             ("sac", "each")])
def test_compiled_graph_replays_the_eager_update(algo, layout, monkeypatch):
    """--learner-step compiled-graph: inductor's fused kernels inside our graph make the same updates as
    eager PyTorch, up to the rounding that fusing changes (12 Adam steps of lr 1e-3 at most). ``each``:
    the twin critic's large-batch path (as in test_graph_replays_the_eager_update)."""
    import torch._inductor.config

    if layout == "each":
        monkeypatch.setattr(Critic, "batched_max_rows", 32)

    # compile in this process: inductor's worker pool would outlive the test (in a run the supervisor
    # kills it with the learner's tagged processes, procs/descendants.py)
    monkeypatch.setattr(torch._inductor.config, "compile_threads", 1)
    parts = eager_and_graphed(spec(algo), modes=("eager", "compiled-graph"))
    eager, compiled = parts["eager"][0], parts["compiled-graph"][0]
    assert parts["compiled-graph"][1].captures >= 1 and eager.updates == compiled.updates == 12
    moved = 0.0
    for a, b, first in zip(eager.published_tensors(), compiled.published_tensors(),
                           make_critic_part(spec(algo), "cuda:0").published_tensors()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=2e-3)
        moved = max(moved, float((a - first).detach().abs().max()))
    assert moved > 5e-3  # the updates moved the weights by more than the tolerance


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_nonfinite_guard_skips_inside_the_graph():
    storage = storage_with()
    critic, _, stats = learners("cuda:0", storage=storage, device_replay="on")
    for _ in range(10):  # warm-up and capture on finite data
        critic.update()
    critic.flush()
    before = critic.part.critic_vector()
    critic.batches.mirror.column("reward").fill_(float("nan"))  # every later batch is poisoned
    for _ in range(5):
        critic.update()
    critic.metrics.flush()
    critic.guard.check()
    np.testing.assert_array_equal(before, critic.part.critic_vector())  # skipped: nothing changed
    assert stats.snapshot()["critic-learner"]["nonfinite_steps"] == 5


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_board_sizes_match_the_tensors_that_travel(algo):
    from spreeze_like.procs.segments import vector_sizes

    critic, actor = make_critic_part(spec(algo), "cpu"), make_actor_part(spec(algo), "cpu")
    assert vector_sizes(spec(algo)) == (sum(t.numel() for t in actor.published_tensors()),
                                        sum(t.numel() for t in critic.published_tensors()))
    assert sum(t.numel() for t in actor.copy_tensors()) == len(critic.critic_vector())
