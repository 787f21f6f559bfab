"""``Results.to_records`` and ``Results.to_pandas``: the per-request records, as plain
dicts and as a DataFrame, agree with each other and with the summary."""

from __future__ import annotations

import math

from pdsim.results import RECORD_FIELDS, Results


def test_records_as_dicts_and_dataframe_agree(mtp3_res: Results) -> None:
    rows = mtp3_res.to_records()
    assert len(rows) == mtp3_res.num_requests == mtp3_res.summary["num_requests"]
    assert all(list(r) == list(RECORD_FIELDS) for r in rows)
    rows[0]["request_id"] = -1  # a copy: the results are untouched
    assert mtp3_res.to_records()[0]["request_id"] != -1

    df = mtp3_res.to_pandas()
    assert list(df.columns) == list(RECORD_FIELDS) and len(df) == len(rows)
    finished = df[df["status"] == "finished"]
    assert len(finished) == mtp3_res.summary["completed"]
    assert math.isclose(finished["ttft_s"].mean(), mtp3_res.summary["mean_ttft_s"],
                        rel_tol=1e-9)
    assert int(df["output_tokens"].sum()) == mtp3_res.summary["total_output_tokens"]
    assert list(df["accepted_per_pos"].iloc[0]) == list(
        mtp3_res.to_records()[0]["accepted_per_pos"])
