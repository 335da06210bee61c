"""Check in a real browser that TensorBoard's "Custom Scalars" tab shows our chart groups.

    python tools/check_tb_layout.py -o tb_layout.png                 # a tiny fresh run (~10 s), then the check
    python tools/check_tb_layout.py --parallel -o tb_layout.png      # the same with a parallel run (~30 s)
    python tools/check_tb_layout.py --logdir runs -o tb_layout.png   # the runs you already have

A manual / developer tool, not a CI test: it needs Debian's Chromium (``apt-get install -y
chromium``), which CI does not install; the layout itself is tested in CI through TensorBoard's own
plugin (tests/trainer/test_monitor.py). What it does, end to end:

1. without ``--logdir``: trains a tiny SAC run on Pendulum-v1 (serial, or with ``--parallel`` the
   parallel mode, whose layout adds the Pipeline group) in a temporary folder, removed at the end;
2. starts ``tensorboard --logdir ... --host 127.0.0.1`` on a free loopback port (nothing listens
   beyond this machine), waits until it serves the custom-scalars layout, and asks its HTTP API
   which charts of each group have data in which run;
3. takes a headless Chromium screenshot of ``http://127.0.0.1:PORT/#custom_scalars`` (a fresh
   profile folder, no network beyond loopback), shrunk to a 64-colour PNG when Pillow is there;
4. stops TensorBoard by its pid (SIGTERM, then SIGKILL after 10 s) and prints what it saw.

Exit status: 0 when every group of the layout is served and the screenshot was written; 1 when a
group is missing or Chromium wrote no screenshot; 2 (one ``error: ...`` line) when Chromium is not
installed or an argument is bad. Look at the screenshot: that is the check a person makes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from spreeze_like.console import run_tool
from spreeze_like.roles.monitor import SCALARS_LAYOUT
from spreeze_like.write_guard import tool_output

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
# Flags for a headless Chromium run as root on a machine without network (each is needed there:
# no sandbox as root, no GPU, and no background connections that a closed network refuses).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")


class CheckError(Exception):
    """One line for the user; exit status 2."""


def find_chromium() -> str:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    raise CheckError("Chromium is not installed (looked for " + ", ".join(CHROMIUM_NAMES) + "); install Debian's: "
                     "apt-get install -y chromium")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tiny_run(logdir: Path, parallel: bool) -> Path:
    """A SAC run on Pendulum-v1 small enough for seconds: every tag of the layout gets points."""
    from spreeze_like.config import TrainConfig
    from spreeze_like.training import train

    config = dataclasses.replace(
        TrainConfig(), logdir=str(logdir), serial=not parallel, hidden_sizes=(32, 32), batch_size=32,
        learning_starts=200, total_steps=3000 if parallel else 1000, eval_every=500, eval_episodes=2, log_interval=0,
        tb_interval=0.5 if parallel else 0.2, checkpoint_every=0)
    return train(config, print_fn=lambda line: None).run_dir


def get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # loopback only: the URL is ours
        return json.loads(response.read().decode())


class TensorBoard:
    """``tensorboard`` on 127.0.0.1:``port`` as a child process; :meth:`stop` ends it by its pid."""

    def __init__(self, logdir: Path, port: int, log_path: Path) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - tensorboard writes it; closed by stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
             "--port", str(port), "--reload_interval", "1"], stdout=self._log, stderr=subprocess.STDOUT)

    def wait_for_layout(self, timeout_s: float = 90.0) -> dict[str, Any]:
        """The merged layout once TensorBoard serves one (it loads the event files after it starts)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text().strip().splitlines()[-1:] or ["(no output)"]
                raise CheckError(f"tensorboard exited with status {self.proc.returncode}: {tail[0]}")
            try:
                layout = get_json(self.base + "/data/plugin/custom_scalars/layout")
                if layout:
                    return layout
            except OSError:  # not listening yet
                pass
            time.sleep(0.5)
        raise CheckError(f"tensorboard served no custom-scalars layout within {timeout_s:.0f} s "
                         "(no run in this logdir was written by spreeze_like's monitor?)")

    def charts_with_data(self, layout: dict[str, Any]) -> dict[str, list[tuple[str, int]]]:
        """{group: [(chart, tags with data in any run)]} from the custom-scalars plugin's own API."""
        runs = get_json(self.base + "/data/runs")
        out: dict[str, list[tuple[str, int]]] = {}
        for category in layout.get("category", []):
            rows = []
            for chart in category.get("chart", []):
                tags: set[str] = set()
                for regex in chart.get("multiline", {}).get("tag", []):
                    for run in runs:
                        query = urllib.parse.urlencode({"run": run, "tag": regex})
                        found = get_json(f"{self.base}/data/plugin/custom_scalars/scalars?{query}")
                        tags.update(t for t, events in found.get("tag_to_events", {}).items() if events)
                rows.append((chart.get("title", "?"), len(tags)))
            out[category.get("title", "?")] = rows
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def screenshot(chromium: str, url: str, out: Path, size: tuple[int, int], budget_ms: int, profile: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
                    f"--virtual-time-budget={budget_ms}", f"--screenshot={out}", url],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=180, check=False)
    if not out.is_file():
        raise RuntimeError(f"Chromium wrote no screenshot to {out}")
    try:
        from PIL import Image
    except ImportError:  # keep Chromium's own (larger) PNG
        return
    with Image.open(out) as image:
        small = image.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)  # a UI: few colours
    small.save(out, optimize=True)


