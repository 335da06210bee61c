"""Learning speed of spreeze_like vs SB3 and SBX (SAC, TD3, DDPG, CrossQ) and RLtools SAC: same env, seeds, machine, run.

    python tools/bench_vs_sb3.py --env Pendulum-v1 --seeds 1 2                       # parallel mode vs all peers
    python tools/bench_vs_sb3.py --env Pendulum-v1 --seeds 1 2 --serial              # serial mode vs all peers
    python tools/bench_vs_sb3.py --env Pendulum-v1 --seeds 1 2 --serial --parallel   # both modes vs all peers
    python tools/bench_vs_sb3.py --env Pendulum-v1 --seeds 1 2 --peers sbx sbx-crossq   # the SBX peers only
    python tools/bench_vs_sb3.py --env Pendulum-v1 --seeds 1 2 --peers rltools   # RLtools' compiled C++ loop
    python tools/bench_vs_sb3.py --env Pendulum-v1 --seeds 1 2 --peers sb3-td3 sbx-td3 --set algo='"td3"'   # TD3
    python tools/bench_vs_sb3.py --env HalfCheetah-v5 --seeds 1 2 --total-steps 200000 --wall-budget 1800
    python tools/bench_vs_sb3.py --env HalfCheetah-v5 --device cuda:0 --peer-device cuda   # on a GPU machine
    python tools/bench_vs_sb3.py --total-steps 600 --seeds 1 --skip-sb3 --skip-sbx   # ours only
    python tools/bench_vs_sb3.py --env gymnasium_robotics:PointMaze_UMaze-v3 --her-goals 4 --peers sb3 sbx   # goal env

For each seed it trains ours (``spreeze_like.train``, in this process tree: ``tools/peers_ours.py``)
and then each peer of ``--peers`` (default ``sb3 sbx sbx-crossq``: SB3 SAC, SBX SAC, SBX CrossQ;
``--skip-sb3`` leaves SB3 out, ``--skip-sbx`` every SBX peer, ``--skip-sbx-crossq`` CrossQ alone; ``rltools``,
RLtools SAC compiled on the spot, only when named: ``tools/peers_rltools.py``; ``sb3-td3``, ``sbx-td3``,
``sb3-ddpg``, ``sbx-ddpg`` when named, beside ours with ``--set algo='"td3"'`` or ``ddpg``; ``script-sac``,
``script-td3``, ``script-ddpg``, a single-file eager PyTorch script of each, only when named:
``tools/peers_script.py``), one
after the other, each peer run in a fresh child process (``tools/peers_runners.py``, which also says
what settings each peer gets: the same shared ones for all, SBX what SB3 gets). Before any run, a
probe child per peer checks that it is installed and that its device exists, and our devices are
resolved: a wrong device or a missing peer fails with one ``error:`` line (exit 2).

**Devices.** Ours: ``--device`` sets both learners (``--set actor_device="cuda:0"`` and
``critic_device`` one by one; ``--set`` wins). Peers: ``--peer-device auto|cpu|cuda`` (default auto):
SB3's ``device=``, SBX's JAX platform. The devices used are printed and stored per run.

**One definition of "training return" for all.** All train on ``peers_record:SpzBench/Recorded-v0``
(``tools/peers_record.py``): the base env (``--env``) inside a wrapper that records every finished
episode in a scratch folder. The training return at an episode's end is the mean of the last
``--window`` finished training episodes.

**Evaluations.** Ours: its own evaluator, every ``--eval-every`` env steps, ``--eval-episodes``
deterministic episodes; in the parallel mode it runs beside the training in its own process, so its
cost is inside our wall clock. Peers: a callback that runs the same episodes every ``--eval-every``
env steps on a separate env; the time it takes is *subtracted* from the peer's wall clock (in the
peer's favour). Wall clocks start just before ``train()`` / the peer's constructor.

**Hyperparameters.** Ours runs what a default run on the env runs: the env's algorithm
(``presets/algos.toml``) and its preset (e.g. SAC 96-96 on Pendulum-v1; CrossQ where algos.toml says, as on HalfCheetah-v5),
under the shared settings here; ``--set`` wins. The peers: MLPs 256-256 for SAC, gamma 0.99 (rl-zoo's 0.9999 on
Swimmer-v5; ``--peer-gamma``), tau 0.005 (SAC; ``--peer-tau``), batch 256, 1M replay, ``learning_starts`` (Pendulum 1,000; MuJoCo 10,000 as in
rl-zoo), UTD 1, automatic entropy tuning from alpha 1 with target -act_dim. Learning rates: ours keeps its defaults for the base env and algorithm
(SAC's actor ``auto``: 1e-3 on Pendulum-v1, 3e-4 elsewhere; critic 1e-3; alpha 1e-3); every peer has
one rate for all three and gets rl-zoo's tuned SAC value (Pendulum-v1 1e-3, MuJoCo 3e-4; ``--sb3-lr``,
all peers alike). Threads: ours 1 torch thread per process; the peers torch's default
(``--sb3-threads 0``: one per core); SBX's JAX uses its own thread pool whatever it says.

Reports (``tools/peers_report.py``) per seed and the median over seeds: wall time until the training
return first reaches ``--threshold-train``, wall time (and env step) of the first evaluation reaching
``--threshold-eval``, the returns at a fixed wall time (``--fixed-wall``, default the shortest run),
env steps/s and updates/s, the device of every run, per peer the ratios ours/peer per seed, their
median and the ratio of the medians, and a closing summary of ours / peer wall time to each threshold
per seed and the median, peer by peer. ``--peer-stop-ratio PEER=R`` stops a peer's run of a seed at
T / R s (T: our time to the eval threshold on that seed): a peer still short of a threshold when its
budget stops it gives ours / budget, an upper bound of the ratio, printed ``<=x``. The machine load is
printed before and after. ``--json FILE``
writes ``rows``, ``ratios``, ``summary`` and ``devices``, and with them every run's record and the
settings the report needs (the env, thresholds, window, and the machine in words); while the
invocation goes on it holds the records of the runs finished so far (``partial``). ``--report A.json
B.json ...`` runs nothing: it makes the report again from such files, finished or cut short by a time
limit, each seed's runs from the last file that holds the seed (a lent GPU machine's calls each run
a part). With ``--json`` or ``--curves-dir`` every run's curve is written as a ``curves.csv`` and drawn
into one PNG per env (``tools/bench_curves.py``).

Creates a scratch folder (the episode records, the peers' result files, our run folders unless
``--logdir``), removed at the end, also when a run raises.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

TOOLS_DIR = str(Path(__file__).resolve().parent)
if TOOLS_DIR not in sys.path:  # the peers_* modules beside this file; our spawned samplers import one by name
    sys.path.insert(0, TOOLS_DIR)

from peers_ours import ours_config, ours_device, run_ours
from peers_record import BASE_ENV_KWARGS_VAR, BASE_ENV_VAR, RunRecord
from peers_report import REPORT_SETTINGS, load_results, report, results_json, settings_of
from peers_runners import DEFAULT_PEERS, PEERS, peer_gamma, run_peer, run_peer_child

from spreeze_like.autotune.hardware import cpu_model, driver_gpu_models, usable_cores
from spreeze_like.config_fields import json_object
from spreeze_like.console import run_tool
from spreeze_like.envs import env_info
from spreeze_like.errors import ConfigError
from spreeze_like.rundir import write_text_atomic
from spreeze_like.write_guard import tool_output

# env -> (threshold_train, threshold_eval, learning_starts, peers' learning rate, total steps, eval_every)
ENV_DEFAULTS: dict[str, tuple[float, float, int, float, int, int]] = {
    "Pendulum-v1": (-250.0, -200.0, 1000, 1e-3, 20_000, 1000),
    "HalfCheetah-v5": (1500.0, 1500.0, 10_000, 3e-4, 200_000, 10_000),
    # Hopper earns 1 a step for staying upright, so standing still for its 1,000 steps scores about 1,000:
    # the evaluation threshold 2,500 is hopping forward (our CrossQ's evaluations jumped from at most 1,500 to
    # 2,460-3,400 within two evaluations when it learned to, BENCHMARKS.md 2026-11-30 afternoon); the training
    # one has exploration noise
    "Hopper-v5": (1500.0, 2500.0, 10_000, 3e-4, 300_000, 5000),
    # Walker2d, as Hopper: 1 a step for staying upright, so standing scores about 1,000; 2,000 is walking
    # (BENCHMARKS.md 2026-11-30 evening: our CrossQ's and SAC's first evaluations past it were 2,084-3,506,
    # and every one before at most 1,904)
    "Walker2d-v5": (1500.0, 2000.0, 10_000, 3e-4, 300_000, 5000),
    # Ant, too, earns 1 a step for staying healthy: a policy that stands scores about 1,000 (our first evaluations,
    # before any learning, were 985-991); 1,500 is moving forward (BENCHMARKS.md 2026-11-30 night)
    "Ant-v5": (1500.0, 1500.0, 10_000, 3e-4, 300_000, 5000),
    # Humanoid earns 5 a step while its torso stays up, so a policy that stands the whole 1,000 steps scores about
    # 5,000, out of reach of a 2-core CPU in 10 minutes; one that falls at once scores 94-172 (our first evaluations,
    # before any learning). 1,000 is staying up about 200 steps: an early milestone, not walking (BENCHMARKS.md
    # 2026-12-01: our CrossQ's first evaluations past it were 1,135-1,737, our SAC's best in 600 s 722-782)
    "Humanoid-v5": (1000.0, 1000.0, 10_000, 3e-4, 300_000, 5000),
    # Swimmer's reward is its forward speed: a still or wriggling swimmer scores 3-55; rl-zoo's tuned SAC ends at about
    # 345 after 1M steps. Our SAC's evaluations jumped from at most 106 to 216-290 within four evaluations, at
    # 70,000-100,000 env steps (BENCHMARKS.md 2026-12-01 morning, seed 1): 250 is swimming, 200 its training return
    # with exploration noise. The peers get rl-zoo's gamma there (peers_runners.PEER_GAMMA: 0.9999, CrossQ 0.999)
    "Swimmer-v5": (200.0, 250.0, 10_000, 3e-4, 300_000, 5000),
    # sparse: +1 a step at the goal, 300-step episodes; with --her-goals 4 (BENCHMARKS.md, Trainer)
    "gymnasium_robotics:PointMaze_UMaze-v3": (100.0, 150.0, 1000, 3e-4, 30_000, 2500),
}
FALLBACK_DEFAULTS = (0.0, 0.0, 10_000, 3e-4, 100_000, 10_000)
# --skip-<flag> leaves these peers out: --skip-sbx means no SBX at all (no algorithm), --skip-sb3 no SB3
SKIPS = {"sb3": tuple(p.name for p in PEERS.values() if p.module == "stable_baselines3"),
         "sbx": tuple(p.name for p in PEERS.values() if p.module == "sbx"), "sbx-crossq": ("sbx-crossq",)}


def load_line() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_words() -> str:
    """This machine in words, for the results file (the driver's GPU models: no CUDA in this process)."""
    return f"{cpu_model()}, {usable_cores()} cores, GPUs: {', '.join(driver_gpu_models()) or 'none'}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Pendulum-v1", help="gymnasium env id (Box actions)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--total-steps", type=int, default=None, help="env steps per run (default per env)")
    parser.add_argument("--threshold-train", type=float, default=None, help="training-return threshold")
    parser.add_argument("--threshold-eval", type=float, default=None, help="evaluation-return threshold")
    parser.add_argument("--window", type=int, default=5, help="training episodes in the moving mean")
    parser.add_argument("--learning-starts", type=int, default=None, help="random warm-up steps, all (default per env)")
    parser.add_argument("--eval-every", type=int, default=None, help="env steps between evaluations, all")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--wall-budget", type=float, default=0.0, help="stop each run after this many s (0: none)")
    parser.add_argument("--stop-when-reached", action="store_true", help="stop each run once the training and "
                        "the evaluation threshold are both reached (ours: checked every 0.5 s; peers: at each "
                        "evaluation)")
    parser.add_argument("--peer-stop-ratio", action="append", default=[], metavar="PEER=R",
                        help="stop PEER's run of a seed at T / R s, T our time to the eval threshold on that seed "
                        "(the slowest of our modes; no cap where ours did not reach it): a peer still short of it "
                        "then proves ours / peer <= R, reported as '<=', at a fraction of the device time "
                        "(e.g. sb3=0.25 sbx=0.5); repeatable")
    parser.add_argument("--fixed-wall", type=float, default=0.0, help="report returns at this wall time "
                        "(0: the shortest run's wall time)")
    parser.add_argument("--serial", action="store_true", help="measure our serial mode")
    parser.add_argument("--parallel", action="store_true", help="measure our parallel mode (the default if "
                        "--serial is not given)")
    parser.add_argument("--peers", nargs="+", choices=list(PEERS), default=list(DEFAULT_PEERS),
                        help="the peers to run after ours, each seed: sb3 (SB3 SAC), sbx (SBX SAC), sbx-crossq "
                        "(SBX CrossQ), sb3-td3, sbx-td3, sb3-ddpg, sbx-ddpg (TD3 and DDPG, beside --set "
                        "algo='\"td3\"' or ddpg on our side), rltools (RLtools SAC, C++ compiled on the spot: "
                        "tools/peers_rltools.py), script-sac, script-td3, script-ddpg (a single-file eager PyTorch script, "
                        "CleanRL's layout: tools/peers_script.py; needs no extra package; TD3 and DDPG beside --set "
                        "algo='\"td3\"' or ddpg) (default: sb3 sbx sbx-crossq)")
    parser.add_argument("--skip-sb3", action="store_true", help="leave every SB3 peer out of --peers")
    parser.add_argument("--skip-sbx", action="store_true", help="leave every SBX peer (sbx, sbx-crossq, ...) out")
    parser.add_argument("--skip-sbx-crossq", action="store_true", help="leave SBX CrossQ out of --peers")
    parser.add_argument("--skip-ours", action="store_true", help="run the peers only")
    parser.add_argument("--peer-device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="the peers' device: SB3's device=; for SBX the JAX platform (JAX_PLATFORMS; auto: "
                        "JAX's choice, the GPU when its CUDA plugin is installed)")
    parser.add_argument("--device", default=None, help="our two learners' device (auto, cpu, cuda, cuda:N; "
                        "default: our auto); --set actor_device=... / critic_device=... set them one by one")
    parser.add_argument("--sb3-lr", type=float, default=None, help="the peers' learning rate, one for actor, critic "
                        "and alpha, all peers alike (default rl-zoo's SAC rate for the env)")
    parser.add_argument("--sb3-threads", type=int, default=0, help="torch threads for the peers (default 0: "
                        "torch's default, one per core, SB3's fastest on a quiet 2-core machine: 85 vs 57 steps/s "
                        "with 1); SBX's JAX keeps its own thread pool")
    parser.add_argument("--peer-tau", type=float, default=0.005, help="target-network rate of the SAC peers (SB3 "
                        "and SBX; default 0.005, their own default): e.g. the tau of our preset, to see how much of a "
                        "difference in env steps is that setting")
    parser.add_argument("--peer-gamma", type=float, default=None, help="the discount of every peer (default: "
                        "rl-baselines3-zoo's for the env and the peer's algorithm, on Swimmer-v5 0.9999 and CrossQ's 0.999, "
                        "else SB3's 0.99)")
    parser.add_argument("--crossq-critic-units", type=int, default=0, help="SBX CrossQ's critic as N-N units "
                        "(default 0: SBX's own, 1024-1024; 256 matches SAC's networks)")
    parser.add_argument("--rltools-units", type=int, default=0, help="RLtools' MLPs as N-N units (default 0: its "
                        "own 64; it has no BLAS here, so SB3's 256 costs it 300x)")
    parser.add_argument("--rltools-batch", type=int, default=0, help="RLtools' batch (default 0: its own 100)")
    parser.add_argument("--rltools-native", action="store_true", help="RLtools trains on its own C++ Pendulum (no "
                        "Python env in its loop: its published setting, the CPU ceiling; Pendulum-v1 only); evaluated "
                        "on gymnasium's Pendulum-v1 like every run, but no training curve (no recorded episodes)")
    parser.add_argument("--logdir", default=None, help="our run folders (default: a scratch folder, removed)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--curves-dir", default=None, help="write each run's curves.csv in a folder per run "
                        "here (default with --json: <json name>_curves/ beside it; without either: none)")
    parser.add_argument("--png", default=None, help="the learning-curves PNG of this env (default "
                        "<curves dir>/curves_<env>.png)")
    parser.add_argument("--no-png", action="store_true", help="write the curves.csv files but no PNG")
    parser.add_argument("--report", nargs="+", default=None, metavar="RESULTS_JSON",
                        help="run nothing: report again from these --json files (finished or cut short), each "
                        "seed's runs from the last file holding that seed; --json, --curves-dir and --fixed-wall "
                        "apply to that report")
    parser.add_argument("--env-kwargs", type=json_object, default={}, metavar="JSON",
                        help="keyword arguments of gymnasium.make for every env of every run, ours and the peers', "
                        "training and evaluation (our --env-kwargs), e.g. '{\"ctrl_cost_weight\": 0.05}'")
    parser.add_argument("--her-goals", type=int, default=0, metavar="K",
                        help="hindsight relabelling on a goal env, every side alike: ours --her-goals K, the peers "
                        "SB3's HerReplayBuffer with K 'future' goals per transition (and MultiInputPolicy)")
    parser.add_argument("--her-strategy", default="future", choices=("future", "final", "episode"),
                        help="with --her-goals, where relabelled goals come from, every side alike (default future)")
    parser.add_argument("--set", nargs="*", default=[],
                        type=lambda s: (s.split("=", 1)[0], json.loads(s.split("=", 1)[1])),
                        help="extra TrainConfig fields for ours, key=json")
    args = parser.parse_args(argv)
    tool_output(parser, args.json)  # tried now, not after the measuring
    for key, flag in (("env_kwargs", "--env-kwargs"), ("her_goals", "--her-goals"), ("her_strategy", "--her-strategy")):
        if any(k == key for k, _ in args.set):
            raise ConfigError(f"--set {key}=... would reach ours only: give {flag}, which every run gets")
    if args.her_goals < 0:
        raise ConfigError(f"--her-goals {args.her_goals}: must be >= 0 (0: no relabelling)")
    d_train, d_eval, d_starts, d_lr, d_total, d_every = ENV_DEFAULTS.get(args.env, FALLBACK_DEFAULTS)
    args.threshold_train = d_train if args.threshold_train is None else args.threshold_train
    args.threshold_eval = d_eval if args.threshold_eval is None else args.threshold_eval
    args.learning_starts = d_starts if args.learning_starts is None else args.learning_starts
    args.sb3_lr = d_lr if args.sb3_lr is None else args.sb3_lr
    args.total_steps = d_total if args.total_steps is None else args.total_steps
    args.eval_every = d_every if args.eval_every is None else args.eval_every
    skipped = {p for flag, peers in SKIPS.items() if getattr(args, "skip_" + flag.replace("-", "_")) for p in peers}
    args.peers = [p for p in dict.fromkeys(args.peers) if p not in skipped]
    if not 0.0 < args.peer_tau <= 1.0:
        raise ConfigError(f"--peer-tau {args.peer_tau}: must be in (0, 1]")
    if args.peer_gamma is not None and not 0.0 < args.peer_gamma <= 1.0:
        raise ConfigError(f"--peer-gamma {args.peer_gamma}: must be in (0, 1]")
    if args.rltools_units < 0 or args.rltools_batch < 0:
        raise ConfigError("--rltools-units and --rltools-batch must be >= 0 (0: RLtools' own)")
    if args.rltools_native and (args.env != "Pendulum-v1" or "rltools" not in args.peers or args.env_kwargs):
        raise ConfigError("--rltools-native trains RLtools on its C++ Pendulum: give --env Pendulum-v1 (no --env-kwargs) "
                          "and --peers with rltools")
    scripts = [name for name in args.peers if PEERS[name].framework == "script"]
    if args.her_goals and scripts:
        them = f"the {scripts[0]} peer has no HER; leave it" if len(scripts) == 1 else \
            f"the {', '.join(scripts)} peers have no HER; leave them"
        raise ConfigError(f"--her-goals: {them} out of --peers")
    if args.crossq_critic_units < 0:
        raise ConfigError(f"--crossq-critic-units {args.crossq_critic_units}: must be >= 0 (0: SBX's own)")
    args.peer_stop_ratio = dict(parse_stop_ratio(text, args.peers) for text in args.peer_stop_ratio)
    if args.skip_ours and not args.peers:
        raise ConfigError("nothing to run: --skip-ours and no peer left")
    if args.curves_dir is None and args.json:
        args.curves_dir = str(Path(args.json).with_suffix("")) + "_curves"
    if args.png and not args.curves_dir:
        raise ConfigError("--png needs the curves: give --curves-dir or --json")
    if args.curves_dir and not args.no_png and importlib.util.find_spec("matplotlib") is None:
        raise ConfigError('the curves PNG needs matplotlib: pip install -e ".[plot]", or pass --no-png')
    if not args.report:  # the base env itself: an error about the recorded wrapper every side trains on would not
        env_info(args.env, args.env_kwargs, first_step=True)  # name what the user typed (EnvError: one line)
    return args


def parse_stop_ratio(text: str, peers: list[str]) -> tuple[str, float]:
    name, _, value = text.partition("=")
    try:
        ratio = float(value)
    except ValueError:
        ratio = 0.0
    if name not in peers or not 0.0 < ratio <= 1.0:
        raise ConfigError(f"--peer-stop-ratio {text}: give PEER=R with PEER one of the peers run "
                          f"({', '.join(peers) or 'none'}) and R in (0, 1]")
    return name, ratio


def peer_args(args: argparse.Namespace, peer: str, ours: list[RunRecord]) -> argparse.Namespace:
    """``args`` with ``peer``'s wall budget for this seed (``--peer-stop-ratio``; unchanged without one)."""
    ratio = args.peer_stop_ratio.get(peer)
    hits = [r.first_eval(args.threshold_eval) for r in ours]
    if ratio is None or not hits or None in hits:
        return args
    cap = max(t for t, _ in hits) / ratio
    return argparse.Namespace(**{**vars(args), "wall_budget": min(args.wall_budget, cap) if args.wall_budget else cap})


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.report:
        return report_again(args)
    modes = ([False] if args.parallel or not args.serial else []) + ([True] if args.serial else [])
    os.environ[BASE_ENV_VAR] = args.env
    os.environ[BASE_ENV_KWARGS_VAR] = json.dumps(args.env_kwargs)  # every side's recorded env (peers_record.py)
    # our spawned samplers and the peers' children import the peers_* modules by name
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [TOOLS_DIR, os.environ.get("PYTHONPATH")]))
    scratch = Path(tempfile.mkdtemp(prefix="spz_bench_vs_sb3_"))
    args.logdir = args.logdir or str(scratch / "runs")
    import torch

    records: list[RunRecord] = []
    settings = settings_of(args, machine_words())
    try:
        # wrong devices and missing peers fail here, before any run, with one line
        ours_devices = {} if args.skip_ours else {serial: ours_device(ours_config(args, args.seeds[0], serial))
                                                  for serial in modes}
        peer_devices = {peer: run_peer_child(args, peer, "probe", 0, scratch)["device"] for peer in args.peers}
        print(f"load average before: {load_line()}   cores {os.cpu_count()}   torch default threads "
              f"{torch.get_num_threads()}; ours 1 per process; peers {args.sb3_threads or torch.get_num_threads()}")
        made_with = f" (--env-kwargs {json.dumps(args.env_kwargs)})" if args.env_kwargs else ""
        print(f"{args.env}{made_with}: {args.total_steps} env steps, learning_starts {args.learning_starts}, "
              f"eval every {args.eval_every} x {args.eval_episodes} episodes, peers' lr {args.sb3_lr:g}, "
              f"tau {args.peer_tau:g}, seeds {args.seeds}")
        for serial, device in ours_devices.items():
            print(f"  ours-{'serial' if serial else 'parallel'} on {device}")
        for peer, device in peer_devices.items():
            print(f"  {peer} on {device}, gamma {peer_gamma(args, PEERS[peer].algo):g}", flush=True)
        def done(record: RunRecord, seed: int) -> None:
            records.append(record)
            print(f"  done {record.name} seed {seed}: {record.wall_s:.1f} s, load {load_line()}", flush=True)
            if args.json:  # the raw records so far: a command cut short (a time limit) keeps its finished runs
                write_text_atomic(Path(args.json), results_json(records, settings))

        for seed in args.seeds:
            ours: list[RunRecord] = []
            for serial in [] if args.skip_ours else modes:
                ours.append(run_ours(args, seed, serial, scratch))
                done(ours[-1], seed)
            for peer in args.peers:
                done(run_peer(peer_args(args, peer, ours), peer, seed, scratch), seed)
        figures = report(records, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load average after: {load_line()}")
    return write_outputs(records, settings, figures, args)


def report_again(args: argparse.Namespace) -> dict:
    """``--report``: the report of the runs in earlier --json files, against their own settings."""
    records, settings, notes = load_results(args.report)
    for note in notes:
        print(note)
    # the files' settings, not this command line's defaults: the runs were measured against those
    for key in REPORT_SETTINGS:
        setattr(args, key, settings[key])
    return write_outputs(records, settings, report(records, args), args)


def write_outputs(records: list[RunRecord], settings: dict, figures: dict, args: argparse.Namespace) -> dict:
    """The --json file (figures, records, settings) and the curves, as asked; returns ``figures``."""
    if args.json:
        write_text_atomic(Path(args.json), results_json(records, settings, figures))
    if args.curves_dir:
        write_curves_and_png(records, args)
    return figures


def write_curves_and_png(records: list[RunRecord], args: argparse.Namespace) -> None:
    from bench_curves import default_png, plot_bench, write_bench_curves

    written = write_bench_curves(records, args.curves_dir, args.env, args.eval_episodes, args.window)
    print(f"curves: {len(written.run_dirs)} runs' curves.csv under {args.curves_dir}"
          + (f" ({written.estimated_eval_steps} evaluations' env steps estimated from the training curve)"
             if written.estimated_eval_steps else ""))
    if not args.no_png:
        png = plot_bench(written.run_dirs, args.png or default_png(args.curves_dir, args.env), args.env,
                         args.window)
        print(f"curves PNG: {png}")


if __name__ == "__main__":
    run_tool(main)
