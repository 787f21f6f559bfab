"""A plan as files' contents: the table rows (``plan.csv``), the front plot, the HTML
report section, and per front point its config and serve lines. Everything returns text
or bytes; the command writes them (``pdsim.commands.plan``)."""

from __future__ import annotations

import io
import json
from typing import Any

from pdsim.plan.front import VALIDATION_ERROR, VALIDATION_SOURCE
from pdsim.plan.planner import Plan, PlanPoint

CSV_FIELDS = (
    "index", "label", "mode", "gpus", "num_speculative_tokens", "router", "prefill",
    "decode", "colocated", "status", "reason", "rate_per_s", "failing_rate_per_s",
    "output_tok_s_per_gpu", "tok_s_per_user", "goodput_req_s_per_gpu", "slo_ttft_s",
    "slo_tpot_s", "mean_tpot_s", "mean_ttft_s", "acceptance_length", "tpot_lower_bound_s",
    "runs", "on_front", "chosen", "ties", "fitted", "borrowed", "not_fitted", "point_id")


def _role(p: PlanPoint, name: str) -> str:
    c = getattr(p.candidate, name)
    return "" if c is None else (f"{c.instances}x {c.layout.label}; max_num_seqs "
                                 f"{c.max_num_seqs}; max_num_batched_tokens "
                                 f"{c.max_num_batched_tokens}")


def point_row(p: PlanPoint) -> dict[str, Any]:
    """One ``plan.csv`` row."""
    f = p.figures
    feasible = p.status == "feasible"
    return {
        "index": p.index, "label": p.label, "mode": p.candidate.mode, "gpus": p.gpus,
        "num_speculative_tokens": p.candidate.num_speculative_tokens,
        "router": p.candidate.router, "prefill": _role(p, "prefill"),
        "decode": _role(p, "decode"), "colocated": _role(p, "colocated"),
        "status": p.status, "reason": p.reason, "rate_per_s": p.rate_per_s,
        "failing_rate_per_s": p.failing_rate_per_s,
        "output_tok_s_per_gpu": p.tok_s_per_gpu if feasible else None,
        "tok_s_per_user": p.tok_s_per_user if feasible else None,
        "goodput_req_s_per_gpu": p.goodput_per_gpu if feasible else None,
        "slo_ttft_s": f.get("slo_ttft_percentile_s"),
        "slo_tpot_s": f.get("slo_tpot_percentile_s"), "mean_tpot_s": f.get("mean_tpot_s"),
        "mean_ttft_s": f.get("mean_ttft_s"), "acceptance_length": f.get("acceptance_length"),
        "tpot_lower_bound_s": p.tpot_lower_bound_s, "runs": p.runs, "on_front": p.on_front,
        "chosen": p.chosen, "ties": ";".join(map(str, p.ties)),
        "fitted": "; ".join(p.provenance.get("fitted", [])),
        "borrowed": "; ".join(p.provenance.get("borrowed", [])),
        "not_fitted": "; ".join(p.provenance.get("not_fitted", [])),
        "point_id": p.point_id}


def plan_csv(pl: Plan) -> str:
    """``plan.csv``: every candidate, pruned ones included, in enumeration order."""
    from pdsim.output import records_csv

    return records_csv([point_row(p) for p in pl.points], CSV_FIELDS)


def plan_document(pl: Plan, wall_s: float | None = None) -> dict[str, Any]:
    """``plan.json``: the counts, the front, the chosen point and the baseline."""
    def brief(p: PlanPoint) -> dict[str, Any]:
        r = point_row(p)
        return {k: r[k] for k in ("index", "label", "gpus", "status", "rate_per_s",
                                  "output_tok_s_per_gpu", "tok_s_per_user",
                                  "goodput_req_s_per_gpu", "ties", "fitted", "borrowed",
                                  "not_fitted")}
    return {
        "gpus": pl.gpus, "objective": pl.spec.objective, "candidates": len(pl.points),
        "status_counts": pl.counts, "runs_simulated": pl.runs_simulated,
        "runs_cached": pl.runs_cached, "runs_shared": pl.runs_shared, "rounds": pl.rounds,
        "wall_s": wall_s, "tie_threshold": VALIDATION_ERROR, "tie_source": VALIDATION_SOURCE,
        "front": [brief(pl.points[i]) for i in pl.front],
        "chosen": brief(pl.points[pl.chosen]) if pl.chosen is not None else None,
        "baseline": brief(pl.baseline) if pl.baseline is not None else None,
    }


def _xy(points: list[PlanPoint]) -> tuple[list[float], list[float]]:
    return [p.tok_s_per_user for p in points], [p.tok_s_per_gpu for p in points]


