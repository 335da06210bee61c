"""tools/gpu_session.sh, the one call a lent GPU machine runs: it must not rot between device sessions.

No device is needed: the script's syntax, its phase check, and every ``python3 tools/...`` command in
it (each tool exists and accepts each flag given, by its own ``--help``) are checked here, since a
wrong flag found on the device costs a scarce device call.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from tool_help import accepts

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "gpu_session.sh"


def _commands() -> list[list[str]]:
    """argv of each ``python3 tools/X.py ...`` line (continuations joined, shell variables kept as words)."""
    text = re.sub(r"\\\n\s*", " ", SCRIPT.read_text())
    found = []
    for line in text.splitlines():
        line = line.split(" 2>&1", 1)[0].split(" |", 1)[0].split(" >", 1)[0]
        match = re.search(r"python3 (tools/\S+\.py.*)", line)
        if match and not line.lstrip().startswith("#"):
            found.append(shlex.split(match.group(1)))
    return found


def test_the_script_parses():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_an_unknown_phase_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PHASE": "learn3"}, cwd=REPO, timeout=30, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [("error: PHASE=learn3: use core, learn, learn1, learn2, grid1, grid2 or "
                                        "autotuned")]
    assert not (tmp_path / "out").exists()  # refused before anything is made or installed


def test_every_phase_has_its_commands():
    text = SCRIPT.read_text()
    for phase in ("grid1", "grid2", "autotuned"):
        assert f"[ \"$phase\" = {phase} ]" in text, phase
    # learn, learn1, learn2: one branch, its seeds the phase name's suffix (none: both)
    assert '[ "${phase#learn}" != "$phase" ]' in text and "seeds=${seeds:-1 2}" in text
    tools = {argv[0] for argv in _commands()}
    assert {"tools/bench_gpu.py", "tools/bench_vs_sb3.py", "tools/bench_autotune.py"} <= tools, tools


@pytest.mark.parametrize("argv", _commands(), ids=lambda argv: argv[0])
def test_every_tool_and_flag_exists(argv):
    assert (REPO / argv[0]).is_file(), argv[0]
    for token in argv[1:]:
        if token.startswith("--"):
            assert accepts(argv[0], token), f"{argv[0]}: no {token}"


def test_device_prep_refuses_an_interpreter_that_is_not_the_devices_python_3_12(tmp_path):
    """tools/device_prep.sh builds the native core for the device's Python 3.12: another one would make a core
    the device cannot load, found only on the device. Refused before anything is fetched or built (the
    interpreter given is a stand-in that fails, as a broken pyenv shim does, whatever Python runs the tests)."""
    prep = REPO / "tools" / "device_prep.sh"
    assert subprocess.run(["bash", "-n", str(prep)], check=False).returncode == 0
    fake = tmp_path / "python3.12"
    fake.write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    fake.chmod(0o755)
    done = subprocess.run(["bash", str(prep), str(fake)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [f"error: no working Python 3.12 ({fake}); pass a 3.12 interpreter's path"]
    assert done.stdout == ""


@pytest.mark.parametrize("stamp", ["missing", "other", "same"])
def test_a_native_core_built_from_other_sources_is_refused_before_anything_runs(tmp_path, stamp):
    """.whl/native.sha256 (written by tools/device_prep.sh) must be the hash of the carried native/ sources: a core
    built from older C++ would be measured as this code's. Run on a copy of what the script reads, so that this
    checkout's .whl/ (if any) is never installed by the test."""
    copy = tmp_path / "tree"
    shutil.copytree(REPO / "native", copy / "native")
    (copy / "tools").mkdir()
    for name in ("gpu_session.sh", "native_hash.sh"):
        shutil.copy(REPO / "tools" / name, copy / "tools" / name)
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    (copy / ".whl").mkdir()
    here = subprocess.run(["bash", "tools/native_hash.sh"], capture_output=True, text=True, cwd=copy, check=True)
    assert re.fullmatch(r"[0-9a-f]{16}\n", here.stdout)
    if stamp != "missing":
        (copy / ".whl" / "native.sha256").write_text(here.stdout if stamp == "same" else "0123456789abcdef\n")
    done = subprocess.run(["bash", "tools/gpu_session.sh", str(tmp_path / "out")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PHASE": "core"}, cwd=copy, timeout=60, check=False)
    assert done.returncode == 3
    if stamp == "same":  # past the check: the next step fails on the empty .whl/ instead
        assert done.stderr.splitlines()[-1] == "error: wheel install failed"
    else:
        assert done.stderr.splitlines() == [("error: .whl/'s native core was not built from these native/ sources; "
                                             "run bash tools/device_prep.sh first")]
        assert not (tmp_path / "out").exists()
    # a C++ edit changes the hash
    (copy / "native" / "src" / "sum_tree.cpp").write_text((copy / "native" / "src" / "sum_tree.cpp").read_text() + "\n")
    edited = subprocess.run(["bash", "tools/native_hash.sh"], capture_output=True, text=True, cwd=copy, check=True)
    assert edited.stdout != here.stdout


def test_each_smoke_selection_term_names_a_gpu_step_test():
    # the smoke runs first with -x: a renamed test would leave a term selecting nothing, and the capture path
    # it stood for unchecked until the full GPU tests, minutes later on the scarce device
    text = re.sub(r"\\\n\s*", " ", SCRIPT.read_text())
    smoke = re.search(r"pytest -x .*?(tests/\S+\.py)\s+-k \"([^\"]+)\"", text)
    assert smoke, "no smoke line (pytest -x ... FILE -k \"...\") in the script"
    names = re.findall(r"^def (test_\w+)", (REPO / smoke.group(1)).read_text(), flags=re.MULTILINE)
    terms = smoke.group(2).split(" or ")
    assert terms and all(re.fullmatch(r"\w+", term) for term in terms), terms
    assert [t for t in terms if not any(t in name for name in names)] == [], names
