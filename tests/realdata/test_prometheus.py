"""Acceptance from vLLM's Prometheus text: aggregation, selectors, intervals, bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from pdsim.config import SpeculativeConfig
from pdsim.errors import InputFileError, PdsimError
from pdsim.realdata import (
    AcceptanceStats,
    acceptance_between,
    acceptance_from_scrape,
    import_metrics_report,
    parse_scrape,
    read_scrape,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "real"


def exposition(series: Mapping[tuple[str, str], tuple[int, int, int, tuple[int, ...]]],
               *, suffix: str = "_total", created: bool = True) -> str:
    """Text as prometheus_client writes it: HELP/TYPE lines, _total samples, _created."""
    out = ["# a comment line that is not HELP or TYPE",
           "# HELP vllm:num_requests_running Number of requests running.",
           "# TYPE vllm:num_requests_running gauge"]
    for (model, engine) in series:
        out.append(f'vllm:num_requests_running{{engine="{engine}",model_name="{model}"}} 3.0')
    names = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
             "vllm:spec_decode_num_accepted_tokens")
    for k, name in enumerate(names):
        out.append(f"# HELP {name}{suffix} help text")
        out.append(f"# TYPE {name}{suffix} counter")
        for (model, engine), counts in series.items():
            lbl = f'engine="{engine}",model_name="{model}"'
            value = counts[k]
            assert isinstance(value, int)
            out.append(f"{name}{suffix}{{{lbl}}} {float(value)}")
            if created:
                out.append(f"{name}_created{{{lbl}}} 1.7e9")
    pp = "vllm:spec_decode_num_accepted_tokens_per_pos"
    out.append(f"# TYPE {pp}{suffix} counter")
    for (model, engine), counts in series.items():
        for i, c in enumerate(counts[3]):
            out.append(f'{pp}{suffix}{{engine="{engine}",model_name="{model}",position="{i}"}}'
                       f" {float(c)}")
    return "\n".join(out) + "\n"


# (drafts, draft tokens, accepted, per position) per (model, engine); consistent with MTP-3.
BEFORE = {("a", "0"): (100, 300, 180, (80, 60, 40)),
          ("a", "1"): (200, 600, 330, (150, 110, 70)),
          ("b", "0"): (50, 150, 60, (30, 20, 10))}
AFTER = {("a", "0"): (1100, 3300, 2180, (880, 760, 540)),
         ("a", "1"): (1200, 3600, 1830, (950, 610, 270)),
         ("b", "0"): (550, 1650, 560, (330, 170, 60))}


def test_one_scrape_sums_the_engines_of_one_model() -> None:
    st = acceptance_from_scrape(parse_scrape(exposition(BEFORE)), {"model_name": "a"})
    assert (st.num_drafts, st.num_draft_tokens, st.num_accepted_tokens) == (300, 900, 510)
    assert st.accepted_per_pos == (230, 170, 110)
    assert len(st.label_sets) == 2
    assert st.acceptance_rate == pytest.approx(510 / 900)
    assert st.acceptance_length == pytest.approx(1 + 510 / 300)
    assert st.per_position_rates == pytest.approx((230 / 300, 170 / 300, 110 / 300))
    assert sum(st.per_position_rates) == pytest.approx(st.acceptance_length - 1)
    assert st.num_speculative_tokens == 3


def test_two_models_are_never_summed() -> None:
    """Without a selector, two models' counters are an error naming both, not a sum."""
    scrape = parse_scrape(exposition(BEFORE), "m.txt")
    for selector in (None, {"engine": "0"}):
        with pytest.raises(InputFileError, match=r"2 models \(model_name 'a', 'b'\).*"
                                                 r"--label model_name=NAME"):
            acceptance_from_scrape(scrape, selector)
    with pytest.raises(InputFileError, match=r"2 models"):
        acceptance_between(parse_scrape(exposition(BEFORE)), parse_scrape(exposition(AFTER)))


