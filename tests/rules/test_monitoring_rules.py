"""GA921-GA924: dcgm-exporter running, its counters covering the register's risks, the
textfile directory for gpuaudit.prom, and the site's alert rules (real files from
tests/fixtures/monitoring)."""

from __future__ import annotations

from pathlib import Path

from gpuaudit.model.snapshot import ExporterProcess, MonitoringView, Section
from gpuaudit.parsers.monitoring import parse_counters_csv
from gpuaudit.policy import load_policy
from gpuaudit.rules import assess, evaluate
from gpuaudit.rules.base import Outcome, Severity
from gpuaudit.rules.monitoring_coverage import ALERT_CLASSES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "monitoring"
DEFAULT_PATH = "/etc/dcgm-exporter/default-counters.csv"
EXPORTER = ExporterProcess(2817, "dcgm-exporter", ("/usr/bin/dcgm-exporter",))


def view(fixture: str | None = "dcgm-exporter-default-counters.csv", **changes) -> MonitoringView:
    counters = ()
    if fixture is not None:
        text = (FIXTURES / fixture).read_text(encoding="utf-8")
        counters = (parse_counters_csv(text, DEFAULT_PATH, "default"),)
    fields = {
        "units": {"nvidia-dcgm-exporter": "inactive", "dcgm-exporter": "active"},
        "proc_entries": 200,
        "processes": (EXPORTER,),
        "counters": counters,
    }
    fields.update(changes)
    return MonitoringView(**fields)


def with_view(make_host, monitoring, **changes):
    sections = {"monitoring": Section(rc=0, stdout="scan\tproc\t200\n")}
    return make_host(monitoring=monitoring, sections=sections, **changes)


# --- GA921 ------------------------------------------------------------------------------------


def test_exporter_absent_on_a_datacenter_host(make_host, findings):
    stopped = view(None, units={"dcgm-exporter": "failed"}, processes=())
    (f,) = findings("GA921", with_view(make_host, stopped))
    assert f.severity is Severity.MEDIUM and f.category == "monitoring"
    assert f.evidence.actual == {"dcgm-exporter": "failed"}
    assert "dcgm-exporter: failed" in f.message and "no dcgm-exporter process" in f.message


def test_exporter_rule_passes_silent_or_not_evaluated(make_host, make_gpu, findings):
    assert findings("GA921", with_view(make_host, view())) == []
    # A process alone (a container the unit does not know) counts.
    container = view(units={}, processes=(EXPORTER,))
    assert findings("GA921", with_view(make_host, container)) == []
    stopped = view(None, units={"dcgm-exporter": "inactive"}, processes=())
    desktop = [make_gpu(0, name="NVIDIA GeForce RTX 3090")]
    assert findings("GA921", with_view(make_host, stopped, gpus=desktop)) == []
    waived = {"monitoring_required": False}
    assert findings("GA921", with_view(make_host, stopped), policy=waived) == []
    # A snapshot from before the section existed: not evaluated, never a pass.
    old = make_host()
    outcome = next(o for o in assess([old]).outcomes if o.rule == "GA921")
    assert outcome.outcome is Outcome.NOT_EVALUATED
    assert "monitoring section was not collected" in outcome.reason


# --- GA922 ------------------------------------------------------------------------------------


def test_default_counters_leave_ecc_unwatched(make_host, findings):
    (f,) = findings("GA922", with_view(make_host, view()))
    actual = f.evidence.actual
    # The conftest GPUs report remapped rows, no retired pages, and the host has no NVLink:
    # retired pages and NVLink errors do not apply. XID and remaps are in the default file.
    assert actual["unwatched"] == ["ecc_uncorrectable", "ecc_correctable", "clock_reasons"]
    assert actual["source"] == "default"
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in actual["commented_out"]
    assert "DCGM_FI_DEV_XID_ERRORS" not in actual["missing_fields"]
    assert f.severity is Severity.MEDIUM  # uncorrectable ECC unwatched


