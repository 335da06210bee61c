"""Presets: the shipped tables, the order of the layers, malformed files, --list-presets, the sources
printed and saved, and that no env id is a special case in the package's code."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest

import spreeze_like
from spreeze_like import presets as presets_module
from spreeze_like.config import ALGOS, DEFAULT_ENV_ID, TrainConfig
from spreeze_like.config_fields import SOURCES_KEY, field_types, unwrap_optional
from spreeze_like.errors import ConfigError
from spreeze_like.flags import parse_command_line
from spreeze_like.layering import checked_presets, complete_sources, lay_presets, python_sources, settings_lines
from spreeze_like.presets import DEFAULT_ENTRY, PRESET_FIELDS, load_presets
from spreeze_like.training import train

from .test_cli import assert_one_line_error, run_cli
from .test_serial import TINY

TINY_FLAGS = ["--serial", "--hidden-sizes", "32", "32", "--batch-size", "32", "--learning-starts", "200",
              "--total-steps", "300", "--eval-every", "0", "--eval-episodes", "1", "--log-interval", "0",
              "--tb-interval", "0", "--checkpoint-every", "0"]


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# --- the shipped files ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ALGOS)
def test_shipped_presets_are_valid_and_each_has_a_default_and_sources(algo):
    presets = checked_presets(algo)
    assert presets.path == Path(spreeze_like.__file__).parent / "presets" / f"{algo}.toml"
    assert DEFAULT_ENTRY in presets.entries and "actor_lr" in presets.entries[DEFAULT_ENTRY]
    for entry in presets.entries:
        assert presets.sources.get(entry), f"{algo}.toml [{entry}] says nowhere where its values come from"


def test_preset_fields_have_the_types_of_trainconfig_fields():
    hints = field_types(TrainConfig)
    for name, expected in PRESET_FIELDS.items():
        base, _ = unwrap_optional(hints[name])
        assert (typing.get_origin(base) or base) is expected, name


def test_the_values_that_were_code_before_presets():
    for algo in ("sac", "td3", "ddpg"):  # what TUNED_ACTOR_LR and the default rate gave (CrossQ came later)
        assert load_presets(algo).merged("Pendulum-v1")["actor_lr"] == 1e-3
        assert load_presets(algo).merged("HalfCheetah-v5")["actor_lr"] == 3e-4
    cheetah = load_presets("sac").lookup("HalfCheetah-v5")
    assert cheetah["learning_starts"] == (10_000, "preset:sac.toml#HalfCheetah-v5")
    assert cheetah["actor_lr"] == (3e-4, "preset:sac.toml#default")


MUJOCO_BUDGET_ENVS = ("HalfCheetah-v5", "Ant-v5", "Hopper-v5", "Walker2d-v5", "Humanoid-v5", "Swimmer-v5")


@pytest.mark.parametrize("algo", [a for a in ALGOS if a != "sac"])
def test_every_algorithm_gets_sacs_mujoco_budget(algo):
    # Each preset file stays whole (a user copies one and passes --presets FILE), so the budget is repeated per
    # file; this keeps the copies equal. Without its table a TD3 run on Hopper-v5 stopped at Pendulum's 20,000.
    sac, other = load_presets("sac"), load_presets(algo)
    for env in MUJOCO_BUDGET_ENVS:
        for key in ("total_steps", "learning_starts"):
            assert other.lookup(env).get(key) == (sac.lookup(env)[key][0], f"preset:{algo}.toml#{env}"), (env, key)
    default_run, sources = lay_presets(TrainConfig(env="Hopper-v5", algo=algo), {"env": "flag", "algo": "flag"})
    assert (default_run.total_steps, sources["total_steps"]) == (1_000_000, f"preset:{algo}.toml#Hopper-v5")


@pytest.mark.parametrize("algo", ALGOS)
def test_every_algorithm_discounts_swimmer_as_rl_zoo_does(algo):
    # at the built-in 0.99 a swimmer's reward for strokes hundreds of steps back vanishes (rl-zoo: 0.9999; CrossQ 0.999)
    run, sources = lay_presets(TrainConfig(env="Swimmer-v5", algo=algo), {"env": "flag", "algo": "flag"})
    assert (run.gamma, sources["gamma"]) == (0.999 if algo == "crossq" else 0.9999, f"preset:{algo}.toml#Swimmer-v5")


def test_an_env_table_overlays_the_default_and_module_ids_count_by_their_env_id(tmp_path):
    path = write(tmp_path / "p.toml", '[default]\ntau = 0.02\ngamma = 0.97\n\n[My-v0]\nsource = "mine"\ngamma = 0.9\n'
                                      'hidden_sizes = [64, 64]\n')
    presets = load_presets("sac", path)
    found = presets.lookup("my_pkg.envs:My-v0")
    assert found == {"tau": (0.02, f"preset:{path}#default"), "gamma": (0.9, f"preset:{path}#My-v0"),
                     "hidden_sizes": ((64, 64), f"preset:{path}#My-v0")}
    assert presets.lookup("Other-v1") == {"tau": (0.02, f"preset:{path}#default"),
                                          "gamma": (0.97, f"preset:{path}#default")}


# --- the order of the layers ------------------------------------------------------------------------------------
LAYERED = """
[default]
tau = 0.02           # preset only
gamma = 0.97         # overridden by the env's table
batch_size = 64      # overridden by --config
critic_lr = 2e-3     # overridden by --config, then by a flag
actor_lr = 2e-4      # the flag says auto: the preset's

