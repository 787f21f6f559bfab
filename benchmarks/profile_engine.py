"""Profile the engine on the engine-speed workload, to see where the time goes.

Runs one point of ``engine_speed.py`` (by default 10k requests, OSL 1024, the closed
loop of 64) under pyinstrument (a sampling profiler, in the ``dev`` extra) and prints
the call tree; ``--html`` also writes ``results/engine_profile.html``. Profiling slows
the run (roughly 1.5x), so read the shares, not the seconds.

    .venv/bin/python benchmarks/profile_engine.py
    .venv/bin/python benchmarks/profile_engine.py --requests 3000 --rate 7 --html
"""

from __future__ import annotations

import argparse
import sys

from _bench import RESULTS
from engine_speed import workload_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--osl", type=int, default=1024, help="output tokens per request")
    ap.add_argument("--rate", type=float, default=None,
                    help="open-loop Poisson req/s instead of the closed loop of 64 clients")
    ap.add_argument("--html", action="store_true", help="also write results/engine_profile.html")
    args = ap.parse_args()
    try:
        from pyinstrument import Profiler
    except ImportError:
        sys.exit("error: pyinstrument is not installed (pip install -e '.[dev]')")

    import pdsim

    cfg = workload_config(args.requests, args.osl, args.rate)
    profiler = Profiler(interval=0.0005)
    profiler.start()
    pdsim.simulate(cfg)
    profiler.stop()
    print(profiler.output_text(unicode=True, color=False, show_all=False))
    if args.html:
        from pdsim.output import write_atomic

        path = RESULTS / "engine_profile.html"
        write_atomic(path, profiler.output_html())
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