def test_six_field_file_misses_xid_and_ecc(make_host, findings):
    (f,) = findings("GA922", with_view(make_host, view("dojangkok-l4-default-counters.csv")))
    assert f.evidence.actual["unwatched"] == [
        "xid",
        "ecc_uncorrectable",
        "ecc_correctable",
        "remapped_rows",
        "clock_reasons",
    ]
    assert "XID errors (GA301): none of DCGM_FI_DEV_XID_ERRORS" in f.message
    assert f.evidence.actual["commented_out"] == []


def test_partly_watched_class_names_the_missing_fields(make_host, findings):
    # The gpu-observability file has XID, ECC volatile counters, temperature and memory.
    (f,) = findings("GA922", with_view(make_host, view("gpu-observability-counters.csv")))
    assert f.evidence.actual["unwatched"] == ["remapped_rows", "clock_reasons"]
    # Volatile ECC counters are enough for the ECC classes: any one field watches them.
    assert "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL" not in f.evidence.actual["missing_fields"]
    assert f.severity is Severity.MEDIUM  # remapped rows are page-worthy


def test_counters_rule_not_evaluated_when_the_file_was_unreadable(make_host):
    from gpuaudit.model.snapshot import CountersFile

    broken = view(None, counters=(CountersFile(DEFAULT_PATH, error=f"{DEFAULT_PATH}: unreadable"),))
    outcome = next(o for o in assess([with_view(make_host, broken)]).outcomes if o.rule == "GA922")
    assert outcome.outcome is Outcome.NOT_EVALUATED and "unreadable" in outcome.reason


# --- GA923 ------------------------------------------------------------------------------------


def test_textfile_directory_only_when_the_policy_wants_it(make_host, findings):
    host = with_view(make_host, view())
    assert findings("GA923", host) == []
    wanted = {"monitoring": {"textfile_scrape": True}}
    (f,) = findings("GA923", host, policy=wanted)
    assert "node_exporter is not running" in f.message
    node = ExporterProcess(77, "node_exporter", ("/usr/bin/node_exporter",))
    missing = view(
        processes=(EXPORTER, node),
        textfile_directory="/var/lib/node_exporter",
        textfile_directory_exists=False,
        textfile_directory_writable=False,
    )
    (f,) = findings("GA923", with_view(make_host, missing), policy=wanted)
    assert "/var/lib/node_exporter does not exist" in f.message
    ok = view(
        processes=(EXPORTER, node),
        textfile_directory="/var/lib/node_exporter",
        textfile_directory_exists=True,
        textfile_directory_writable=True,
    )
    assert findings("GA923", with_view(make_host, ok), policy=wanted) == []


# --- GA924 ------------------------------------------------------------------------------------


def _policy(tmp_path: Path, monitoring: str):
    (tmp_path / "policy.yaml").write_text(f"version: 1\ndefaults:\n  monitoring: {monitoring}\n")
    return load_policy(tmp_path / "policy.yaml")


def test_a_sites_rules_file_alerts_on_memory_only(tmp_path, make_host):
    (tmp_path / "alerts").mkdir()
    rules = (FIXTURES / "gpu-observability-alerts.yml").read_text()
    (tmp_path / "alerts" / "gpu.yml").write_text(rules)
    policy = _policy(tmp_path, "{alert_rules: alerts/gpu.yml}")
    (f,) = [f for f in evaluate([make_host()], policy) if f.rule == "GA924"]
    assert f.host == "(fleet)"
    assert f.message.startswith("5 of 6 GPU failure classes have no alert")
    assert f.evidence.actual["memory_pressure"] == [
        "GPUVRAMSaturationHigh",
        "GPUVRAMAllocationSpike",
        "GPUVRAMSustainedPressure",
    ]
    assert f.evidence.actual["xid"] == [] and f.evidence.actual["gpu_count"] == []
    assert f.evidence.excerpt == str(tmp_path / "alerts" / "gpu.yml")


