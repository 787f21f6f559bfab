"""Resident memory by phase of one ``simulate()`` at engine_scale.py's workload.

Builds the simulation (``keep_requests=False``, as ``simulate`` does), runs it to the
end, finalizes it and builds the results, printing the resident set (``/proc/self/statm``,
sampled every 2 ms by a thread, so short peaks between marks are caught) at each mark
and the process's peak (``ru_maxrss``). Linux only.

    .venv/bin/python benchmarks/memory_phases.py 100000            # light load, 1 req/s
    .venv/bin/python benchmarks/memory_phases.py 100000 --rate 20  # heavy load
"""

from __future__ import annotations

import argparse
import os
import resource
import threading
import time

import engine_scale
from engine_scale import OUTPUT_TOKENS
from engine_speed import workload_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("num_requests", type=int)
    ap.add_argument("--rate", type=float, default=engine_scale.LOADS["light"])
    ap.add_argument("--record-steps", choices=("aggregates", "full"), default="aggregates")
    args = ap.parse_args()

    from pdsim.results import results_from
    from pdsim.simulation import Simulation

    cfg = workload_config(args.num_requests, OUTPUT_TOKENS, args.rate,
                          engine_scale.extra(args.record_steps))
    page = os.sysconf("SC_PAGE_SIZE")
    peak = [0.0]
    stop = threading.Event()

    def rss_mib() -> float:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * page / 2**20

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mib())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    def mark(label: str) -> None:
        print(f"{label:>12}: {rss_mib():8.1f} MiB now, {peak[0]:8.1f} MiB peak so far",
              flush=True)

    mark("imports")
    sim = Simulation(cfg, keep_requests=False)
    mark("built")
    t0 = time.process_time()
    sim.start()
    while not sim.done:  # Simulation.run's events, with a mark before its results
        sim.step()
    mark("run end")
    facts = sim.finalize()
    mark("finalized")
    res = results_from(facts)
    cpu = time.process_time() - t0
    stop.set()
    sampler.join()
    mark("results")
    print(f"{args.num_requests} requests at {args.rate} req/s: {res.summary.completed} "
          f"completed, {cpu:.1f} s CPU, ru_maxrss "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
