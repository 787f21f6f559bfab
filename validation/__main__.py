"""``python -m validation``: run the rows and print them; ``--write`` regenerates
docs/validation.md, ``--check`` compares it (reads only). Without either nothing is written,
so a check never dirties the tree."""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import pdsim
from validation.harness import RowResult, run_rows
from validation.report import COMMAND, Meta, parse_meta, render
from validation.rows import load_rows

DOC = Path(__file__).resolve().parent.parent / "docs" / "validation.md"


def pdsim_commit() -> str:
    """The git commit of the pdsim package being run, ``+dirty`` if pdsim/ has changes."""
    pkg = Path(pdsim.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(pkg), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(pkg), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _print(results: list[RowResult]) -> None:
    for r in results:
        flag = "pass" if r.passed else "FAIL"
        print(format_row(r, flag))


def format_row(r: RowResult, flag: str) -> str:
    """One printed row: both values with the row's unit (``ms``, ``tok/s``, ``x`` ...)."""
    unit = r.row.published.unit
    return (f"{r.row.role.value:7} {r.row.kind.value:8} {r.row.id:52} "
            f"pdsim {r.pdsim_value:10.4g} {unit:8} published {r.published:10.4g} {unit:8}"
            f"  error {r.error_pct:+7.1f}%  tol {r.row.tolerance_pct:3.0f}%  {flag}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation", description=__doc__)
    ap.add_argument("--role", choices=["fit", "holdout"], help="only rows of this role")
    ap.add_argument("--row", action="append", default=[], metavar="ID", help="only this row")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 if a row fails or the doc is stale")
    what.add_argument("--write", action="store_true",
                      help="regenerate the document (--doc) from a full run")
    ap.add_argument("--no-write", action="store_true",
                    help="print the table only (the default; kept for old scripts)")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument("--doc", type=Path, default=DOC, help="document to regenerate")
    ap.add_argument("--commit", help="pdsim commit to record (default: git of pdsim)")
    args = ap.parse_args(argv)

    rows = load_rows(role=args.role, ids=args.row or None)
    start = time.perf_counter()
    results = run_rows(rows)
    _print(results)
    print(f"{len(results)} rows in {time.perf_counter() - start:.1f} s; "
          f"{sum(not r.passed for r in results)} outside tolerance")
    if args.json:
        args.json.write_text(json.dumps([
            {"id": r.row.id, "role": r.row.role.value, "kind": r.row.kind.value,
             "pdsim": r.pdsim_value, "published": r.published, "error_pct": r.error_pct,
             "tolerance_pct": r.row.tolerance_pct, "passed": r.passed, "runs": r.run_values}
            for r in results], indent=2) + "\n", encoding="utf-8")
    unexplained = [r.row.id for r in results if r.needs_explanation and not r.row.explanation]
    if unexplained:
        print("rows more than 30% off without an explanation: " + ", ".join(unexplained))
    full = not args.role and not args.row
    status = 0 if all(r.passed or r.row.known_failure for r in results) and not unexplained else 1
    if args.check:
        if full:
            old = args.doc.read_text(encoding="utf-8") if args.doc.exists() else ""
            meta = parse_meta(old)
            if meta is None or render(results, meta) != old:
                print(f"{args.doc} is stale: run {COMMAND}")
                status = 1
        return status
    if args.write and not full:
        print(f"--write needs every row (no --role/--row): {args.doc} left as it is")
    if full and args.write and not args.no_write:
        meta = Meta(datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
                    args.commit or pdsim_commit())
        args.doc.write_text(render(results, meta), encoding="utf-8")
        print(f"wrote {args.doc}")
    return status


if __name__ == "__main__":
    sys.exit(main())
