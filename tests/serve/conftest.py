"""A ``pdsim serve`` subprocess on free local ports, stopped cleanly with SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0

LISTEN = re.compile(r"listening on http://([\d.]+):(\d+)")
INSTANCE = re.compile(r"(prefill|decode|colocated) instance (\S+) on http://([\d.]+):(\d+)")


@dataclass
class Served:
    """A running server: its URLs, its output lines, its run folder."""

    proc: subprocess.Popen[str]
    url: str
    out: Path
    instances: dict[str, tuple[str, str]] = field(default_factory=dict)  # name: (role, url)
    lines: list[str] = field(default_factory=list)

    def stop(self) -> int:
        """SIGTERM, then wait for the records to be written; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """Start ``pdsim serve CONFIG --port 0 --out tmp/out ARGS``; stopped at teardown."""
    started: list[Served] = []

    def start(config: str, *args: str) -> Served:
        out = tmp_path / f"out{len(started)}"
        cmd = [sys.executable, "-m", "pdsim", "serve", str(ROOT / "configs" / config),
               "--port", "0", "--out", str(out), *args]
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        served = Served(proc, "", out)
        started.append(served)
        got = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                served.lines.append(line.rstrip("\n"))
                m = INSTANCE.search(line)
                if m:
                    served.instances[m.group(2)] = (m.group(1),
                                                    f"http://{m.group(3)}:{m.group(4)}")
                m = LISTEN.search(line)  # the last port announced
                if m:
                    served.url = f"http://{m.group(1)}:{m.group(2)}"
                    got.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not got.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("pdsim serve did not start:\n" + "\n".join(served.lines))
        return served

    yield start
    for served in started:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait()
