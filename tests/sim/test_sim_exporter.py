"""dcgm-exporter on the simulated hosts: its unit, its /proc entries and its counters file,
as the real collector reads them; the demo's a10g-01 exports neither XID nor ECC fields."""

from __future__ import annotations

from pathlib import Path

import pytest
from simhelpers import collect, run_on

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.rules import evaluate
from gpuaudit.sim.exporter import COUNTERS_PATH, PID
from gpuaudit.sim.host import materialize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "monitoring"
# Each test builds a host and runs the whole collector on it (seconds each).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exporter")


def test_demo_host_exports_no_xid_and_no_ecc(base: Path) -> None:
    host = materialize("a10g-01", "a10g-01", base)
    # The site's file is the capture itself, byte for byte.
    on_host = (host.root_dir / COUNTERS_PATH.lstrip("/")).read_text()
    assert on_host == (FIXTURES / "dojangkok-l4-default-counters.csv").read_text()
    snapshot = build_snapshot("@sim/a10g-01", collect(host))
    view = snapshot.monitoring
    assert view is not None and view.dcgm_exporter_running
    assert view.units["dcgm-exporter"] == "active"
    (process,) = view.dcgm_exporter_processes
    assert process.pid == PID
    assert process.argv == ("/usr/local/bin/dcgm-exporter", "-f", COUNTERS_PATH)
    (counters,) = view.counters
    assert (counters.path, counters.source) == (COUNTERS_PATH, "-f")
    assert [f.field for f in counters.fields] == [
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
    ]
    (finding,) = [f for f in evaluate([snapshot]) if f.rule == "GA922"]
    assert {"xid", "ecc_uncorrectable", "ecc_correctable"} <= set(
        finding.evidence.actual["unwatched"]
    )


def test_healthy_host_exports_what_the_register_needs(base: Path) -> None:
    host = materialize("t4-01", "t4-01", base)
    snapshot = build_snapshot("@sim/t4-01", collect(host))
    assert snapshot.monitoring is not None
    (counters,) = snapshot.monitoring.counters
    # dcgm-exporter's default file with the ECC, retired-page, NVLink-error and violation
    # lines uncommented: 26 enabled lines + 13.
    assert len(counters.fields) == 39 and counters.exports("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    found = [f.rule for f in evaluate([snapshot]) if f.rule.startswith("GA92")]
    assert found == []


def test_stopping_the_unit_removes_the_process(base: Path) -> None:
    host = materialize("t4-stop", "t4-01", base)
    assert (host.root_dir / "proc" / str(PID) / "comm").exists()
    done = run_on(host, "systemctl", "stop", "dcgm-exporter")
    assert done.returncode == 0, done.stderr
    assert not (host.root_dir / "proc" / str(PID)).exists()
    snapshot = build_snapshot("@sim/t4-stop", collect(host))
    assert snapshot.monitoring is not None and not snapshot.monitoring.dcgm_exporter_running
    (finding,) = [f for f in evaluate([snapshot]) if f.rule == "GA921"]
    assert "dcgm-exporter: inactive" in finding.message