@pytest.mark.parametrize("suffix,created", [("_total", True), ("", False), ("_total", False)])
def test_counter_spellings(suffix: str, created: bool) -> None:
    st = acceptance_from_scrape(parse_scrape(exposition(BEFORE, suffix=suffix,
                                                        created=created)), {"model_name": "a"})
    assert st.num_drafts == 300 and st.accepted_per_pos == (230, 170, 110)


def test_selector_filters_label_sets() -> None:
    scrape = parse_scrape(exposition(BEFORE))
    a = acceptance_from_scrape(scrape, {"model_name": "a"})
    assert (a.num_drafts, a.num_accepted_tokens, a.accepted_per_pos) == (300, 510, (230, 170, 110))
    e0 = acceptance_from_scrape(scrape, {"engine": "0", "model_name": "b"})
    assert e0.num_drafts == 50
    one = acceptance_from_scrape(scrape, {"model_name": "a", "engine": "1"})
    assert one.num_drafts == 200 and one.label_sets == ('{engine="1",model_name="a"}',)
    with pytest.raises(InputFileError, match=r"no spec-decode series matches.*label sets present"):
        acceptance_from_scrape(scrape, {"model_name": "zzz"})


def test_two_scrapes_give_the_interval() -> None:
    before, after = parse_scrape(exposition(BEFORE), "b.txt"), parse_scrape(exposition(AFTER),
                                                                           "a.txt")
    a = acceptance_between(before, after, {"model_name": "a"})
    assert (a.num_drafts, a.num_draft_tokens, a.num_accepted_tokens) == (2000, 6000, 3500)
    assert a.accepted_per_pos == (1600, 1200, 700)
    assert a.per_position_rates == pytest.approx((0.8, 0.6, 0.35))
    assert a.acceptance_length == pytest.approx(2.75)
    assert a.source == "b.txt -> a.txt"


def test_new_series_counts_from_zero() -> None:
    before = {k: v for k, v in BEFORE.items() if k != ("b", "0")}
    st = acceptance_between(parse_scrape(exposition(before)), parse_scrape(exposition(AFTER)),
                            {"model_name": "b"})
    assert st.num_drafts == 550


def test_counter_reset_is_an_error() -> None:
    after = dict(AFTER)
    after[("a", "1")] = (20, 60, 30, (15, 10, 5))
    with pytest.raises(InputFileError, match=r"went down.*counter reset"):
        acceptance_between(parse_scrape(exposition(BEFORE), "before.txt"),
                           parse_scrape(exposition(after), "after.txt"))


def test_vanished_series_is_an_error() -> None:
    after = {k: v for k, v in AFTER.items() if k != ("b", "0")}
    with pytest.raises(InputFileError, match="missing here"):
        acceptance_between(parse_scrape(exposition(BEFORE)), parse_scrape(exposition(after)))


def test_zero_drafts_in_interval_is_an_error() -> None:
    with pytest.raises(InputFileError, match="zero drafted steps"):
        acceptance_between(parse_scrape(exposition(BEFORE)), parse_scrape(exposition(BEFORE)),
                           {"model_name": "a"})


@pytest.mark.parametrize("text,pattern,line", [
    ('{"num_drafts": 3}\n', "not Prometheus text exposition", 1),
    ("<html><body>502 Bad Gateway</body></html>\n", "not Prometheus text exposition", 1),
    ('# c\nvllm:spec_decode_num_drafts_total{engine="0"} lots\n', "could not convert", 2),
    ("vllm:num_requests_running 3\nvllm:prompt_tokens_total 10\n",
     "no vLLM spec-decode counters found", None),
    ("", "no vLLM spec-decode counters found", None),
])
def test_malformed_text_is_a_located_error(text: str, pattern: str, line: int | None) -> None:
    with pytest.raises(InputFileError, match=pattern) as info:
        parse_scrape(text, "m.txt")
    assert info.value.file == "m.txt" and info.value.line == line


