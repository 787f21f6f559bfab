"""Trace replay: exact reproduction, scaling, selection, and located errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from pdsim.errors import InputFileError
from pdsim.workload.config import AzureTrace, MooncakeTrace
from pdsim.workload.traces import read_azure, read_mooncake, replay_trace, resolve_trace_path

REPO = Path(__file__).resolve().parents[2]

MOONCAKE_ROWS = [
    {"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]},
    {"timestamp": 1250, "input_length": 512, "output_length": 9, "hash_ids": [0]},
    {"timestamp": 1250, "input_length": 1100, "output_length": 1, "hash_ids": [0, 1, 2]},
    {"timestamp": 4000.5, "input_length": 30, "output_length": 300, "hash_ids": [7]},
    {"timestamp": 9000, "input_length": 2000, "output_length": 42, "hash_ids": [3, 4, 5, 6]},
]
AZURE_TEXT = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,4808,10
2023-11-16 18:15:46.6805901,3180,8
2023-11-16 18:15:50.5,110,27
2023-11-16 23:59:59.9999999,7,1
2023-11-17 00:00:01.0000000,2048,512
"""
AZURE_REL_S = np.array([0.0, 1e-7, 3.81941, 20653.3194099, 20654.3194100])


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def mooncake_file(tmp_path: Path, rows: list[dict] = MOONCAKE_ROWS) -> Path:
    return write(tmp_path, "trace.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


# ----------------------------------------------------------------- exact reproduction


@pytest.mark.parametrize("scale", [None, 0.5, 3.0])
def test_mooncake_replays_exactly(tmp_path: Path, scale: float | None) -> None:
    path = mooncake_file(tmp_path)
    specs = replay_trace(MooncakeTrace(path=str(path), time_scale=scale))
    ts = np.array([r["timestamp"] for r in MOONCAKE_ROWS], dtype=np.float64)
    expect = (ts - ts[0]) / 1000.0 * (1.0 if scale is None else scale)
    np.testing.assert_allclose(specs.arrival_s, expect, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(specs.prompt_tokens, [r["input_length"] for r in MOONCAKE_ROWS])
    np.testing.assert_array_equal(specs.output_tokens,
                                  [r["output_length"] for r in MOONCAKE_ROWS])
    assert specs.hash_ids == tuple(tuple(r["hash_ids"]) for r in MOONCAKE_ROWS)
    assert specs.hash_block_tokens == 512
    assert specs.source == "mooncake" and specs.closed_loop_concurrency is None
    assert specs.prompt_tokens.dtype == np.int64 and specs.arrival_s.dtype == np.float64


def test_mooncake_without_hash_ids_and_other_keys(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 3, "output_length": 4, "session": "x"},
            {"timestamp": 10, "input_length": 5, "output_length": 6}]
    specs = replay_trace(MooncakeTrace(path=str(mooncake_file(tmp_path, rows))))
    assert specs.hash_ids is None
    np.testing.assert_array_equal(specs.arrival_s, [0.0, 0.01])


def test_mooncake_block_size_is_configurable(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 33, "output_length": 1, "hash_ids": [1, 2, 3]}]
    cfg = MooncakeTrace(path=str(mooncake_file(tmp_path, rows)), hash_block_tokens=16)
    assert replay_trace(cfg).hash_block_tokens == 16
    with pytest.raises(InputFileError, match="hash_block_tokens"):
        replay_trace(MooncakeTrace(path=cfg.path))


@pytest.mark.parametrize("scale", [None, 0.25])
def test_azure_replays_exactly(tmp_path: Path, scale: float | None) -> None:
    path = write(tmp_path, "azure.csv", AZURE_TEXT)
    specs = replay_trace(AzureTrace(path=str(path), time_scale=scale))
    expect = AZURE_REL_S * (1.0 if scale is None else scale)
    np.testing.assert_allclose(specs.arrival_s, expect, rtol=1e-12, atol=1e-12)
    assert specs.arrival_s[1] > 0  # 100 ns resolution survives
    np.testing.assert_array_equal(specs.prompt_tokens, [4808, 3180, 110, 7, 2048])
    np.testing.assert_array_equal(specs.output_tokens, [10, 8, 27, 1, 512])
    assert specs.hash_ids is None and specs.source == "azure"


def test_azure_columns_by_name_bom_offsets_and_blank_lines(tmp_path: Path) -> None:
    text = ("\ufeffGeneratedTokens,Extra,ContextTokens,TIMESTAMP\n"
            "5,a,50,2024-05-10 00:00:00+00:00\n\n"
            "6,b,60,2024-05-10T02:00:01.5+02:00\n"
            "7,c,70,2024-05-10 00:00:03Z\n")
    specs = replay_trace(AzureTrace(path=str(write(tmp_path, "a.csv", text))))
    np.testing.assert_allclose(specs.arrival_s, [0.0, 1.5, 3.0])
    np.testing.assert_array_equal(specs.prompt_tokens, [50, 60, 70])
    assert read_azure(tmp_path / "a.csv").line.tolist() == [2, 4, 5]


