"""Errors pdsim reports to users: each names where the problem is."""

from __future__ import annotations

from pathlib import Path


class PdsimError(Exception):
    """Base of every error pdsim reports to the user without a traceback."""


class ConfigError(PdsimError):
    """One or more configuration problems, each located by a dotted path.

    ``issues`` is a list of ``(path, message)``; ``str()`` gives one ``path: message`` line
    per issue, the form the CLI prints after ``error:``.
    """

    def __init__(self, path: str, message: str | None = None,
                 issues: list[tuple[str, str]] | None = None) -> None:
        if issues is None:
            issues = [(path, message or "")]
        self.issues = issues
        self.path = issues[0][0]
        self.message = issues[0][1]
        super().__init__("\n".join(f"{p}: {m}" if p else m for p, m in issues))


class RequestSpecsError(PdsimError):
    """Request specs (from any source: synthetic, a trace, a benchmark, the API) that no
    run can serve: a NaN, negative or unsorted arrival, a length out of range."""


class SimulationStalled(PdsimError):
    """The simulated clock stood still: an engine repeated steps that cost no time."""


class OutputError(PdsimError):
    """An output path pdsim cannot write: ``path: reason``."""

    def __init__(self, path: str | Path, message: str) -> None:
        self.path = str(path)
        self.message = message
        super().__init__(f"{path}: {message}")


class InputFileError(PdsimError):
    """A problem in an input file, located by file name and line (and column)."""

    def __init__(self, file: str, line: int | None, message: str,
                 column: int | None = None) -> None:
        self.file = file
        self.line = line
        self.column = column
        self.message = message
        where = file
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        super().__init__(f"{where}: {message}")


def read_text_file(path: str | Path, kind: str) -> str:
    """The UTF-8 text of ``path``; a missing, directory or unreadable file is an
    ``InputFileError`` naming it (``kind`` says what was expected, e.g. "a YAML file")."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(str(p), None, "no such file") from None
    except IsADirectoryError:
        raise InputFileError(str(p), None, f"is a directory, not {kind}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(str(p), None, f"cannot be read: {exc}") from None
