"""dcgm-exporter counters files (real ones, tests/fixtures/monitoring) and the collector's
``monitoring`` section, run by the real collector script over a prepared root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuaudit.collect import collector_script
from gpuaudit.model.snapshot import CounterField
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.parsers.monitoring import parse_counters_csv, parse_monitoring
from gpuaudit.parsers.warnings import collecting

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "monitoring"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_default_counters_file_of_dcgm_exporter() -> None:
    parsed = parse_counters_csv(_read("dcgm-exporter-default-counters.csv"))
    names = [f.field for f in parsed.fields]
    # The file enables 26 lines (grep -c '^DCGM'), in this order.
    assert len(names) == 26
    assert parsed.fields[0] == CounterField(
        "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", 6
    )
    # Line 26 writes "DCGM_FI_DEV_DEC_UTIL ," : dcgm-exporter trims the spaces.
    dec = next(f for f in parsed.fields if f.line == 26)
    assert (dec.field, dec.metric_type) == ("DCGM_FI_DEV_DEC_UTIL", "gauge")
    xid = next(f for f in parsed.fields if f.field == "DCGM_FI_DEV_XID_ERRORS")
    assert (xid.line, xid.metric_type, xid.help) == (
        29,
        "gauge",
        "Value of the last XID error encountered.",
    )
    driver = next(f for f in parsed.fields if f.line == 77)
    assert (driver.field, driver.metric_type) == ("DCGM_FI_DRIVER_VERSION", "label")
    for enabled in (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
    ):
        assert parsed.exports(enabled), enabled
    # ECC, retired pages, NVLink errors, the violation counters and DCGM_EXP_* are commented.
    for off in (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_RETIRED_SBE",
        "DCGM_FI_DEV_RETIRED_DBE",
        "DCGM_FI_DEV_RETIRED_PENDING",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_EXP_CLOCK_EVENTS_COUNT",
    ):
        assert off in parsed.commented and not parsed.exports(off), off
    # Line 18 comments DCGM_FI_PROF_PCIE_TX_BYTES out, line 97 enables it: it is exported.
    assert parsed.exports("DCGM_FI_PROF_PCIE_TX_BYTES")
    assert "DCGM_FI_PROF_PCIE_TX_BYTES" not in parsed.commented
    # 37 commented field lines (grep -c '^# *DCGM_'), two of them enabled further down.
    assert len(parsed.commented) == 35
    assert parsed.malformed == () and parsed.error is None


def test_dcp_metrics_file_differs_only_in_comments() -> None:
    default = parse_counters_csv(_read("dcgm-exporter-default-counters.csv"))
    dcp = parse_counters_csv(_read("dcgm-exporter-dcp-metrics-included.csv"))
    assert [f.field for f in dcp.fields] == [f.field for f in default.fields]
    # It has no "DCGM Exporter fields" block: no DCGM_EXP_* lines, commented or not.
    assert not any(c.startswith("DCGM_EXP_") for c in dcp.commented)
    # 33 commented field lines, PCIe TX/RX enabled further down.
    assert len(dcp.commented) == 31


def test_a_sites_six_field_file() -> None:
    parsed = parse_counters_csv(_read("dojangkok-l4-default-counters.csv"))
    assert [(f.field, f.metric_type, f.line) for f in parsed.fields] == [
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", 2),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", 3),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", 4),
        ("DCGM_FI_DEV_FB_FREE", "gauge", 5),
        ("DCGM_FI_DEV_FB_USED", "gauge", 6),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", 7),
    ]
    assert parsed.fields[3].help == "Framebuffer memory free (in MiB)."
    assert parsed.commented == ()  # "# Format,," names no field


def test_a_file_without_spaces_or_comments() -> None:
    parsed = parse_counters_csv(_read("gpu-observability-counters.csv"))
    assert len(parsed.fields) == 12
    assert parsed.fields[-1] == CounterField(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total volatile single bit ECC errors", 12
    )
    assert parsed.exports("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    assert not parsed.exports("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")


def test_lines_dcgm_exporter_refuses_are_kept_and_warned() -> None:
    # Derived from the six-field file: one line cut to two fields, one with a bad type, and
    # an indented comment (Go's csv reader only takes '#' in the first column).
    lines = _read("dojangkok-l4-default-counters.csv").splitlines()
    lines[2] = "DCGM_FI_DEV_GPU_UTIL,      gauge"
    lines[3] = lines[3].replace("gauge", "gage")
    lines.append("  # DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.")
    with collecting() as warnings:
        parsed = parse_counters_csv("\n".join(lines))
    assert [f.field for f in parsed.fields] == [
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
    ]
    assert parsed.malformed == (
        "line 3: 2 field(s), dcgm-exporter expects 3",
        "line 4: unknown metric type 'gage'",
        "line 8: '# DCGM_FI_DEV_XID_ERRORS' is not a DCGM field",
    )
    assert len(warnings) == 3 and all(w.source == "dcgm-exporter counters" for w in warnings)


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    exporter = root / "proc" / "4242"
    node = root / "proc" / "77"
    for d in (exporter, node, root / "proc" / "1", root / "etc" / "dcgm-exporter"):
        d.mkdir(parents=True)
    (root / "var" / "lib" / "node_exporter").mkdir(parents=True)
    (root / "proc" / "1" / "comm").write_text("systemd\n")
    (exporter / "comm").write_text("dcgm-exporter\n")
    (exporter / "cmdline").write_bytes(b"/usr/bin/dcgm-exporter\0--collectors\0/etc/site.csv\0")
    (exporter / "environ").write_bytes(b"PATH=/bin\0DCGM_EXPORTER_COLLECTORS=/etc/other.csv\0")
    (node / "comm").write_text("node_exporter\n")
    (node / "cmdline").write_bytes(
        b"/usr/bin/node_exporter\0--collector.textfile.directory=/var/lib/node_exporter\0"
    )
    (root / "etc" / "site.csv").write_text(_read("dojangkok-l4-default-counters.csv"))
    return root


def _collect(root: Path) -> str:
    env = {"PATH": os.environ["PATH"], "GPUAUDIT_ROOT": str(root), "GPUAUDIT_NVML": "0"}
    out = subprocess.run(
        ["sh", "-c", collector_script("mon1")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    section = parse_bundle_text(out).sections["monitoring"]
    assert section.rc == 0, section.stderr
    return section.stdout


def test_collector_section_names_the_file_the_exporter_reads(tmp_path: Path) -> None:
    view = parse_monitoring(_collect(_root(tmp_path)))
    assert view.proc_entries == 3
    exporter = view.dcgm_exporter_processes[0]
    assert exporter.pid == 4242
    assert exporter.argv == ("/usr/bin/dcgm-exporter", "--collectors", "/etc/site.csv")
    assert exporter.collectors_env == "/etc/other.csv"
    # The argument wins over the variable, as in dcgm-exporter (urfave/cli).
    (counters,) = view.counters
    assert (counters.path, counters.source, counters.error) == (
        "/etc/site.csv",
        "--collectors",
        None,
    )
    assert [f.field for f in counters.fields][:2] == [
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_GPU_UTIL",
    ]
    assert len(counters.fields) == 6
    assert view.dcgm_exporter_running
    assert view.node_exporter_processes[0].pid == 77
    assert view.textfile_directory == "/var/lib/node_exporter"
    assert view.textfile_directory_exists is True


def test_collector_section_falls_back_to_the_variable_then_the_default(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "proc" / "4242" / "cmdline").write_bytes(b"/usr/bin/dcgm-exporter\0")
    view = parse_monitoring(_collect(root))
    (counters,) = view.counters
    assert (counters.path, counters.source) == ("/etc/other.csv", "DCGM_EXPORTER_COLLECTORS")
    assert counters.error == "/etc/other.csv: missing" and counters.fields == ()
    (root / "proc" / "4242" / "environ").write_bytes(b"PATH=/bin\0")
    (root / "etc" / "dcgm-exporter" / "default-counters.csv").write_text(
        _read("dcgm-exporter-default-counters.csv")
    )
    (counters,) = parse_monitoring(_collect(root)).counters
    assert (counters.path, counters.source) == (
        "/etc/dcgm-exporter/default-counters.csv",
        "default",
    )
    assert len(counters.fields) == 26


@pytest.mark.parametrize(
    "line",
    ["csv\tDCGM_FI_DEV_GPU_TEMP, gauge, x", "bogus\trecord", "process\tnot-a-pid\tdcgm-exporter"],
)
def test_odd_records_are_warned_not_dropped(line: str) -> None:
    with collecting() as warnings:
        view = parse_monitoring(f"scan\tproc\t5\n{line}\n")
    assert view.proc_entries == 5 and view.processes == () and view.counters == ()
    assert len(warnings) == 1 and warnings[0].source == "monitoring"