def test_incomplete_series_are_errors() -> None:
    text = exposition(BEFORE)
    no_pos = "\n".join(ln for ln in text.splitlines()
                       if not ('position=' in ln and 'model_name="b"' in ln)) + "\n"
    with pytest.raises(InputFileError, match=r'model_name="b"\} lacks .*per_pos'):
        parse_scrape(no_pos)
    gap = text.replace('model_name="b",position="1"', 'model_name="b",position="5"')
    with pytest.raises(InputFileError, match=r"positions .*0\.\.N-1"):
        parse_scrape(gap)
    frac = text.replace('vllm:spec_decode_num_drafts_total{engine="0",model_name="a"} 100.0',
                        'vllm:spec_decode_num_drafts_total{engine="0",model_name="a"} 100.5')
    with pytest.raises(InputFileError, match="whole number"):
        parse_scrape(frac)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="no such file"):
        read_scrape(tmp_path / "nope.txt")


def test_config_snippet_is_a_valid_pdsim_config() -> None:
    st = acceptance_between(parse_scrape(exposition(BEFORE)), parse_scrape(exposition(AFTER)),
                            {"model_name": "a"})
    data = yaml.safe_load(st.to_config_yaml())
    spec = SpeculativeConfig.model_validate_json(json.dumps(data["speculative"]))
    assert spec.method == "mtp" and spec.num_speculative_tokens == 3
    assert spec.acceptance.rates == pytest.approx((0.8, 0.6, 0.35))  # type: ignore[union-attr]


def test_ragged_draft_counts_fall_back_to_positions() -> None:
    st = AcceptanceStats(num_drafts=10, num_draft_tokens=25, num_accepted_tokens=9,
                         accepted_per_pos=(5, 3, 1))
    assert st.num_speculative_tokens is None
    assert "num_speculative_tokens: 3" in st.to_config_yaml()
    assert math.isnan(AcceptanceStats(0, 0, 0, ()).acceptance_length)


def test_import_metrics_report_on_shipped_examples() -> None:
    before, after = str(EXAMPLES / "metrics_before.txt"), str(EXAMPLES / "metrics_after.txt")
    with pytest.raises(InputFileError, match="'synthetic/mtp3-a', 'synthetic/mtp3-b'"):
        import_metrics_report([before, after], None)  # two models: never summed
    sel = {"model_name": "synthetic/mtp3-a"}
    once, _ = import_metrics_report([after], sel)
    a, snippet = import_metrics_report([before, after], sel)
    assert len(a.label_sets) == 2 and a.num_speculative_tokens == 3
    assert a.num_drafts < once.num_drafts
    assert "SYNTHETIC EXAMPLE" in (EXAMPLES / "metrics_before.txt").read_text().splitlines()[0]
    b, _ = import_metrics_report([before, after], {"model_name": "synthetic/mtp3-b"})
    assert a.acceptance_length > b.acceptance_length
    yaml.safe_load(snippet)
    with pytest.raises(PdsimError, match="one metrics scrape, or two"):
        import_metrics_report([before, after, after], None)


def test_shipped_examples_are_reproducible(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(EXAMPLES / "make_examples.py"), str(tmp_path)],
                   check=True, capture_output=True, cwd=ROOT)
    for name in ("metrics_before.txt", "metrics_after.txt", "bench_result.json"):
        assert (tmp_path / name).read_bytes() == (EXAMPLES / name).read_bytes(), name


def test_concatenated_scrapes_sum_identical_label_sets() -> None:
    single = acceptance_from_scrape(parse_scrape(exposition(BEFORE)), {"model_name": "a"})
    both = acceptance_from_scrape(parse_scrape(exposition(BEFORE) + exposition(BEFORE)),
                                  {"model_name": "a"})
    assert both.num_drafts == 2 * single.num_drafts
    assert both.accepted_per_pos == tuple(2 * c for c in single.accepted_per_pos)
    assert both.acceptance_length == pytest.approx(single.acceptance_length)