def test_no_rules_file_is_reported_only_when_asked(tmp_path, make_host):
    quiet = _policy(tmp_path, "{}")
    assert [f for f in evaluate([make_host()], quiet) if f.rule == "GA924"] == []
    asked = _policy(tmp_path, "{require_alerts: true}")
    (f,) = [f for f in evaluate([make_host()], asked) if f.rule == "GA924"]
    assert f.message.startswith(f"{len(ALERT_CLASSES)} of {len(ALERT_CLASSES)}")


def test_unreadable_rules_file_is_not_evaluated(tmp_path, make_host):
    policy = _policy(tmp_path, "{alert_rules: missing.yml}")
    outcome = next(o for o in assess([make_host()], policy).outcomes if o.rule == "GA924")
    assert outcome.outcome is Outcome.NOT_EVALUATED
    assert "cannot read the alert rules file" in outcome.reason
    (tmp_path / "bad.yml").write_text("rules: []\n")
    policy = _policy(tmp_path, "{alert_rules: bad.yml}")
    outcome = next(o for o in assess([make_host()], policy).outcomes if o.rule == "GA924")
    assert outcome.outcome is Outcome.NOT_EVALUATED and "no 'groups' list" in outcome.reason


def test_a_run_keeps_the_sites_rules_file_so_a_rebuild_judges_alerts_the_same(tmp_path, make_host):
    site = tmp_path / "site"
    (site / "alerts").mkdir(parents=True)
    (site / "alerts" / "gpu.yml").write_text(
        (FIXTURES / "gpu-observability-alerts.yml").read_text()
    )
    policy = _policy(site, "{alert_rules: alerts/gpu.yml}")
    run = tmp_path / "run"
    copied = load_policy(policy.copy_to(run))  # what gpuaudit report RUN reads
    assert (run / "alerts" / "gpu.yml").read_bytes() == (site / "alerts" / "gpu.yml").read_bytes()
    (before,) = [f for f in evaluate([make_host()], policy) if f.rule == "GA924"]
    (after,) = [f for f in evaluate([make_host()], copied) if f.rule == "GA924"]
    # The same verdict, on the run's copy of the file.
    assert after.evidence.actual == before.evidence.actual
    assert after.message == before.message.replace(str(site), str(run))


def test_rules_files_outside_the_policys_folder_are_copied_into_the_run_too(
    tmp_path, make_host
) -> None:
    """A rules file named with .. or by an absolute path is copied into the run's alert-rules/
    folder and the run's policy names the copy, so the rebuild no longer depends on it."""
    shared = tmp_path / "shared"
    (shared / "other").mkdir(parents=True)
    rules = (FIXTURES / "gpu-observability-alerts.yml").read_text()
    (shared / "gpu.yml").write_text(rules)
    (shared / "other" / "gpu.yml").write_text(rules)  # same name, another file
    site = tmp_path / "site"
    site.mkdir()
    (site / "policy.yaml").write_text(
        "version: 1\n"
        "defaults:\n  monitoring: {alert_rules: ../shared/gpu.yml}\n"
        "groups:\n"
        f"  a100:\n    monitoring:\n      alert_rules: {shared / 'other' / 'gpu.yml'}\n"
    )
    policy = load_policy(site / "policy.yaml")
    run = tmp_path / "run"
    copied_path = policy.copy_to(run)
    assert sorted(p.name for p in (run / "alert-rules").iterdir()) == ["gpu-2.yml", "gpu.yml"]
    text = copied_path.read_text()
    assert 'alert_rules: "alert-rules/gpu.yml"' in text
    assert 'alert_rules: "alert-rules/gpu-2.yml"' in text
    assert str(shared) not in text
    # The originals may go: the run's copy still judges alert coverage the same.
    (before,) = [f for f in evaluate([make_host()], policy) if f.rule == "GA924"]
    (shared / "gpu.yml").unlink()
    (shared / "other" / "gpu.yml").unlink()
    copied = load_policy(copied_path)
    (after,) = [f for f in evaluate([make_host()], copied) if f.rule == "GA924"]
    assert after.evidence.actual == before.evidence.actual
    assert str(run / "alert-rules" / "gpu.yml") in after.message