def front_plot_png(pl: Plan, title: str) -> bytes:
    """The feasible candidates, the front, the chosen point and the baseline (PNG)."""
    from pdsim.plot_style import figure

    fig = figure(7.5, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    feasible = [p for p in pl.points if p.status == "feasible"]
    front = [pl.points[i] for i in pl.front]
    x, y = _xy(feasible)
    ax.scatter(x, y, s=14, color="0.6", label=f"feasible candidates ({len(feasible)})")
    fx, fy = _xy(sorted(front, key=lambda p: p.tok_s_per_user))
    ax.plot(fx, fy, "-o", color="C0", ms=5, label=f"Pareto front ({len(front)})")
    if pl.chosen is not None:
        c = pl.points[pl.chosen]
        ax.scatter([c.tok_s_per_user], [c.tok_s_per_gpu], s=140, marker="*", color="C3",
                   zorder=5, label="chosen")
    b = pl.baseline
    if b is not None and b.status == "feasible":
        ax.scatter([b.tok_s_per_user], [b.tok_s_per_gpu], s=60, marker="s",
                   facecolors="none", edgecolors="k", zorder=5, label="config as written")
    ax.set_xlabel("tokens/s per user (1 / mean TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    return buf.getvalue()


def report_html(pl: Plan, title: str, notes: list[str]) -> str:
    """The plan's section of the HTML report (a standalone page; needs plotly)."""
    import plotly.graph_objects as go

    from pdsim.html_report import HtmlPage, html_table, require_plotly

    require_plotly()
    page = HtmlPage(title)
    page.heading("Plan: Pareto front")
    for n in notes:
        page.note(n)
    headers = ["#", "deployment", "GPUs", "rate req/s", "out tok/s/GPU", "tok/s/user",
               "goodput req/s/GPU", "ties (within validation error)", "fitted", "borrowed",
               "not fitted"]
    rows = []
    for i in pl.front:
        p = pl.points[i]
        r = point_row(p)
        rows.append([("* " if p.chosen else "") + str(p.index), p.label, p.gpus,
                     p.rate_per_s, r["output_tok_s_per_gpu"], r["tok_s_per_user"],
                     r["goodput_req_s_per_gpu"], r["ties"] or "-", r["fitted"],
                     r["borrowed"], r["not_fitted"]])
    page.raw(html_table(headers, rows))
    feasible = [p for p in pl.points if p.status == "feasible"]
    front = sorted((pl.points[i] for i in pl.front), key=lambda p: p.tok_s_per_user)
    fig = go.Figure()
    x, y = _xy(feasible)
    fig.add_trace(go.Scatter(x=x, y=y, mode="markers", name="feasible",
                             text=[p.label for p in feasible], marker={"color": "#999"}))
    fx, fy = _xy(front)
    fig.add_trace(go.Scatter(x=fx, y=fy, mode="lines+markers", name="Pareto front",
                             text=[p.label for p in front]))
    fig.update_layout(xaxis_title="tokens/s per user (1 / mean TPOT)",
                      yaxis_title="output tokens/s per GPU", height=480)
    page.chart(fig, "no feasible candidate")
    page.heading("All candidates")
    page.raw(html_table(["#", "deployment", "status", "reason"],
                    [[p.index, p.label, p.status, p.reason] for p in pl.points]))
    return page.render()


def front_files(pl: Plan, served_model: str | None, hf_config: str | None,
                out_dir: str | None = None) -> dict[str, str]:
    """Per front point ``front/<rank>-<index>/``: ``config.yaml`` (the pdsim config to
    rerun it), ``serve.sh`` (the vllm serve lines) and, with ``hf_config`` (the model's
    config.json), ``deployment.yaml`` for ``pdsim import-vllm --deployment``, naming
    ``hf_config`` relative to its own folder when ``out_dir`` (where ``front/`` goes) is
    given, so the folder can move with the file it points at."""
    import os

    import yaml

    from pdsim.loader import dump_config
    from pdsim.plan.serve_lines import deployment_document, shell_script

    out: dict[str, str] = {}
    for rank, i in enumerate(pl.front, 1):
        p = pl.points[i]
        assert p.config is not None
        d = f"front/{rank:02d}-{p.index}"
        head = (f"# pdsim plan front point {rank} (candidate {p.index}): {p.label}\n"
                f"# {p.tok_s_per_gpu:.1f} output tok/s per GPU, {p.tok_s_per_user:.1f} "
                f"tok/s per user at {p.rate_per_s} req/s\n")
        out[f"{d}/config.yaml"] = head + dump_config(p.config)
        out[f"{d}/serve.sh"] = shell_script(p.config, served_model)
        if hf_config is not None:
            hf = (os.path.relpath(os.path.abspath(hf_config), os.path.abspath(
                os.path.join(out_dir, d))) if out_dir is not None else hf_config)
            out[f"{d}/deployment.yaml"] = yaml.safe_dump(
                deployment_document(p.config, hf, served_model), sort_keys=False,
                width=1000)
    return out


def to_json_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, allow_nan=False, default=str) + "\n"


__all__ = ["CSV_FIELDS", "front_files", "front_plot_png", "plan_csv", "plan_document",
           "point_row", "report_html"]
