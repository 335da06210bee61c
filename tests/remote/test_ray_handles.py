"""The parts of the Ray cluster interface that run without a cluster: the /dev/shm check, the actor
class's user errors, and where the cluster's error reports go. The real-cluster tests are in tests/ray."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from spreeze_like.errors import EnvError, SpreezeError
from spreeze_like.remote import ray_handles
from spreeze_like.remote.ray_handles import SamplerActor, check_shm, local_object_store_bytes
from tests.remote.fakes import SPEC
from tests.remote.loopback import refusing_port


def fake_ray(nodes: list[dict]) -> SimpleNamespace:
    return SimpleNamespace(nodes=lambda: nodes, util=SimpleNamespace(get_node_ip_address=lambda: "10.0.0.1"))


def node(ip: str, store: float, alive: bool = True) -> dict:
    return {"NodeManagerAddress": ip, "Alive": alive, "Resources": {"CPU": 1.0, "object_store_memory": store}}


def test_object_store_bytes_count_this_machines_live_nodes_only() -> None:
    ray = fake_ray([node("10.0.0.1", 1e8), node("10.0.0.1", 2e8), node("10.0.0.2", 5e9), node("10.0.0.1", 7e9, False)])
    assert local_object_store_bytes(ray) == 3e8


def test_shm_check_names_the_object_store_flag(tmp_path: Path) -> None:
    check_shm(fake_ray([node("10.0.0.1", 1e6)]), str(tmp_path))  # room enough: nothing happens
    with pytest.raises(SpreezeError) as info:
        check_shm(fake_ray([node("10.0.0.1", 1e20)]), str(tmp_path))
    line = str(info.value)
    assert "\n" not in line and "ray start --head --object-store-memory=" in line and str(tmp_path) in line


def test_actor_keeps_a_user_error_for_its_first_call() -> None:
    init = {"env_id": "NoSuchEnv-v0", "spec": SPEC, "index": 2, "n_envs": 1, "random_steps": 0, "generation": 0}
    actor = SamplerActor(init)  # a raising constructor would reach the bridge as a bare actor death
    with pytest.raises(EnvError, match="NoSuchEnv"):
        actor.ping()
    with pytest.raises(EnvError):
        actor.collect(1, None, 0)
    good = SamplerActor({**init, "env_id": "Pendulum-v1"})
    assert good.ping()["pid"] > 0 and len(good.collect(2, None, 0)["rows"]) == 2
    good.sampler.close()


def test_cluster_error_reports_go_to_the_run_folder(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from ray._private import worker as ray_worker

    original = ray_worker.print_to_stdstream
    try:
        ray_handles.divert_cluster_errors(tmp_path / "ray-bridge.log")
        ray_worker.print_to_stdstream({"lines": ["Raylet is terminated.", "last lines"], "pid": "raylet", "is_err": False},
                                      ignore_prefix=False)
    finally:
        ray_worker.print_to_stdstream = original
    assert (tmp_path / "ray-bridge.log").read_text() == "Raylet is terminated.\nlast lines\n"


def test_connect_to_a_closed_port_is_one_line_before_ray_init() -> None:
    ray = pytest.importorskip("ray")
    port = refusing_port()
    with pytest.raises(SpreezeError, match=rf"^cannot join the Ray cluster at 127.0.0.1:{port}: nothing answers"):
        ray_handles.connect(f"127.0.0.1:{port}", "test")
    assert not ray.is_initialized()  # refused before ray.init, which would wait minutes for a head
