"""Checkpoint parts: a parallel run's assembled checkpoint is the serial mode's format."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from spreeze_like.algos.base import AlgoSpec
from spreeze_like.checkpoint import load_latest, save_checkpoint
from spreeze_like.config import TrainConfig
from spreeze_like.envs import env_info
from spreeze_like.metrics import stats_schema
from spreeze_like.procs.parts import assemble_payload, read_part, remove_parts, to_cpu, write_part
from spreeze_like.replay import ReplayStorage, UniformSampler
from spreeze_like.roles.actor_learner import ActorLearner
from spreeze_like.roles.critic_learner import CriticLearner
from spreeze_like.roles.ports import LocalBoard, LocalStatsBlock
from spreeze_like.rundir import prepare_run
from spreeze_like.serial import SerialTrainer


def _learners(config: TrainConfig):
    info = env_info(config.env)
    spec = AlgoSpec.from_config(config, info.obs_dim, info.act_dim)
    storage = ReplayStorage.local(1000, info.obs_dim, info.act_dim)
    rng = np.random.default_rng(0)
    n = 200
    storage.add(rng.normal(size=(n, info.obs_dim)), rng.uniform(-1, 1, (n, info.act_dim)), rng.normal(size=n),
                rng.normal(size=(n, info.obs_dim)), np.zeros(n))
    stats = LocalStatsBlock(stats_schema(1))
    actor_board, critic_board = LocalBoard(), LocalBoard()
    critic = CriticLearner(spec, "cpu", UniformSampler(storage, seed=1), actor_board, critic_board,
                           stats.role("critic-learner"), 32)
    actor = ActorLearner(spec, "cpu", UniformSampler(storage, seed=2), critic_board, actor_board,
                         stats.role("actor-learner"), 32)
    for _ in range(3):
        critic.update()
        actor.update()
    return critic, actor


def test_parts_round_trip_and_cleanup(tmp_path):
    state = {"w": torch.arange(4.0), "nested": [{"t": torch.ones(2)}, 3], "n": 7}
    write_part(tmp_path, 5, "critic-learner", state)
    back = read_part(tmp_path, 5, "critic-learner")
    assert torch.equal(back["w"], state["w"]) and back["nested"][1] == 3 and back["n"] == 7
    assert to_cpu(state)["nested"][0]["t"].device.type == "cpu"
    remove_parts(tmp_path)
    assert not (tmp_path / "checkpoints" / "parts").exists()


def test_assembled_checkpoint_resumes_in_serial_mode(tmp_path):
    config = dataclasses.replace(TrainConfig(), hidden_sizes=(16, 16), batch_size=32, logdir=str(tmp_path),
                                 samplers=2, total_steps=1000, log_interval=0, serial=True).resolve()
    critic, actor = _learners(config)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(config.to_json())
    payload = assemble_payload(config.to_dict(), {"learner": critic.state_dict()}, {"learner": actor.state_dict()},
                               samplers=[(300, 2), (200, 1)], env_steps=500, generation=0,
                               evals=[(250, -1000.0, 12.5)], seed=config.seed)
    save_checkpoint(run_dir, payload, 500)
    loaded, _ = load_latest(run_dir)
    assert loaded["mode"] == "parallel" and loaded["env_steps"] == 500 and loaded["critic_updates"] == 3

    resumed = SerialTrainer(dataclasses.replace(config, resume=str(run_dir)),
                            prepare_run(dataclasses.replace(config, resume=str(run_dir))), print_fn=lambda s: None)
    try:
        assert [s.env_steps for s in resumed.samplers] == [300, 200]
        assert resumed.critic.updates == 3 and resumed.actor.updates == 3
        for got, want in zip(resumed.critic.part.critic.parameters(), critic.part.critic.parameters()):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert resumed.evals == [(250, -1000.0, 12.5)]
    finally:
        resumed.close()