def parse_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().replace("x", ",").split(","))
    except ValueError:
        raise CheckError(f"--window-size {text}: expected WIDTH,HEIGHT such as 1400,2400") from None
    if width < 200 or height < 200:
        raise CheckError(f"--window-size {text}: at least 200,200")
    return width, height


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Screenshot TensorBoard's Custom Scalars tab in headless Chromium "
                                                 "and list which charts of each group have data.")
    parser.add_argument("--logdir", default=None, help="runs to show (default: a tiny fresh run in a temporary folder)")
    parser.add_argument("--parallel", action="store_true", help="the tiny run in the parallel mode (without --logdir)")
    parser.add_argument("-o", "--output", default="tb_layout.png", help="the screenshot (PNG)")
    parser.add_argument("--window-size", default="1400,2300", help="browser viewport WIDTH,HEIGHT (default 1400,2300)"
                        "; a parallel run's Pipeline group needs about 2,900 pixels")
    parser.add_argument("--budget-ms", type=int, default=20000,
                        help="Chromium's virtual-time budget for the page to load and draw (default 20000)")
    args = parser.parse_args(argv)
    tool_output(parser, args.output, "-o")  # tried now, not after the measuring
    try:
        chromium = find_chromium()
        size = parse_size(args.window_size)
        if args.logdir is not None and not Path(args.logdir).is_dir():
            raise CheckError(f"--logdir {args.logdir}: no such folder")
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="spz-tb-check.") as tmp_name:
        tmp = Path(tmp_name)
        if args.logdir is None:
            print(f"training a tiny {'parallel' if args.parallel else 'serial'} run for the check ...", flush=True)
            logdir = tiny_run(tmp / "runs", args.parallel).parent
        else:
            logdir = Path(args.logdir)
        port = free_port()
        board = TensorBoard(logdir, port, tmp / "tensorboard.log")
        print(f"tensorboard pid {board.proc.pid} on {board.base} for {logdir}", flush=True)
        try:
            layout = board.wait_for_layout()
            groups = board.charts_with_data(layout)
            url = f"{board.base}/#custom_scalars"
            screenshot(chromium, url, Path(args.output), size, args.budget_ms, tmp / "chromium-profile")
        except CheckError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except RuntimeError as exc:
            print(f"FAILED: {exc}")
            return 1
        finally:
            board.stop()
    for group, charts in groups.items():
        shown = ", ".join(f"{title} ({n} tag{'s' if n != 1 else ''} with data)" for title, n in charts)
        print(f"  {group}: {shown}")
    missing = [g for g in SCALARS_LAYOUT if g not in groups]
    print(f"screenshot: {args.output} ({Path(args.output).stat().st_size / 1024:.0f} KB) of {url}")
    if missing:
        print(f"FAILED: TensorBoard serves no group {', '.join(missing)}")
        return 1
    print(f"layout served with groups {', '.join(groups)}; look at the screenshot to see them drawn")
    return 0


if __name__ == "__main__":
    run_tool(main)
