"""`gpuaudit audit --shards N` takes a count, and says so when it is given none."""

from __future__ import annotations

import pytest

from gpuaudit.cli import main


@pytest.mark.parametrize("value", ["0", "-2", "many", "257"])
def test_a_shard_count_that_is_no_count_is_refused_before_any_run(
    value: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    with pytest.raises(SystemExit) as stopped:
        main(["audit", "inventory/demo.py", "--shards", value, "--reports-dir", str(reports)])
    assert stopped.value.code == 2
    assert "--shards takes a number from 1 to 256" in capsys.readouterr().err
    assert not reports.exists()  # refused before a run directory was made
