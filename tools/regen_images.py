"""Regenerate docs/img/*.png from the commands the docs name.

    python tools/regen_images.py            # every image
    python tools/regen_images.py --list     # which image comes from which commands
    python tools/regen_images.py NAME ...   # only these (file names in docs/img)

Each image is a file of a pdsim command's output folder, made in a scratch folder (so
nothing is written into the tree but docs/img). ``report_mtp3_compare.png`` is a
screenshot of ``report.html`` in headless Chromium; without a ``chromium`` binary on PATH it
is skipped with a note (the other images need only pdsim). Images are not compared by a
test (their pixels change with matplotlib's and Chromium's versions); docs/outputs.md's
test checks that every linked image exists and decodes.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
SCRATCH_LINKS = ("configs", "examples", "tests", "schema")
REPORT_WIDTH_PX = 1280

#: image -> (commands run in the scratch folder, in order; the file they leave, relative to it)
IMAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "mtp3_acceptance_before_after.png": (
        ("pdsim compare configs/mtp3.yaml --out cmp --plots",),
        "cmp/compare_acceptance_per_position.png"),
    "mtp3_latency_cdf_before_after.png": (
        ("pdsim compare configs/mtp3.yaml --out cmp --plots",),
        "cmp/compare_latency_cdf.png"),
    "sweep_mtp3_fix_vs_alpha.png": (
        ("pdsim sweep configs/mtp3.yaml --sweep-file examples/sweeps/fix_vs_alpha.yaml "
         "--out sweep --no-records", "pdsim plot sweep"),
        "sweep/sweep.png"),
    "report_mtp3_compare.png": (
        ("pdsim compare configs/mtp3.yaml --out report --report",),
        "report/report.html"),
}


def _pdsim(line: str, cwd: Path) -> None:
    args = shlex.split(line)
    exe = Path(sys.executable).with_name("pdsim")
    subprocess.run([str(exe), *args[1:]], cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def _screenshot(page: Path, png: Path) -> bool:
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser",
                                                   "google-chrome")) if p), None)
    if chromium is None:
        print(f"skipped {png.name}: no chromium on PATH (apt-get install chromium)")
        return False
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--force-device-scale-factor=1",
                        "--virtual-time-budget=10000", f"--user-data-dir={profile}",
                        f"--window-size={REPORT_WIDTH_PX},2400", f"--screenshot={png}",
                        page.as_uri()], check=True, capture_output=True, timeout=120)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/regen_images.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="only these images (default: all)")
    ap.add_argument("--list", action="store_true", help="print where each image comes from")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.names) - set(IMAGES))
    if unknown:
        ap.error(f"unknown image(s) {', '.join(unknown)}; known: {', '.join(IMAGES)}")
    chosen = {k: v for k, v in IMAGES.items() if not args.names or k in args.names}
    if args.list:
        for name, (commands, made) in chosen.items():
            print(f"docs/img/{name}: {' && '.join(commands)} -> {made}")
        return 0
    with tempfile.TemporaryDirectory(prefix="pdsim-img-") as tmp:
        work = Path(tmp)
        for link in SCRATCH_LINKS:
            (work / link).symlink_to(ROOT / link, target_is_directory=True)
        done: set[str] = set()
        for name, (commands, made) in chosen.items():
            for line in commands:
                if line not in done:  # one compare run feeds two images
                    _pdsim(line, work)
                    done.add(line)
            target = IMG / name
            if made.endswith(".html"):
                if not _screenshot(work / made, target):
                    continue
            else:
                shutil.copyfile(work / made, target)
            print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
