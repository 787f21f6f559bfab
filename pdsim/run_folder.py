"""A result folder written as a unit: checked writable before the work, marked incomplete
while a run writes into it, and sealed by a manifest written last.

``manifest.json`` names the run (name, seed, SHA-256 of the resolved config, partial) and
the SHA-256 of every file the run wrote; readers call ``check_folder``, so a folder an
interrupted rerun left with files of two runs is refused, never read as one run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pdsim.errors import InputFileError, OutputError
from pdsim.output import write_json

MANIFEST = "manifest.json"


def prepare_out_dir(path: str | Path) -> Path:
    """Make ``path`` a writable folder, before any work whose results it will hold.

    ``OutputError`` (exit 2, the path and the reason) when it is a file, lies under a
    file, or cannot be created or written."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutputError(p, "exists and is not a folder; give a folder for --out")
    for parent in p.parents:
        if parent.exists() and not parent.is_dir():
            raise OutputError(p, f"{parent} is a file, so nothing can be written under it")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(p, f"cannot create the folder: {exc.strerror or exc}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise OutputError(p, "the folder is not writable")
    return p


def prepare_out_file(path: str | Path) -> Path:
    """Check, before the work, that a single output file can go to ``path``: not a
    folder, and its folder can be made (``OutputError`` otherwise)."""
    p = Path(path)
    if p.is_dir():
        raise OutputError(p, "is a folder; give a file name")
    prepare_out_dir(p.parent)
    return p


def refuse_inputs(outputs: Iterable[str | Path], inputs: Iterable[str | Path | None]) -> None:
    """``OutputError`` when an output path is one of the command's input files (the same
    file by any name: a link, ``./``, ``..``), checked before anything is written."""
    ins = [Path(i) for i in inputs if i is not None and str(i) != ""]
    for out in outputs:
        o = Path(out)
        for i in ins:
            if not i.exists() or not o.exists():
                same = i.resolve() == o.resolve()
            else:
                same = os.path.samefile(i, o)
            if same:
                raise OutputError(o, f"is the input {i}; writing it would replace the "
                                     "input: give another output path")


STAGE_PREFIX = ".pdsim-new-"


@contextlib.contextmanager
def staged_folder(out: Path, sealed: bool = True) -> Iterator[Path]:
    """A hidden folder inside ``out`` to write a new result into; when the block ends
    without an error its files (the manifest last) replace ``out``'s, and it is removed
    either way. So a run that fails or is killed while writing (a plot matplotlib cannot
    draw, a full disk) leaves ``out``'s previous result as it was: write beside, then
    swap. ``sealed``: the files are a manifest's result (``out``'s manifest is removed
    before the swap); false for files no manifest seals (an imported config), which
    leave a result sharing the folder sealed."""
    stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=out))
    try:
        yield stage
        names = sorted(p.name for p in stage.iterdir() if p.name != MANIFEST)
        if sealed:
            begin_folder(out)  # the renames are the only moment the folder is mixed
        for name in names:
            os.replace(stage / name, out / name)
        if (stage / MANIFEST).exists():
            os.replace(stage / MANIFEST, out / MANIFEST)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def begin_folder(out: Path) -> None:
    """Mark ``out`` incomplete (its manifest removed) before a run writes into it: a reader
    never takes a folder a rerun left half-written for a finished run."""
    (out / MANIFEST).unlink(missing_ok=True)


def finish_folder(out: Path, files: Iterable[str], run: Mapping[str, Any]) -> Path:
    """Write ``out``'s manifest last: the run (``run``: name, seed, config hash, partial)
    and the SHA-256 of every file it wrote. Readers check it (``check_folder``)."""
    digests = {name: _sha256(out / name) for name in files}
    return write_json(out / MANIFEST, {**run, "files": digests})


def reseal(out: Path, written: Iterable[str | Path]) -> None:
    """After a reader wrote files derived from a checked folder into it (``pdsim plot``'s
    PNGs, ``pdsim report``'s page): those the manifest seals get their new digests, so a
    figure drawn again (the same data, maybe other bytes) never leaves the folder
    refused. Files the manifest does not seal, or outside ``out``, are left alone."""
    path = out / MANIFEST
    if not path.is_file():
        return
    manifest = json.loads(path.read_text(encoding="utf-8"))
    files = dict(manifest.get("files", {}))
    changed = False
    for w in written:
        p = Path(w)
        if p.parent.resolve() == out.resolve() and p.name in files and p.is_file():
            digest = _sha256(p)
            changed |= files[p.name] != digest
            files[p.name] = digest
    if changed:
        write_json(path, {**manifest, "files": files})


def check_sealed(out: Path, reading: str) -> None:
    """``check_folder(out, reading)`` where ``out`` has a manifest (a compare or sweep
    folder pdsim wrote); one without is read as it is (written before manifests, or by
    hand)."""
    if (out / MANIFEST).is_file():
        check_folder(out, reading)


def check_folder(out: Path, reading: str | None = None) -> dict[str, Any]:
    """The manifest of a result folder whose files all match it; ``InputFileError``
    when the folder was left incomplete, a file was since replaced by another run, or the
    file the caller is ``reading`` is not one the manifest seals (another command's
    leftover in the same folder)."""
    path = out / MANIFEST
    if not path.is_file():
        raise InputFileError(str(out), None, f"no {MANIFEST}: the run writing this folder "
                             "did not finish (interrupted?) or predates manifests; rerun it")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        files = dict(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError):
        raise InputFileError(str(path), None, "not a pdsim manifest") from None
    for name, digest in files.items():
        f = out / str(name)
        if not f.is_file() or _sha256(f) != digest:
            raise InputFileError(str(f), None, f"does not match {MANIFEST} (missing or written "
                                 "by another run); rerun into an empty folder")
    if reading is not None and reading not in files:
        raise InputFileError(str(out / reading), None, f"is not one of the files {MANIFEST} "
                             f"seals ({', '.join(sorted(map(str, files))) or 'none'}): "
                             "another command's result shares the folder; rerun into an "
                             "empty folder")
    _check_one_run(out, manifest, files)
    return dict(manifest)


def _check_one_run(out: Path, manifest: Mapping[str, Any], files: Mapping[str, Any]) -> None:
    """The files a manifest seals are of the run it names: ``summary.json``'s name and seed
    and ``config.resolved.yaml``'s hash (without its derived-value comments) are the
    manifest's. A folder sealed over files of two runs is refused."""
    if "summary.json" in files:
        try:
            doc = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        except ValueError:
            doc = None
        for key in ("name", "seed"):
            if key in manifest and (not isinstance(doc, dict) or doc.get(key) != manifest[key]):
                got = doc.get(key) if isinstance(doc, dict) else None
                raise InputFileError(str(out / "summary.json"), None, f"{key} {got!r}, but "
                                     f"{MANIFEST} names {key} {manifest[key]!r}: the folder "
                                     "mixes two runs; rerun into an empty folder")
    if "config.resolved.yaml" in files and "config_sha256" in manifest:
        text = (out / "config.resolved.yaml").read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        while lines and lines[-1].startswith("# "):  # the derived values, appended
            lines.pop()
        digest = hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
        if digest != manifest["config_sha256"]:
            raise InputFileError(str(out / "config.resolved.yaml"), None, f"is not the config "
                                 f"{MANIFEST} names (config_sha256): the folder mixes two "
                                 "runs; rerun into an empty folder")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
