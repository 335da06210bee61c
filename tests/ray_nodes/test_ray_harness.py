"""The pieces the Ray tests and tools/bench_remote.py stand on, checked without Ray: SlowPendulum-v1 and the
private network namespace of tools/ray_cluster.py, and how its stop finds the cluster's processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from remote_harness import ray_cluster

from spreeze_like.envs import env_info, make_env

SLOW = "spreeze_like.slow_envs:SlowPendulum-v1"


def test_slow_pendulum_is_pendulum_plus_a_sleep():
    assert env_info(SLOW).obs_dim == 3 and env_info(SLOW).act_dim == 1 and env_info(SLOW).max_episode_steps == 200
    slow, plain = make_env(SLOW), make_env("Pendulum-v1")
    a, _ = slow.reset(seed=3)
    b, _ = plain.reset(seed=3)
    np.testing.assert_array_equal(a, b)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(50, 1)).astype(np.float32)
    t0 = time.perf_counter()
    for u in actions:
        sa, ra, *_ = slow.step(u)
        sb, rb, *_ = plain.step(u)
        np.testing.assert_array_equal(sa, sb)
        assert ra == rb
    per_step = (time.perf_counter() - t0) / len(actions)
    assert per_step >= 0.002, f"{per_step * 1e3:.2f} ms per step: the 2 ms sleep is missing"


def test_slow_pendulum_refuses_a_negative_sleep():
    from spreeze_like.slow_envs import SlowPendulumEnv
    with pytest.raises(ValueError, match="step_sleep_s"):
        SlowPendulumEnv(step_sleep_s=-1.0)


def test_cluster_refuses_to_start_outside_a_private_namespace():
    if ray_cluster.in_private_netns():
        pytest.skip("this test process already runs in a private network namespace")
    with pytest.raises(ray_cluster.ClusterError, match="private network namespace"):
        ray_cluster.LocalCluster().start()


def test_private_namespace_has_only_loopback_and_is_left_again():
    reason = ray_cluster.netns_unavailable_reason()
    if reason:
        pytest.skip(reason)
    outside = ray_cluster.net_interfaces()
    with ray_cluster.private_netns():
        assert ray_cluster.net_interfaces() == {"lo"}
        ip = subprocess.run(["python3", "-c", ("import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); "
                             "s.listen(); c = socket.create_connection(s.getsockname()); print('ok')")],
                            capture_output=True, text=True, timeout=30, check=False)
        assert ip.stdout.strip() == "ok", ip.stderr  # lo is up: loopback works for children too
        off = subprocess.run(["python3", "-c", "import socket; socket.create_connection(('192.0.2.1', 9), 2)"],
                             capture_output=True, text=True, timeout=30, check=False)
        assert off.returncode != 0 and "unreachable" in off.stderr.lower(), off.stderr  # no route off the machine
    assert ray_cluster.net_interfaces() == outside


def test_netns_argv_runs_a_command_with_only_loopback():
    reason = ray_cluster.netns_unavailable_reason()
    if reason:
        pytest.skip(reason)
    done = subprocess.run(ray_cluster.netns_argv(["cat", "/proc/self/net/dev"]), capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    names = {ln.split(":")[0].strip() for ln in done.stdout.splitlines()[2:]}
    assert names == {"lo"}


def test_stop_finds_a_process_by_the_clusters_token_alone(tmp_path):
    # As the head's Ray client server (python -m ray.util.client.server): a process that names no temp folder
    # and descends from none of the cluster's, with only the token in its environment. Until 2026-11-30 the
    # stop looked for the folder alone and every test module with a cluster left that process running.
    cluster = ray_cluster.LocalCluster(temp_dir=str(tmp_path / "spzray"))
    (tmp_path / "spzray").mkdir()
    env = {**cluster.env(), "PYTHONWARNINGS": "ignore"}
    token_only = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env,
                                  start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             env={**env, "RAY_AUTH_TOKEN": "another cluster's"}, start_new_session=True)
    try:
        wait_until = time.monotonic() + 10
        while token_only.pid not in {p.pid for p in cluster.processes()} and time.monotonic() < wait_until:
            time.sleep(0.05)  # its environment is readable once exec has run
        found = {p.pid for p in cluster.processes()}
        assert token_only.pid in found and other.pid not in found and os.getpid() not in found, found
        cluster.stop(grace_s=2.0)
        assert token_only.wait(timeout=10) is not None  # ended by the stop
        assert other.poll() is None  # another cluster's process is left alone
        assert not (tmp_path / "spzray").exists()
    finally:
        for proc in (token_only, other):
            proc.kill()
            proc.wait(timeout=10)