[Pendulum-v1]
gamma = 0.95
"""


def test_flag_beats_config_file_beats_preset_beats_default(tmp_path):
    path = write(tmp_path / "p.toml", LAYERED)
    config_file = tmp_path / "c.json"
    config_file.write_text(json.dumps({"batch_size": 128, "critic_lr": 3e-3}))
    line = parse_command_line(["--config", str(config_file), "--presets", path, "--critic-lr", "4e-3",
                               "--actor-lr", "auto"])
    config, sources = lay_presets(line.config, line.sources)
    table, default = f"preset:{path}#Pendulum-v1", f"preset:{path}#default"
    expected = {"utd": (1.0, None), "tau": (0.02, default), "gamma": (0.95, table), "batch_size": (128, "config-file"),
                "critic_lr": (4e-3, "flag"), "actor_lr": (2e-4, default), "presets": (path, "flag")}
    for name, (value, source) in expected.items():
        assert (getattr(config, name), sources.get(name)) == (value, source), name
    full = complete_sources(sources, config)
    assert full["utd"] == "default" and set(full) == {f.name for f in dataclasses.fields(TrainConfig)}


def test_a_resumed_run_keeps_its_saved_values_over_the_config_file_and_the_preset(tmp_path):
    path = write(tmp_path / "p.toml", LAYERED)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    saved = dataclasses.replace(TrainConfig(), batch_size=100, gamma=0.99, actor_lr=1e-3, presets=path).to_dict()
    del saved["tau"]  # a config.json from before a field existed: the preset fills it
    saved[SOURCES_KEY] = {"batch_size": "flag", "gamma": "default", "actor_lr": f"preset:{path}#Pendulum-v1"}
    (run_dir / "config.json").write_text(json.dumps(saved))
    config_file = tmp_path / "c.json"
    config_file.write_text(json.dumps({"batch_size": 128, "critic_lr": 3e-3}))
    line = parse_command_line(["--config", str(config_file), "--resume", str(run_dir), "--critic-lr", "4e-3"])
    config, sources = lay_presets(line.config, line.sources)
    expected = {"batch_size": (100, "resume (flag)"), "gamma": (0.99, "resume (default)"),
                "actor_lr": (1e-3, f"resume (preset:{path}#Pendulum-v1)"), "critic_lr": (4e-3, "flag"),
                "tau": (0.02, f"preset:{path}#default"), "utd": (1.0, "resume")}
    for name, (value, source) in expected.items():
        assert (getattr(config, name), sources.get(name)) == (value, source), name
    lines = settings_lines(config, sources)
    assert any("batch_size" in ln and "resume (flag)" in ln for ln in lines)
    assert not any(" gamma " in ln or " utd " in ln for ln in lines)  # resumed built-in defaults are not news


def test_python_callers_keep_every_field_they_set(tmp_path):
    config = dataclasses.replace(TrainConfig(), env="HalfCheetah-v5", batch_size=64)
    sources = python_sources(config, explicit={"learning_starts"})
    assert sources == {"env": "python", "batch_size": "python", "learning_starts": "python"}
    laid, laid_sources = lay_presets(config, sources)
    assert laid.learning_starts == 1000  # named as set: the preset's 10,000 does not apply
    # the algorithm was not named: the env's (algos.toml), whose preset file then applies
    assert (laid.algo, laid_sources["algo"]) == ("crossq", "preset:algos.toml#HalfCheetah-v5")
    assert (laid.total_steps, laid_sources["total_steps"]) == (1_000_000, "preset:crossq.toml#HalfCheetah-v5")
    laid, laid_sources = lay_presets(config, {**sources, "algo": "python"})  # train(config, algo="sac")
    assert (laid.algo, laid_sources["algo"]) == ("sac", "python")
    assert laid_sources["total_steps"] == "preset:sac.toml#HalfCheetah-v5"


# --- the algorithm per env (presets/algos.toml) -------------------------------------------------------------------
def test_shipped_default_algorithms_are_known_algorithms_with_sources():
    tables = presets_module._algo_tables()
    assert tables[DEFAULT_ENTRY]["algo"] == "sac"
    for entry, table in tables.items():
        assert table["algo"] in ALGOS and table["source"].strip(), entry
        # an env that gets another algorithm has that algorithm's preset table too (run length, warm-up)
        if entry != DEFAULT_ENTRY and table["algo"] != "sac":
            assert entry in load_presets(table["algo"]).entries, entry


def test_default_algorithm_per_env_and_the_flag_wins():
    assert presets_module.default_algo("Pendulum-v1") == ("sac", "preset:algos.toml#default")
    assert presets_module.default_algo("my_pkg.envs:HalfCheetah-v5") == ("crossq", "preset:algos.toml#HalfCheetah-v5")
    assert presets_module.default_algo("Hopper-v5") == ("crossq", "preset:algos.toml#Hopper-v5")
    assert presets_module.default_algo("Walker2d-v5") == ("crossq", "preset:algos.toml#Walker2d-v5")
    assert presets_module.default_algo("Ant-v5") == ("crossq", "preset:algos.toml#Ant-v5")
    assert presets_module.default_algo("Humanoid-v5") == ("crossq", "preset:algos.toml#Humanoid-v5")
    assert presets_module.default_algo("Swimmer-v5") == ("crossq", "preset:algos.toml#Swimmer-v5")
    hopper, hopper_sources = lay_presets(dataclasses.replace(TrainConfig(), env="Hopper-v5"), {"env": "flag"})
    assert (hopper.algo, hopper.learning_starts) == ("crossq", 10_000)
    assert hopper_sources["learning_starts"] == "preset:crossq.toml#Hopper-v5"  # CrossQ's table for the env applies
    chosen, _ = lay_presets(dataclasses.replace(TrainConfig(), env="HalfCheetah-v5"), {"env": "flag"})
    assert chosen.algo == "crossq" and chosen.policy_delay == 0 and chosen.resolve().policy_delay == 3
    flagged = parse_command_line(["--env", "HalfCheetah-v5", "--algo", "sac"])
    kept, kept_sources = lay_presets(flagged.config, flagged.sources)
    assert (kept.algo, kept_sources["algo"]) == ("sac", "flag")
    pendulum, pendulum_sources = lay_presets(TrainConfig(), {})
    assert pendulum.algo == "sac" and "algo" not in pendulum_sources  # the built-in default: not news in the header


def test_the_docs_name_the_envs_whose_default_is_not_sac():
    # The README and two docs name these envs in prose; a table added to algos.toml without them would
    # leave a user reading that an env runs SAC when it runs another algorithm (or the reverse).
    tables = presets_module._algo_tables()
    moved = [entry for entry, table in tables.items() if entry != DEFAULT_ENTRY and table["algo"] != "sac"]
    assert {tables[entry]["algo"] for entry in moved} == {"crossq"}  # the docs' sentences say CrossQ
    listed = moved[0] if len(moved) == 1 else ", ".join(moved[:-1]) + " and " + moved[-1]
    root = Path(spreeze_like.__file__).parent.parent
    for doc in ("README.md", "docs/bench_vs_sb3.md"):
        text = " ".join((root / doc).read_text().split())
        assert f"CrossQ on {listed}" in text or f"{listed} run CrossQ" in text, doc
    count = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight"][len(moved)]
    trainer_doc = " ".join((root / "docs/trainer.md").read_text().split())
    assert f"Today that is {count} env" in trainer_doc
    assert all(f"`{entry}`" in trainer_doc for entry in moved)


def test_a_default_algorithm_file_with_an_unknown_algorithm_is_one_line(tmp_path, monkeypatch):
    for name in ("sac.toml", "crossq.toml"):
        (tmp_path / name).write_text((presets_module.PRESET_DIR / name).read_text())
    (tmp_path / "algos.toml").write_text('[default]\nalgo = "sac"\nsource = "x"\n[Foo-v0]\nalgo = "ppo"\nsource = "y"\n')
    monkeypatch.setattr(presets_module, "PRESET_DIR", tmp_path)
    with pytest.raises(ConfigError, match="algos.toml: algo 'ppo' for Foo-v0 is not one of"):
        lay_presets(dataclasses.replace(TrainConfig(), env="Foo-v0"), {})
    (tmp_path / "algos.toml").write_text('[default]\nalgo = "sac"\n')
    with pytest.raises(ConfigError, match=r"algos.toml \[default\]: a table holds exactly algo and source"):
        presets_module.default_algo("Pendulum-v1")


# --- malformed preset files ---------------------------------------------------------------------------------------
MALFORMED = [
    ("[default\nactor_lr = 1e-3\n", ["is not valid TOML", "line 1"]),
    ("[Pendulum-v1]\nbatch_sise = 3\n", ["[Pendulum-v1]", "unknown setting batch_sise"]),
    ("[Pendulum-v1]\nactor_lr = \"fast\"\n", ["[Pendulum-v1]", "actor_lr = 'fast' has the wrong type", "float"]),
    ("[default]\ntotal_steps = 1e6\n", ["[default]", "total_steps", "expected int"]),
    ("[default]\nhidden_sizes = [64, 1.5]\n", ["hidden_sizes", "array of whole numbers"]),
    ("actor_lr = 1e-3\n", ["outside a table"]),
    ("[default]\nsource = 3\n", ["source must be a string"]),
    # any table is checked, not only the env's
    ("[HalfCheetah-v5]\ngamma = 1.5\n", ["[HalfCheetah-v5]", "--gamma 1.5 is invalid"]),
]


@pytest.mark.parametrize("text, fragments", MALFORMED)
def test_a_malformed_preset_file_is_one_config_error_line_naming_file_and_key(tmp_path, text, fragments):
    path = write(tmp_path / "bad.toml", text)
    with pytest.raises(ConfigError) as info:
        lay_presets(dataclasses.replace(TrainConfig(), presets=path), {"presets": "python"})
    message = str(info.value)
    assert "\n" not in message and f"preset file {path}" in message
    for fragment in fragments:
        assert fragment in message, message


def test_a_malformed_shipped_file_is_named_by_its_file_name(tmp_path, monkeypatch):
    (tmp_path / "sac.toml").write_text("[default]\nactor_lr = -1.0\n")
    (tmp_path / "algos.toml").write_text((presets_module.PRESET_DIR / "algos.toml").read_text())
    monkeypatch.setattr(presets_module, "PRESET_DIR", tmp_path)
    with pytest.raises(ConfigError, match=r"^preset file sac.toml \[default\]: --actor-lr -1.0 is invalid"):
        lay_presets(TrainConfig(), {})
    with pytest.raises(ConfigError, match=r"^preset:sac.toml#default: actor_lr -1.0 is invalid"):
        TrainConfig().resolve()  # resolve() reads the preset for an auto actor lr


@pytest.mark.parametrize("text, fragments", [MALFORMED[0], MALFORMED[2], MALFORMED[1]])
def test_the_cli_refuses_a_malformed_preset_file_with_exit_2_before_making_a_run_folder(tmp_path, text, fragments):
    path = write(tmp_path / "bad.toml", text)
    proc = run_cli("--presets", path, *TINY_FLAGS, "--logdir", str(tmp_path / "runs"))
    assert_one_line_error(proc, f"preset file {path}", *fragments)
    assert not (tmp_path / "runs").exists()
    assert_one_line_error(run_cli("--list-presets", "--presets", path), f"preset file {path}")


# --- the CLI: --list-presets, the header, config.json ------------------------------------------------------------
def test_list_presets_prints_every_algorithm_s_tables_and_exits_0():
    proc = run_cli("--list-presets")
    assert proc.returncode == 0, proc.stderr
    for algo in ALGOS:
        assert f"{algo}  (" in proc.stdout and f"{algo}.toml" in proc.stdout
    for text in ("default", "Pendulum-v1", "HalfCheetah-v5", "learning_starts=10_000", "actor_lr=0.001",
                 "source: rl-baselines3-zoo"):
        assert text in proc.stdout, text
    assert "algorithm when --algo is not given" in proc.stdout and "algo=crossq" in proc.stdout
    only = run_cli("--list-presets", "--algo", "td3")
    assert only.returncode == 0 and "td3  (" in only.stdout and "sac  (" not in only.stdout


def _settings(stdout: str) -> dict[str, tuple[str, str]]:
    """``{name: (value, source)}`` from the header's settings block."""
    rows = {}
    for line in stdout.splitlines():
        m = re.match(r"^\[spreeze\]   (\w+)\s+(.+?)\s{2,}(\S.*)$", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def test_a_run_on_an_env_with_a_preset_prints_and_saves_values_and_sources(tmp_path):
    proc = run_cli(*TINY_FLAGS, "--logdir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "settings (flag > resumed run > --config file > preset > default):" in proc.stdout
    rows = _settings(proc.stdout)
    assert rows["actor_lr"] == ("0.001", "preset:sac.toml#Pendulum-v1")
    assert rows["total_steps"] == ("300", "flag") and rows["batch_size"] == ("32", "flag")
    assert "utd" not in rows and "gamma" not in rows  # built-in defaults are not listed
    (run_dir,) = tmp_path.iterdir()
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved[SOURCES_KEY]["actor_lr"] == "preset:sac.toml#Pendulum-v1" and saved["actor_lr"] == 1e-3
    assert saved[SOURCES_KEY]["total_steps"] == "flag" and saved[SOURCES_KEY]["gamma"] == "default"
    assert set(saved[SOURCES_KEY]) == set(saved) - {SOURCES_KEY}
    assert TrainConfig.from_dict(saved).actor_lr == 1e-3  # config.json stays loadable as a config


def test_a_run_on_an_env_without_a_preset_table_gets_the_default_table(tmp_path):
    lines: list[str] = []
    config = dataclasses.replace(TrainConfig(), env="MountainCarContinuous-v0", logdir=str(tmp_path),
                                 **{**TINY, "total_steps": 300})
    result = train(config, print_fn=lines.append)
    rows = _settings("\n".join(lines))
    assert rows["actor_lr"] == ("0.0003", "preset:sac.toml#default")
    assert rows["env"] == ("MountainCarContinuous-v0", "python") and rows["total_steps"] == ("300", "python")
    saved = json.loads((result.run_dir / "config.json").read_text())
    assert saved[SOURCES_KEY]["actor_lr"] == "preset:sac.toml#default" and saved["actor_lr"] == 3e-4


# --- no env id in the code --------------------------------------------------------------------------------------
# A string constant that *is* an env id (``"Pendulum-v1"``, ``"pkg.mod:My-v0"``, ``"ALE/Pong-v5"``) is
# what a special case, a table keyed by env or a hard-wired default looks like. An id inside a sentence
# (an error message's example, a docstring) is prose and is not counted.
ENV_ID = re.compile(r"^(?:[\w.]+:)?(?:[\w-]+/)?[A-Z][A-Za-z0-9]*-v\d+$")


def test_no_env_id_is_a_special_case_in_the_package_code():
    root = Path(spreeze_like.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ENV_ID.match(node.value):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.value!r}")
    allowed = [f for f in found if f.startswith("spreeze_like/config_values.py:") and f.endswith(repr(DEFAULT_ENV_ID))]
    assert len(allowed) == 1, found  # DEFAULT_ENV_ID = "..."
    # an env the package itself defines names its own id where it registers it (a definition, not a special case)
    defined = [f for f in found if f.startswith("spreeze_like/slow_envs.py:") and f.endswith("'SlowPendulum-v1'")]
    assert len(defined) == 1, found
    allowed += defined
    assert [f for f in found if f not in allowed] == [], "env ids in code (use DEFAULT_ENV_ID or a preset)"


# --- with --autotune ----------------------------------------------------------------------------------------------
def test_plan_only_prints_the_settings_and_their_sources_above_the_plan(tmp_path):
    from tests.autotune.helpers import run_module, seed_cache

    seed_cache(tmp_path / "xdg")
    proc = run_module("spreeze_like.run", "--plan-only", "--batch-size", "512", xdg=tmp_path / "xdg")
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.index("settings (flag > resumed run > --config file > preset > default):")
    assert header < proc.stdout.index("autotune plan for")
    rows = _settings(proc.stdout[:proc.stdout.index("autotune plan for")])
    assert rows["actor_lr"] == ("0.001", "preset:sac.toml#Pendulum-v1") and rows["batch_size"] == ("512", "flag")


def test_autotuned_values_are_saved_with_the_source_autotune(tmp_path, monkeypatch):
    from tests.autotune.helpers import seed_cache

    seed_cache(tmp_path / "xdg", hidden=(32, 32))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    config = dataclasses.replace(TrainConfig(), logdir=str(tmp_path / "runs"), autotune=True,
                                 **{**TINY, "total_steps": 300})
    result = train(config, print_fn=lambda line: None)
    saved = json.loads((result.run_dir / "config.json").read_text())
    plan = json.loads((result.run_dir / "plan.json").read_text())
    planned = {k for k, c in plan["choices"].items() if c["source"] == "plan" and k in saved}
    assert planned and all(saved[SOURCES_KEY][k] == "autotune" for k in planned), (planned, saved[SOURCES_KEY])
    assert saved[SOURCES_KEY]["serial"] == "python" and saved[SOURCES_KEY]["actor_lr"] == "preset:sac.toml#Pendulum-v1"
