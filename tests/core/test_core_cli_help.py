"""Help and output conventions of the commands: help lists what each command writes and
shows no Python type metavars; ``compare`` refuses a config without speculation;
``import-metrics`` keeps its YAML on stdout (or ``-o``) and its report on stderr."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pdsim.cli import app
from pdsim.loader import load_config, read_yaml

ROOT = Path(__file__).resolve().parents[2]
MTP3 = str(ROOT / "configs" / "mtp3.yaml")
BEFORE = str(ROOT / "examples" / "real" / "metrics_before.txt")
AFTER = str(ROOT / "examples" / "real" / "metrics_after.txt")
LABEL = ["--label", "model_name=synthetic/mtp3-a"]


def _help(*cmd: str) -> str:
    out = CliRunner().invoke(app, [*cmd, "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    return out.output


COMMANDS = [c.name or c.callback.__name__ for c in app.registered_commands
            if c.callback is not None]


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_shows_no_python_type_metavars(command: str | None) -> None:
    text = _help(*([command] if command else []))
    assert "<bool>" not in text
    assert not re.search(r"<list\[", text)


def test_run_help_lists_every_file_out_writes(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["run", MTP3, "--set", "workload.num_requests=30",
                                   "--out", str(tmp_path), "--plots", "--timeline"])
    assert out.exit_code == 0, out.output
    text = re.sub(r"\s+", "", _help("run"))
    written = {p.name for p in tmp_path.iterdir()}
    assert {"summary.json", "bench_result.json", "timeseries.csv"} <= written
    for name in sorted(written):
        if name.endswith(".png"):
            assert "PNG" in text
        else:
            assert name in text, name


def test_compare_refuses_a_config_without_speculation() -> None:
    args = ["compare", str(ROOT / "configs" / "no_spec.yaml"), "--set",
            "workload.num_requests=20"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2
    assert "speculative.method: none" in out.stderr
    colocated = CliRunner().invoke(app, [*args, "--colocated"])
    assert colocated.exit_code == 0, colocated.output
    assert "nan" not in colocated.output.lower()


def test_import_metrics_yaml_on_stdout_report_on_stderr() -> None:
    mixed = CliRunner().invoke(app, ["import-metrics", BEFORE, AFTER])
    assert mixed.exit_code == 2  # two models' series: never summed silently
    assert "synthetic/mtp3-a" in mixed.stderr and "synthetic/mtp3-b" in mixed.stderr
    assert "--label model_name=" in mixed.stderr and mixed.stdout == ""
    out = CliRunner().invoke(app, ["import-metrics", BEFORE, AFTER, *LABEL])
    assert out.exit_code == 0, out.output
    data = yaml.safe_load(out.stdout)
    assert data["speculative"]["method"] == "mtp"
    assert "assumed" in out.stdout
    assert "series summed:" in out.stderr and "series summed:" not in out.stdout
    load_config({**read_yaml(MTP3), **data})  # the snippet drops into a config


def test_import_metrics_method_and_output_file(tmp_path: Path) -> None:
    target = tmp_path / "acceptance.yaml"
    out = CliRunner().invoke(app, ["import-metrics", BEFORE, AFTER, "--method", "eagle3",
                                   "-o", str(target), *LABEL])
    assert out.exit_code == 0, out.output
    assert out.stdout == ""
    data = yaml.safe_load(target.read_text())
    assert data["speculative"]["method"] == "eagle3"
    assert "assumed" not in target.read_text()
    bad = CliRunner().invoke(app, ["import-metrics", AFTER, "--method", "medusa", *LABEL])
    assert bad.exit_code == 2
    assert "--method medusa" in bad.stderr


@pytest.mark.parametrize("width", [80, 200])
def test_command_list_shows_every_description_whole(width: int) -> None:
    """``pdsim --help`` lists each command with its whole first paragraph, wrapped at
    the terminal width, never cut short with "..."."""
    out = CliRunner().invoke(app, ["--help"], terminal_width=width)
    assert out.exit_code == 0, out.output
    listing = out.output.split("Commands:", 1)[1]
    assert "..." not in listing
    flat = " ".join(listing.split())
    for info in app.registered_commands:
        if info.callback is None or not info.callback.__doc__:
            continue
        first = " ".join(info.callback.__doc__.strip().split("\n\n")[0].split())
        assert first in flat, (info.name, first)


def test_readme_lists_every_extra() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    para = readme[readme.index("optional dependencies come as extras"):]
    para = para[:para.index("\n\n")]
    for name in extras:
        if name != "dev":
            assert f"`{name}`" in para, name