# --------------------------------------------------------------- scaling and selection


def test_target_rate(tmp_path: Path) -> None:
    specs = replay_trace(MooncakeTrace(path=str(mooncake_file(tmp_path)), target_rate_per_s=2.0))
    assert (len(specs) - 1) / specs.arrival_s[-1] == pytest.approx(2.0)
    ts = np.array([r["timestamp"] for r in MOONCAKE_ROWS], dtype=np.float64)
    rel = (ts - ts[0]) / 1000.0
    np.testing.assert_allclose(specs.arrival_s, rel * specs.origin.time_scale, rtol=1e-12)


def test_target_rate_needs_a_time_span(tmp_path: Path) -> None:
    rows = [{"timestamp": 5, "input_length": 1, "output_length": 1}] * 3
    with pytest.raises(InputFileError, match="at least two requests"):
        replay_trace(MooncakeTrace(path=str(mooncake_file(tmp_path, rows)),
                                   target_rate_per_s=1.0))


def test_start_offset_max_requests_and_duration(tmp_path: Path) -> None:
    path = str(mooncake_file(tmp_path))
    # Skip rows before 0.25 s of trace time; the first kept row arrives at 0.
    specs = replay_trace(MooncakeTrace(path=path, start_offset_s=0.25))
    np.testing.assert_allclose(specs.arrival_s, [0.0, 0.0, 2.7505, 7.75])
    np.testing.assert_array_equal(specs.prompt_tokens, [512, 1100, 30, 2000])
    assert specs.hash_ids == ((0,), (0, 1, 2), (7,), (3, 4, 5, 6))
    specs = replay_trace(MooncakeTrace(path=path, start_offset_s=0.25, max_requests=2))
    np.testing.assert_array_equal(specs.prompt_tokens, [512, 1100])
    specs = replay_trace(MooncakeTrace(path=path, time_scale=2.0), duration_s=6.0)
    np.testing.assert_allclose(specs.arrival_s, [0.0, 0.5, 0.5])  # 6.001 s is cut
    with pytest.raises(InputFileError, match="no requests left"):
        replay_trace(MooncakeTrace(path=path, start_offset_s=100.0))


def test_closed_loop_replay(tmp_path: Path) -> None:
    specs = replay_trace(MooncakeTrace(path=str(mooncake_file(tmp_path))),
                         closed_loop_concurrency=2)
    assert np.isnan(specs.arrival_s).all() and specs.closed_loop_concurrency == 2
    assert len(specs) == len(MOONCAKE_ROWS) and specs.hash_ids is not None


def test_unsorted_error_or_sort(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 1, "output_length": 1},
            {"timestamp": 300, "input_length": 2, "output_length": 1},
            {"timestamp": 100, "input_length": 3, "output_length": 1},
            {"timestamp": 100, "input_length": 4, "output_length": 1}]
    path = str(mooncake_file(tmp_path, rows))
    with pytest.raises(InputFileError) as info:
        replay_trace(MooncakeTrace(path=path))
    assert info.value.line == 3 and "set unsorted: sort" in info.value.message
    specs = replay_trace(MooncakeTrace(path=path, unsorted="sort"))
    np.testing.assert_allclose(specs.arrival_s, [0.0, 0.1, 0.1, 0.3])
    np.testing.assert_array_equal(specs.prompt_tokens, [1, 3, 4, 2])  # stable


def test_zero_lengths_error_or_skip(tmp_path: Path) -> None:
    text = AZURE_TEXT.replace(",3180,8", ",3180,0")
    path = str(write(tmp_path, "z.csv", text))
    with pytest.raises(InputFileError) as info:
        replay_trace(AzureTrace(path=path))
    assert info.value.line == 3 and "skip_zero_length" in info.value.message
    specs = replay_trace(AzureTrace(path=path, skip_zero_length=True))
    assert len(specs) == 4 and specs.origin.skipped_zero_length_rows == 1


# ------------------------------------------------------------------------ bad rows

GOOD = '{"timestamp": 0, "input_length": 10, "output_length": 2}'
BAD_MOONCAKE = [
    ("{not json", "invalid JSON"),
    ("[1, 2, 3]", "JSON object"),
    ('{"timestamp": 5, "output_length": 2}', "missing field 'input_length'"),
    ('{"input_length": 5, "output_length": 2}', "missing field 'timestamp'"),
    ('{"timestamp": "soon", "input_length": 5, "output_length": 2}', "finite number"),
    ('{"timestamp": NaN, "input_length": 5, "output_length": 2}', "finite number"),
    ('{"timestamp": -3, "input_length": 5, "output_length": 2}', "timestamp must be >= 0"),
    ('{"timestamp": 5, "input_length": -1, "output_length": 2}', "input_length must be >= 0"),
    ('{"timestamp": 5, "input_length": 5.5, "output_length": 2}', "must be an integer"),
    ('{"timestamp": 5, "input_length": "5", "output_length": 2}', "must be an integer"),
    ('{"timestamp": 5, "input_length": 5, "output_length": true}', "must be an integer"),
    ('{"timestamp": 5, "input_length": 5, "output_length": 2, "hash_ids": "ab"}',
     "list of integers"),
    ('{"timestamp": 5, "input_length": 5, "output_length": 2, "hash_ids": [1, 2]}',
     "hash_ids has 2 blocks"),
]


