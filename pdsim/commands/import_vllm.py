"""``pdsim import-vllm``: a deployment's ``vllm serve`` commands and its model's
``config.json``, written as a pdsim config and a model profile.

Exit codes: 0 written; 2 a user error (an unknown or conflicting option, a config.json pdsim
cannot read, a deployment that does not load), printed as ``error: where: what``.
"""

# No ``from __future__ import annotations``: typer evaluates the command's annotations in
# this module's globals.
from pathlib import Path
from typing import Annotated, Any

import typer

from pdsim.commands._options import out_path


def _deployment_file(path: Path) -> tuple[dict[str, Any], Path]:
    """A deployment YAML: ``hf_config``, optional ``hardware``, and per role a mapping of
    ``command``, ``count``, ``hardware`` and ``name`` (or a list of them: pools). Paths in it
    are relative to its folder."""
    from pdsim.errors import InputFileError
    from pdsim.loader import read_yaml

    data = read_yaml(path)
    allowed = {"hf_config", "hardware", "prefill", "decode", "colocated"}
    extra = sorted(set(data) - allowed)
    if extra:
        raise InputFileError(str(path), None, f"unknown key(s) {', '.join(extra)}; allowed: "
                             f"{', '.join(sorted(allowed))}")
    return data, path.parent


def _role_commands(data: dict[str, Any], where: str, hardware: str | None) -> list[Any]:
    """The file's commands: per role a command string, a mapping (command, count,
    hardware, name) or a list of those (several pools of the role)."""
    from pdsim.errors import ConfigError
    from pdsim.importers.deployment import ROLES, RoleCommand

    out = []
    default_hw = hardware or data.get("hardware")
    for role in ROLES:
        entries = data.get(role)
        if entries is None:
            continue
        for i, entry in enumerate(entries if isinstance(entries, list) else [entries]):
            at = f"{where}: {role}" + (f"[{i}]" if isinstance(entries, list) else "")
            if isinstance(entry, str):
                entry = {"command": entry}
            if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
                raise ConfigError(at, "expected a command string or a mapping with command "
                                  "(and count, hardware, name)")
            extra = sorted(set(entry) - {"command", "count", "hardware", "name"})
            if extra:
                raise ConfigError(at, f"unknown key(s) {', '.join(extra)}")
            count = entry.get("count", 1)
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ConfigError(f"{at}.count", f"{count!r} must be a whole number >= 1")
            hw = entry.get("hardware", default_hw)
            name = entry.get("name")
            out.append(RoleCommand(role=role, command=entry["command"], count=count,
                                   hardware=str(hw or "h200"), hardware_assumed=hw is None,
                                   name=None if name is None else str(name)))
    return out


def register(app: typer.Typer) -> None:
    """Add ``pdsim import-vllm`` to ``app``."""
    from pdsim.commands._shared import console, err_console, user_errors

    Count = Annotated[int, typer.Option(
        min=1, metavar="N",
        help="Instances started by that command (each --data-parallel-size engines).")]

    @app.command("import-vllm")
    @user_errors
    def import_vllm(
        out: Annotated[Path, typer.Option(parser=out_path,
            metavar="DIR",
            help="Folder to write config.yaml and the model profile (<model>.model.yaml) "
                 "into.")],
        hf_config: Annotated[Path | None, typer.Option(
            metavar="CONFIG.json",
            help="The model's Hugging Face config.json (default: the deployment file's "
                 "hf_config).")] = None,
        prefill: Annotated[str | None, typer.Option(
            metavar="'vllm serve ...'",
            help="Command line of the prefill (P) instances, quoted as one argument.")
        ] = None,
        decode: Annotated[str | None, typer.Option(
            metavar="'vllm serve ...'", help="Command line of the decode (D) instances.")
        ] = None,
        colocated: Annotated[str | None, typer.Option(
            metavar="'vllm serve ...'",
            help="Command line of colocated instances (prefill and decode in one).")] = None,
        prefill_count: Count = 1,
        decode_count: Count = 1,
        colocated_count: Count = 1,
        deployment: Annotated[Path | None, typer.Option(
            metavar="DEPLOYMENT.yaml",
            help="A YAML file with hf_config, hardware and per role (prefill, decode, "
                 "colocated) a command and count, instead of the command options.")] = None,
        hardware: Annotated[str | None, typer.Option(
            help="Hardware profile of the GPUs (pdsim profile lists them; default h200, "
                 "listed as assumed).")] = None,
    ) -> None:
        """Turn vllm serve command lines and a config.json into a pdsim config.

        Writes OUT/config.yaml and OUT/<model>.model.yaml and lists what it had to
        assume and what it ignored; `pdsim run OUT/config.yaml` then simulates the
        deployment."""
        from pdsim.errors import PdsimError
        from pdsim.importers.deployment import RoleCommand, import_deployment
        from pdsim.importers.hf_config import read_hf_config
        from pdsim.importers.render import result_yaml
        from pdsim.output import write_atomic
        from pdsim.run_folder import prepare_out_dir, refuse_inputs, staged_folder

        options = {"prefill": (prefill, prefill_count), "decode": (decode, decode_count),
                   "colocated": (colocated, colocated_count)}
        commands: list[RoleCommand] = [
            RoleCommand(role=r, command=c, count=n, hardware=hardware or "h200",
                        hardware_assumed=hardware is None)
            for r, (c, n) in options.items() if c is not None]
        if deployment is not None:
            if commands:
                raise PdsimError("--deployment: give the commands in the file or as "
                                 "--prefill/--decode/--colocated, not both")
            data, base = _deployment_file(deployment)
            commands = _role_commands(data, str(deployment), hardware)
            if hf_config is None and data.get("hf_config") is not None:
                hf_config = base / str(data["hf_config"])
                if not hf_config.is_file():  # say which field of which file named it
                    raise PdsimError(f"{deployment}: hf_config: {hf_config}: no such file "
                                     f"(a path relative to the deployment file)")
        if hf_config is None:
            raise PdsimError("--hf-config: missing; give the model's config.json")
        cfg = read_hf_config(hf_config)
        result = import_deployment(commands, cfg, hf_source=hf_config.name)
        config_text, profile_text = result_yaml(result, hf_config.name)
        refuse_inputs([out / result.profile_file, out / "config.yaml"],
                      [deployment, hf_config])
        prepare_out_dir(out)
        # the config names the profile: both written beside, then swapped in together
        with staged_folder(out, sealed=False) as stage:
            write_atomic(stage / result.profile_file, profile_text)
            write_atomic(stage / "config.yaml", config_text)
        for title, items in (("assumed", result.assumed), ("ignored", result.ignored)):
            if items:
                err_console.print(f"{title}:", markup=False, highlight=False)
                for item in items:
                    err_console.print(f"  - {item}", markup=False, highlight=False,
                                      soft_wrap=True)
        console.print(f"wrote {out / 'config.yaml'} and {out / result.profile_file}",
                      markup=False, highlight=False)
        console.print(f"next: pdsim run {out / 'config.yaml'}", markup=False, highlight=False)
