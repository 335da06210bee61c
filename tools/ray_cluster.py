"""A throwaway multi-node Ray cluster on this machine, inside a private network namespace, for tests and benchmarks.

``LocalCluster`` starts a head node (``ray start --head --num-cpus=0``: no actor ever lands on it, as on a
desktop that keeps its cores for learners) and one or more worker nodes (``ray start --address=127.0.0.1:PORT
--num-cpus=K``), each with its own port range, a 100 MB object store, no dashboard, usage stats off and token
authentication with a fresh random token. Every Ray process it starts lives under one short temp folder
(``--temp-dir``) and holds the cluster's token in its environment, so ``stop()`` finds them by either (plus
their descendants, whose command line Ray rewrites to ``ray::<Class>.<method>``) and kills them by pid,
SIGTERM then SIGKILL, then removes the folder. (The head's Ray client server names no folder: found by the
folder alone, it outlived every stop until 2026-11-30.) It never runs ``ray stop``: that kills every Ray
process on the machine, other users' clusters included.

Why a private network namespace: Ray replaces 127.0.0.1 with the machine's NIC address when a node
registers (design note, RAY_REMOTE_SAMPLERS.md section 4), so a "local" cluster would listen on the LAN.
In a namespace with only ``lo`` there is no other address to pick, every node registers as 127.0.0.1 and
no packet can leave the machine; ``LocalCluster.start`` refuses to run outside one and checks that every
node's address is in 127.0.0.0/8. Two ways in:

- :func:`private_netns` (context manager, needs CAP_SYS_ADMIN): moves the calling thread into a new
  namespace with ``lo`` up, and back on exit. Subprocesses started inside inherit it; the namespace
  disappears with its last process. The Ray tests and ``tools/bench_remote.py`` use it.
- :func:`netns_argv`: ``unshare -n`` plus ``lo`` up around any command, for a shell:
  ``python tools/ray_cluster.py --workers 1 --worker-cpus 2 -- python -m spreeze_like.run --ray {address} ...``
  runs the command in a fresh namespace with a cluster, ``{address}`` replaced, and tears it all down.

Crash behaviour: the cluster's daemons are not children of the process that started them (``ray start``
exits), so a test process killed with SIGKILL leaves them running in their namespace; ``stop()`` is also
registered with ``atexit``. Nothing here writes outside the temp folder (the token is passed in the
environment, so Ray does not write ``~/.ray/auth_token``).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import fcntl
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
# Ports inside one node's block: GCS (head only), then the fixed daemons, then the worker-process range.
_PORTS_PER_NODE = 100
_OFFSETS = {"gcs": 0, "node_manager": 1, "object_manager": 2, "agent_listen": 3, "agent_grpc": 4, "runtime_env": 5,
            "metrics": 6, "dashboard": 7, "client_server": 8}
_FIRST_WORKER_PORT = 10
# Process titles Ray gives its own workers and agents: ``ray::IDLE`` is a pooled worker with no task.
_RAY_OWN = ("IDLE", "DashboardAgent", "RuntimeEnvAgent")
OBJECT_STORE_BYTES = 100_000_000


class ClusterError(RuntimeError):
    """The cluster could not be started or checked (the message says which node and why)."""


# ---- network namespace ---------------------------------------------------------------------------------------

def net_interfaces() -> set[str]:
    """Network interfaces visible to this process (``/proc/self/net/dev`` is per network namespace)."""
    with open("/proc/self/net/dev") as f:
        return {line.split(":", 1)[0].strip() for line in f.readlines()[2:] if ":" in line}


def in_private_netns() -> bool:
    """True when the only interface this process can reach is loopback: no packet can leave the machine."""
    try:
        return net_interfaces() <= {"lo"}
    except OSError:
        return False


def _bring_loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def netns_unavailable_reason() -> str | None:
    """Why a private network namespace cannot be made here (None when it can): tried in a throwaway child."""
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed"
    try:
        done = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -n failed: {exc}"
    if done.returncode != 0:
        return f"unshare -n is not permitted here ({done.stderr.strip() or done.returncode}); run as root"
    return None


@contextlib.contextmanager
def private_netns() -> Iterator[None]:
    """Run the block (and every process it starts) in a new network namespace with only ``lo``, up.

    The calling thread moves in with ``unshare(CLONE_NEWNET)`` and back with ``setns`` on exit; threads
    started before the block stay outside. Already inside a private namespace: nothing to do.
    """
    if in_private_netns():
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise ClusterError(f"unshare(CLONE_NEWNET) failed: {os.strerror(err)}; run as root or under unshare -rn")
        try:
            _bring_loopback_up()
            assert in_private_netns(), net_interfaces()
            yield
        finally:
            if libc.setns(home, CLONE_NEWNET) != 0:  # pragma: no cover - root can always go back
                raise ClusterError(f"setns back to the original network namespace failed: "
                                   f"{os.strerror(ctypes.get_errno())}")
    finally:
        os.close(home)


def netns_argv(argv: list[str]) -> list[str]:
    """``argv`` wrapped to run in a new network namespace with ``lo`` up (``unshare -n`` and ``ip``)."""
    return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


# ---- the cluster ---------------------------------------------------------------------------------------------

@dataclass
class _Node:
    name: str
    first_port: int
    num_cpus: int

    def port(self, what: str) -> int:
        return self.first_port + _OFFSETS[what]


@dataclass
class LocalCluster:
    """A head with no CPUs plus ``workers`` nodes of ``worker_cpus`` CPUs each, all on 127.0.0.1.

    ``first_port`` starts the head's block of 100 ports; worker node i gets the block after it
    (tests: 23000, benchmarks: 24000, per the team's port plan). Use as a context manager or call
    :meth:`start` and :meth:`stop`.
    """

    workers: int = 1
    worker_cpus: int = 1
    first_port: int = 23000
    gcs_port: int = 6500
    object_store_bytes: int = OBJECT_STORE_BYTES
    ray_bin: str = field(default_factory=lambda: str(Path(sys.executable).with_name("ray")))
    temp_dir: str = ""
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    _nodes: list[_Node] = field(default_factory=list)
    _stopped: bool = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def env(self) -> dict[str, str]:
        """The environment every Ray process and driver of this cluster needs (token auth, no usage stats)."""
        return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_ADDRESS": self.address}

    def __enter__(self) -> LocalCluster:  # noqa: PYI034 - typing.Self needs Python 3.11; we support 3.10
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 60.0) -> LocalCluster:
        if not in_private_netns():
            raise ClusterError(f"refusing to start Ray outside a private network namespace (interfaces: "
                               f"{sorted(net_interfaces())}); use private_netns() or netns_argv()")
        # Short: Ray puts AF_UNIX sockets under it, and their paths must stay under 107 bytes.
        self.temp_dir = tempfile.mkdtemp(prefix="spzray", dir="/tmp")
        atexit.register(self.stop)
        head = _Node("head", self.first_port, 0)
        try:
            self._ray_start(head, ["--head", f"--port={self.gcs_port}", "--include-dashboard=false",
                                   f"--dashboard-port={head.port('dashboard')}",
                                   f"--ray-client-server-port={head.port('client_server')}"])
            for i in range(self.workers):
                node = _Node(f"worker-{i}", self.first_port + _PORTS_PER_NODE * (i + 1), self.worker_cpus)
                self._ray_start(node, [f"--address={self.address}"])
            self.wait_for_nodes(1 + self.workers, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _ray_start(self, node: _Node, extra: list[str]) -> None:
        argv = [self.ray_bin, "start", *extra, f"--num-cpus={node.num_cpus}", "--num-gpus=0",
                f"--object-store-memory={self.object_store_bytes}", f"--temp-dir={self.temp_dir}",
                "--disable-usage-stats", f"--node-manager-port={node.port('node_manager')}",
                f"--object-manager-port={node.port('object_manager')}",
                f"--dashboard-agent-listen-port={node.port('agent_listen')}",
                f"--dashboard-agent-grpc-port={node.port('agent_grpc')}",
                f"--runtime-env-agent-port={node.port('runtime_env')}",
                f"--metrics-export-port={node.port('metrics')}",
                f"--min-worker-port={node.first_port + _FIRST_WORKER_PORT}",
                f"--max-worker-port={node.first_port + _PORTS_PER_NODE - 1}"]
        done = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise ClusterError(f"ray start ({node.name}) exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}")
        self._nodes.append(node)

    def nodes(self) -> list[dict]:
        """Ray's view of the cluster's nodes (``ray.nodes()`` from a throwaway driver process)."""
        code = (f"import json, ray; ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False); "
                "print('NODES' + json.dumps([{k: n[k] for k in ('NodeID', 'Alive', 'NodeManagerAddress', "
                "'NodeManagerPort', 'Resources')} for n in ray.nodes()])); ray.shutdown()")
        done = subprocess.run([sys.executable, "-c", code], env=self.env(), capture_output=True, text=True,
                              timeout=60, check=False)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("NODES")]
        if done.returncode != 0 or not lines:
            raise ClusterError(f"cannot list the nodes of {self.address}: {done.stderr[-1500:]}")
        return json.loads(lines[-1][len("NODES"):])

    def node_addresses(self) -> list[str]:
        return [n["NodeManagerAddress"] for n in self.nodes() if n["Alive"]]

    def wait_for_nodes(self, count: int, timeout_s: float) -> list[dict]:
        """Wait until ``count`` nodes are alive; check that each registered on loopback."""
        deadline = time.monotonic() + timeout_s
        while True:
            alive = [n for n in self.nodes() if n["Alive"]]
            if len(alive) >= count:
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"{len(alive)} of {count} Ray nodes alive after {timeout_s:.0f} s")
            time.sleep(0.5)
        off_loopback = [n["NodeManagerAddress"] for n in alive
                        if ipaddress.ip_address(n["NodeManagerAddress"]) not in ipaddress.ip_network("127.0.0.0/8")]
        if off_loopback:
            raise ClusterError(f"Ray nodes registered outside 127.0.0.0/8: {off_loopback}")
        return alive

    # ---- processes ----

    def processes(self) -> list[psutil.Process]:
        """Every live process of this cluster, and their descendants: a command line naming its temp folder, or
        this cluster's token in the environment (never this process or its ancestors).

        The token catches what the folder misses: the head's Ray client server (``python -m
        ray.util.client.server``) names neither the folder nor a parent of ours, and outlived every stop until
        2026-11-30. It also catches any driver still running with :meth:`env`, which a stop should end too.
        """
        if not self.temp_dir:
            return []
        me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        found: dict[int, psutil.Process] = {}
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if p.pid not in me and (any(self.temp_dir in part for part in (p.info["cmdline"] or []))
                                        or p.environ().get("RAY_AUTH_TOKEN") == self.token):
                    found[p.pid] = p
                    for child in p.children(recursive=True):
                        found[child.pid] = child
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return [p for p in found.values() if _alive(p)]

    def raylet(self, node_index: int) -> psutil.Process:
        """The raylet of node ``node_index`` (0 = head, i = worker i-1)."""
        port = self._nodes[node_index].port("node_manager")
        for p in self.processes():
            try:
                cmd = " ".join(p.cmdline())
            except psutil.NoSuchProcess:
                continue
            if "raylet" in cmd.split(" ", 1)[0] and f"--node_manager_port={port}" in cmd:
                return p
        raise ClusterError(f"no raylet found for {self._nodes[node_index].name} (node manager port {port})")

    def worker_raylet_pid(self, i: int = 0) -> int:
        return self.raylet(i + 1).pid

    def actor_processes(self, class_name: str = "") -> list[psutil.Process]:
        """Live Ray worker processes of this cluster running an actor (``ray::<Class>...``).

        Idle pooled workers (``ray::IDLE``) and Ray's own agents are left out.
        """
        out = []
        for p in self.processes():
            try:
                title = " ".join(p.cmdline())
            except psutil.NoSuchProcess:
                continue
            name = title[5:] if title.startswith("ray::") else ""
            if name and not name.startswith(_RAY_OWN) and name.startswith(class_name):
                out.append(p)
        return out

    def stop(self, grace_s: float = 2.0) -> list[int]:
        """Kill every process of the cluster by pid (SIGTERM, then SIGKILL after ``grace_s``); remove the folder.

        Returns the pids that had to be SIGKILLed. Idempotent. (Measured: gcs_server, the raylets and the
        runtime-env agent outlive SIGTERM by more than 5 s, so the grace is short: the cluster is throwaway.)
        """
        if self._stopped or not self.temp_dir:
            return []
        self._stopped = True
        procs = self.processes()
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGTERM)
        _, living = psutil.wait_procs(procs, timeout=grace_s)
        # A raylet's workers may be forked while we wait: take a second look before the hard kill.
        living = {p.pid: p for p in living if _alive(p)} | {p.pid: p for p in self.processes()}
        for p in living.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(list(living.values()), timeout=5)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return sorted(living)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---- command line ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=1, help="worker nodes beside the CPU-less head")
    parser.add_argument("--worker-cpus", type=int, default=1, help="CPUs each worker node offers to actors")
    parser.add_argument("--first-port", type=int, default=24000, help="first port of the head's 100-port block")
    parser.add_argument("--gcs-port", type=int, default=6600)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- CMD ...: run CMD with the cluster up ({address} is replaced), then tear down")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --")
    if not in_private_netns():  # re-run ourselves inside a fresh namespace
        return subprocess.call(netns_argv([sys.executable, *sys.argv]))
    with LocalCluster(workers=args.workers, worker_cpus=args.worker_cpus, first_port=args.first_port,
                      gcs_port=args.gcs_port) as cluster:
        print(f"ray cluster at {cluster.address}: nodes {cluster.node_addresses()}", flush=True)
        return subprocess.call([part.replace("{address}", cluster.address) for part in command], env=cluster.env())


if __name__ == "__main__":
    sys.exit(main())