@pytest.mark.parametrize(("row", "message"), BAD_MOONCAKE)
def test_bad_mooncake_row_names_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, "bad.jsonl", f"{GOOD}\n\n{GOOD}\n{row}\n{GOOD}\n")
    with pytest.raises(InputFileError) as info:
        read_mooncake(path)
    err = info.value
    assert (err.file, err.line) == (str(path), 4)
    assert message in err.message
    assert str(err).startswith(f"{path}:4")


BAD_AZURE = [
    ("2023-11-16 18:15:47.1,abc,10", "ContextTokens must be a non-negative integer"),
    ("2023-11-16 18:15:47.1,12.0,10", "ContextTokens must be a non-negative integer"),
    ("2023-11-16 18:15:47.1,12,-4", "GeneratedTokens must be >= 0"),
    ("2023-11-16 18:15:47.1,12", "expected 3 fields"),
    ("2023-11-16 18:15:47.1,12,3,4", "expected 3 fields"),
    ("yesterday,12,3", "TIMESTAMP must look like"),
    ("2023-02-30 18:15:47.1,12,3", "invalid date"),
    ("2023-11-16 25:15:47.1,12,3", "invalid time of day"),
    ("2023-11-16 18:15:40.0,12,3", "timestamp goes back"),
]


@pytest.mark.parametrize(("row", "message"), BAD_AZURE)
def test_bad_azure_row_names_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    text = ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4808,10\n"
            f"{row}\n2023-11-16 18:15:48.0,1,1\n")
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(InputFileError) as info:
        replay_trace(AzureTrace(path=str(path)))
    assert (info.value.file, info.value.line) == (str(path), 3)
    assert message in info.value.message


@pytest.mark.parametrize(("text", "line", "message"), [
    ("TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46,1,1\n", 1,
     "missing column ContextTokens"),
    ("", None, "empty file"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", None, "no requests"),
    ('TIMESTAMP,ContextTokens,GeneratedTokens\n"2023-11-16 18:15:46,1,1\n', 2,
     "expected 3 fields"),  # an unclosed quote swallows the row
])
def test_bad_azure_files(tmp_path: Path, text: str, line: int | None, message: str) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(InputFileError) as info:
        replay_trace(AzureTrace(path=str(path)))
    assert info.value.file == str(path) and message in info.value.message
    if line is not None:
        assert info.value.line == line


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="no such file"):
        replay_trace(MooncakeTrace(path=str(tmp_path / "nope.jsonl")))
    with pytest.raises(InputFileError, match="directory"):
        replay_trace(AzureTrace(path=str(tmp_path)))
    with pytest.raises(InputFileError, match="no requests"):
        replay_trace(MooncakeTrace(path=str(write(tmp_path, "e.jsonl", "\n"))))


# ------------------------------------------------------------------ paths and samples


def test_relative_paths_resolve_against_the_current_directory(tmp_path: Path,
                                                              monkeypatch) -> None:
    mooncake_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert len(replay_trace(MooncakeTrace(path="trace.jsonl"))) == len(MOONCAKE_ROWS)


@pytest.mark.parametrize(("cfg", "n"), [
    (MooncakeTrace(path="pkg:traces/mooncake_sample.jsonl"), 200),
    (AzureTrace(path="pkg:traces/azure_sample.csv"), 200),
])
def test_shipped_samples_replay(cfg: MooncakeTrace | AzureTrace, n: int) -> None:
    assert resolve_trace_path(cfg.path).is_file()
    specs = replay_trace(cfg)
    assert len(specs) == n and specs.arrival_s[0] == 0.0
    assert np.all(np.diff(specs.arrival_s) >= 0)
    assert specs.prompt_tokens.min() >= 1 and specs.output_tokens.min() >= 1
    if isinstance(cfg, MooncakeTrace):
        assert specs.hash_ids is not None
        blocks = np.array([len(h) for h in specs.hash_ids])
        np.testing.assert_array_equal(blocks, -(-specs.prompt_tokens // 512))
        first = [h[0] for h in specs.hash_ids]
        assert len(set(first)) < len(first)  # shared prefixes exist


def test_shipped_samples_are_what_the_script_makes(tmp_path: Path) -> None:
    script = REPO / "examples" / "traces" / "make_samples.py"
    spec = importlib.util.spec_from_file_location("make_samples", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for made in module.write_samples(tmp_path):
        shipped = resolve_trace_path(f"pkg:traces/{made.name}")
        assert made.read_bytes() == shipped.read_bytes(), made.name
