"""The real collector script against every demo host: what an audit would read."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from simhelpers import collect, run_on

from gpuaudit.parsers.bundle import Bundle
from gpuaudit.sim.host import SimHost, materialize
from gpuaudit.sim.nvidia_smi import DRIVER_NOT_LOADED
from gpuaudit.sim.profiles import DEMO_FLEET, PROFILES, expected_gpu_count

REACHABLE = [name for name in DEMO_FLEET if "unreachable" not in PROFILES[name].get("faults", {})]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Bundle]:
    """Each demo host collected once (the collector makes ~30 tool calls per host)."""
    base = tmp_path_factory.mktemp("fleet")
    return {name: collect(materialize(name, name, base)) for name in REACHABLE}


def _xml(bundle: Bundle) -> ET.Element:
    return ET.fromstring(bundle.sections["nvidia_smi_xml"].stdout)


@pytest.mark.parametrize("name", REACHABLE)
def test_bundle_is_complete(bundles: dict[str, Bundle], name: str) -> None:
    bundle = bundles[name]
    assert bundle.complete, bundle.problems
    assert bundle.problems == ()
    assert f"hostname={name}" in bundle.sections["meta"].stdout
    assert "ID=ubuntu" in bundle.sections["os_release"].stdout


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in REACHABLE
        if PROFILES[n].get("vendor", "nvidia") == "nvidia" and not PROFILES[n].get("faults")
    ],
)
def test_xml_shows_the_hosts_gpus_and_driver(bundles: dict[str, Bundle], name: str) -> None:
    profile = PROFILES[name]
    section = bundles[name].sections["nvidia_smi_xml"]
    root = _xml(bundles[name])
    lost = sum(1 for gpu in profile.get("gpus", {}).values() if gpu.get("lost"))
    assert section.rc == (15 if lost else 0)
    assert root.findtext("driver_version") == profile["driver"]
    assert root.findtext("attached_gpus") == str(expected_gpu_count(profile))
    gpus = root.findall("gpu")
    assert len(gpus) == expected_gpu_count(profile) - lost
    assert {gpu.findtext("product_name") for gpu in gpus} == {profile["gpu_model"]}
    bus_ids = [gpu.get("id") for gpu in gpus]
    assert len(set(bus_ids)) == len(bus_ids)
    assert len({gpu.findtext("uuid") for gpu in gpus}) == len(gpus)
    proc = bundles[name].sections["driver_proc"].stdout
    assert f"Kernel Module  {profile['driver']}" in proc


def test_a100_topology_is_an_nvswitch_matrix(bundles: dict[str, Bundle]) -> None:
    topo = bundles["a100-hgx-01"].sections["nvidia_topo"]
    assert topo.rc == 0
    assert "NV12" in topo.stdout and "NV18" not in topo.stdout
    assert bundles["a100-hgx-01"].sections["lspci"].stdout.count("10de:1af1") == 6


def test_driver_not_loaded_gives_rc_9_and_the_real_message(bundles: dict[str, Bundle]) -> None:
    bundle = bundles["v100-02"]
    for name in ("nvidia_smi_xml", "nvidia_topo", "mig_gi", "mig_ci"):
        assert bundle.sections[name].rc == 9
        assert bundle.sections[name].stdout.strip() == DRIVER_NOT_LOADED
    assert bundle.sections["driver_proc"].rc != 0
    assert bundle.sections["device_nodes"].stdout == ""
    # The GPUs are still on the PCI bus, only the driver is missing.
    assert bundle.sections["lspci"].stdout.count("10de:") == 2
    assert "nvidia-persistenced\tfailed\tenabled" in bundle.sections["services"].stdout


def test_xid_79_host_logs_the_xid_on_the_lost_gpus_bus_id(bundles: dict[str, Bundle]) -> None:
    bundle = bundles["a100-hgx-05"]
    log = bundle.sections["kernel_log"].stdout
    assert (
        "NVRM: Xid (PCI:0000:90:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus." in log
    )
    xml_section = bundle.sections["nvidia_smi_xml"]
    assert xml_section.rc == 15
    assert "Unable to determine the device handle for GPU0000:90:00.0" in xml_section.stderr
    assert "00000000:90:00.0" not in xml_section.stdout
    assert "0000:90:00.0 0302: 10de:20b2 (rev ff)" in bundle.sections["lspci"].stdout


def test_row_remap_pending_host(bundles: dict[str, Bundle]) -> None:
    bundle = bundles["a100-hgx-02"]
    gpu3 = _xml(bundle).findall("gpu")[3]
    assert gpu3.findtext("remapped_rows/remapped_row_pending") == "Yes"
    assert gpu3.findtext("ecc_errors/aggregate/dram_correctable") == "177"
    assert _xml(bundle).findall("gpu")[0].findtext("remapped_rows/remapped_row_pending") == "No"
    assert (
        "NVRM: Xid (PCI:0000:4e:00): 63, pid=1896, Row Remapper"
        in bundle.sections["kernel_log"].stdout
    )


def test_missing_nvidia_smi_gives_rc_127(bundles: dict[str, Bundle]) -> None:
    bundle = bundles["t4-03"]
    assert "nvidia-smi=0" in bundle.sections["tools"].stdout
    for name in ("nvidia_smi_xml", "nvidia_topo", "mig_gi", "mig_ci"):
        assert bundle.sections[name].rc == 127
    assert bundle.sections["driver_proc"].rc == 0


def test_amd_host_answers_rocm_smi_only(bundles: dict[str, Bundle]) -> None:
    bundle = bundles["mi100-01"]
    assert bundle.sections["nvidia_smi_xml"].rc == 127
    assert bundle.sections["rocm_smi"].rc == 0
    assert '"card5"' in bundle.sections["rocm_smi"].stdout
    assert bundle.sections["lspci"].stdout.count("1002:738c") == 6


def test_mig_host_lists_instances_and_pending_mode(bundles: dict[str, Bundle]) -> None:
    bundle = bundles["a100-hgx-04"]
    assert bundle.sections["mig_gi"].rc == 0
    assert bundle.sections["mig_gi"].stdout.count("MIG 1g.20gb") == 7 * 4
    assert bundle.sections["mig_ci"].stdout.count("MIG 1g.20gb") == 7 * 4
    gpus = _xml(bundle).findall("gpu")
    assert len(gpus[0].findall("mig_devices/mig_device")) == 4
    assert gpus[7].findtext("mig_mode/current_mig") == "Disabled"
    assert gpus[7].findtext("mig_mode/pending_mig") == "Enabled"
    assert (
        bundles["a100-hgx-01"].sections["mig_gi"].stdout.strip() == "No MIG-enabled devices found."
    )


def test_healthy_and_faulty_system_settings(bundles: dict[str, Bundle]) -> None:
    healthy = bundles["t4-01"]
    assert "net.core.rmem_max = 134217728" in healthy.sections["sysctl"].stdout
    assert "nvidia-persistenced\tactive\tenabled" in healthy.sections["services"].stdout
    assert "660 root video" in healthy.sections["device_nodes"].stdout
    assert "nvidia-driver-515" in healthy.sections["package_holds"].stdout
    assert "net.core.rmem_max = 212992" in bundles["t4-02"].sections["sysctl"].stdout
    assert "persistence_mode>Disabled<" in bundles["t4-02"].sections["nvidia_smi_xml"].stdout
    assert "666 root video" in bundles["p100-01"].sections["device_nodes"].stdout
    assert bundles["p100-01"].sections["package_holds"].stdout == ""
    services = bundles["a100-hgx-03"].sections["services"].stdout
    assert "nvidia-fabricmanager\tinactive\tnot-found" in services


def test_link_and_throttle_faults(bundles: dict[str, Bundle]) -> None:
    rtx = _xml(bundles["rtx3090-01"]).findall("gpu")
    assert rtx[0].findtext("pci/pci_gpu_link_info/link_widths/current_link_width") == "16x"
    assert rtx[1].findtext("pci/pci_gpu_link_info/link_widths/current_link_width") == "8x"
    assert rtx[1].findtext("utilization/gpu_util") == "100 %"
    ada = _xml(bundles["rtx4000ada-01"]).find("gpu")
    assert ada is not None
    assert ada.findtext("clocks_event_reasons/clocks_event_reason_hw_slowdown") == "Active"


def test_xid_storm_fills_the_kernel_log(bundles: dict[str, Bundle]) -> None:
    log = bundles["a10g-01"].sections["kernel_log"].stdout
    assert log.count("NVRM: Xid (PCI:0000:00:1e): 13,") > 500
    assert "0000:38:00" not in log


def test_hang_is_cut_by_the_collectors_timeout(make_host: Callable[..., SimHost]) -> None:
    bundle = collect(make_host("t4-hang"), GPUAUDIT_TIMEOUT="1")
    assert bundle.complete
    assert bundle.sections["nvidia_smi_xml"].rc == 124
    assert bundle.sections["driver_proc"].rc == 0


def test_truncated_xml_does_not_parse(make_host: Callable[..., SimHost]) -> None:
    section = collect(make_host("a10g-truncated")).sections["nvidia_smi_xml"]
    assert section.rc == 0
    assert section.stdout.startswith("<?xml")
    with pytest.raises(ET.ParseError):
        ET.fromstring(section.stdout)


def test_dmesg_restricted_falls_back_to_journalctl(make_host: Callable[..., SimHost]) -> None:
    from gpuaudit.sim.profiles import get_profile

    profile = get_profile("a100-hgx-05")
    profile["faults"] = {"dmesg_restricted": {}}
    section = collect(make_host("restricted", profile)).sections["kernel_log"]
    assert "source=journalctl" in section.stderr
    assert "restricted kernel: NVRM: Xid (PCI:0000:90:00): 79," in section.stdout


def test_a_journal_the_audit_user_cannot_read_is_an_unreadable_kernel_log(
    make_host: Callable[..., SimHost],
) -> None:
    """dmesg refused and journalctl answering "-- No entries --" with exit 0: the XID 79 this
    host logged is not read, and GA105 says the log could not be, where GA301 alone would have
    read a clean log."""
    from gpuaudit.assemble.build import build_snapshot
    from gpuaudit.rules import evaluate
    from gpuaudit.sim.profiles import get_profile

    profile = get_profile("a100-hgx-05")
    profile["faults"] = {"dmesg_restricted": {}, "journal_unreadable": {}}
    snap = build_snapshot("locked", collect(make_host("locked", profile)))
    section = snap.sections["kernel_log"]
    assert section.rc == 1 and section.stdout == ""
    assert "journalctl -k -b has no kernel message of the running boot" in section.stderr
    assert "Users in groups" not in section.stderr  # the hint's first line only
    assert "You are currently not seeing messages" in section.stderr
    codes = {f.rule for f in evaluate([snap])}
    assert "GA105" in codes


def test_wrapped_ring_buffer_marks_the_kernel_log_incomplete(
    make_host: Callable[..., SimHost],
) -> None:
    """dmesg no longer starts at boot: the XIDs are still read, and their finding says that
    older ones may be lost."""
    from gpuaudit.assemble.build import build_snapshot
    from gpuaudit.rules import evaluate
    from gpuaudit.sim.profiles import get_profile

    profile = get_profile("a100-hgx-05")
    whole = build_snapshot("whole", collect(make_host("whole", profile)))
    assert not whole.kernel_log_truncated
    profile["faults"] = {"ring_wrapped": {}}
    snap = build_snapshot("wrapped", collect(make_host("wrapped", profile)))
    assert snap.kernel_log_truncated
    assert 79 in {event.code for event in snap.xid_events}
    findings = evaluate([snap])
    # Incomplete evidence, not a collection problem: long-running healthy hosts wrap too.
    assert not [f for f in findings if f.rule == "GA002"]
    (xid79,) = [f for f in findings if f.rule == "GA301" and "79" in f.message]
    assert "The kernel ring buffer had wrapped" in xid79.message


def test_packages_section_lists_driver_packages(bundles: dict[str, Bundle], tmp_path: Path) -> None:
    # Unheld packages read "install ok installed"; held ones "hold ok installed" (dpkg's own
    # status words), which is what the collector's filter has to accept.
    assert "nvidia-driver-510\t510.47.03-0ubuntu1\tinstall ok installed" in (
        bundles["p100-01"].sections["packages"].stdout
    )


def test_collector_without_its_comment_lines_collects_the_same(
    make_host: Callable[..., SimHost],
) -> None:
    """The text sent to every host leaves the comment lines out; what it gathers is what the
    commented script gathers, section by section (the time of the run aside)."""
    from gpuaudit.collect import collector_script, without_comment_lines
    from gpuaudit.parsers.bundle import parse_bundle_text
    from gpuaudit.sim.profiles import get_profile

    host = make_host("plain", get_profile("a100-hgx-05"))
    commented = collector_script("t2sim")
    sent = collector_script("t2sim", comments=False)
    assert sent == without_comment_lines(commented)
    assert len(sent) < 0.85 * len(commented)
    assert "GA_NVML_PROBE_END" in sent and "#" in sent.split("GA_NVML_PROBE_END")[1]
    bundles = [parse_bundle_text(run_on(host, "sh", "-c", t).stdout) for t in (commented, sent)]
    # The time of the run aside: the meta section and nvidia-smi's <timestamp>.
    first, second = (
        {n: re.sub(r"<timestamp>.*</timestamp>", "", s.stdout) + s.stderr + str(s.rc)
         for n, s in b.sections.items() if n != "meta"}
        for b in bundles
    )  # fmt: skip
    assert first == second
    assert "NVRM: Xid" in first["kernel_log"] and "<nvidia_smi_log>" in first["nvidia_smi_xml"]


def test_xids_of_the_boot_before_a_reboot_are_read_from_the_journal(
    make_host: Callable[..., SimHost],
) -> None:
    """A GPU fell off the bus and the host was rebooted to bring it back: this boot's log is
    clean, and the XID is read from the journal's previous boot (GA313), one step milder."""
    from gpuaudit.assemble.build import build_snapshot
    from gpuaudit.rules import evaluate
    from gpuaudit.sim.profiles import get_profile

    host = make_host("rebooted", get_profile("a100-hgx-05"))
    before = build_snapshot("rebooted", collect(host))
    assert 79 in {e.code for e in before.xid_events}
    assert before.previous_boot_xid_events == ()
    assert before.sections["kernel_log_previous"].rc == 0
    assert not [f for f in evaluate([before]) if f.rule == "GA313"]

    done = run_on(host, "reboot")
    assert done.returncode == 0, done.stderr
    bundle = collect(host)
    section = bundle.sections["kernel_log_previous"]
    # The profile's host had a boot before the first audit (its log without XIDs): now -2.
    assert "source=journalctl boots=2 lines=" in section.stderr
    assert "rebooted kernel: NVRM: Xid (PCI:0000:90:00): 79," in section.stdout
    snap = build_snapshot("rebooted", bundle)
    assert not [e for e in snap.xid_events if e.kind == "xid"]
    assert {(e.code, e.gpu_index) for e in snap.previous_boot_xid_events} >= {(79, 5)}
    findings = [f for f in evaluate([snap]) if f.rule == "GA313"]
    assert [(f.gpu, f.severity.value) for f in findings] == [(5, "high")]
    assert "in the boot before this one" in findings[0].message
    assert "rebooted since" in findings[0].message
    assert not [f for f in evaluate([snap]) if f.rule in ("GA301", "GA002")]


def test_an_xid_two_reboots_ago_is_still_read_from_the_journal(
    make_host: Callable[..., SimHost],
) -> None:
    """Rebooted twice since the GPU fell off the bus: neither this boot's log nor the boot
    before it shows the XID; the journal's boot -2 does, and GA313 says so."""
    from gpuaudit.assemble.build import build_snapshot
    from gpuaudit.rules import evaluate
    from gpuaudit.sim.profiles import get_profile

    host = make_host("twice", get_profile("a100-hgx-05"))
    for _ in range(2):
        done = run_on(host, "reboot")
        assert done.returncode == 0, done.stderr
    snap = build_snapshot("twice", collect(host))
    section = snap.sections["kernel_log_previous"]
    assert "source=journalctl boots=3 lines=" in section.stderr
    assert section.stdout.index("-- boot -2 --") < section.stdout.index("Xid (PCI:0000:90:00): 79")
    assert section.stdout.index("Xid (PCI:0000:90:00): 79") < section.stdout.index("-- boot -1 --")
    assert not [e for e in snap.xid_events if e.kind == "xid"]
    assert {(e.code, e.gpu_index, e.boot) for e in snap.previous_boot_xid_events} >= {(79, 5, -2)}
    findings = [f for f in evaluate([snap]) if f.rule == "GA313"]
    assert [(f.gpu, f.severity.value) for f in findings] == [(5, "high")]
    assert "in an earlier boot, 2 reboots ago" in findings[0].message
    assert findings[0].evidence.actual["boots"] == [-2]
    # The host's page lists it too, with its boot.
    from gpuaudit.report.views import host_view

    xid = host_view(snap, "twice", (), ())["xid"]
    assert xid["earlier"] == len(snap.previous_boot_xid_events)
    assert ("XID 79", "GPU 5", "2 reboots ago") in {
        (i["what"], i["gpu"], i["boot"]) for i in xid["incidents"]
    }


def test_a_journal_without_earlier_boots_leaves_ga313_unjudged(
    make_host: Callable[..., SimHost],
) -> None:
    from gpuaudit.assemble.build import build_snapshot
    from gpuaudit.rules import assess
    from gpuaudit.sim.profiles import get_profile

    profile = get_profile("a100-hgx-05")
    profile["faults"] = {"journal_volatile": {}}
    host = make_host("volatile", profile)
    assert run_on(host, "reboot").returncode == 0
    snap = build_snapshot("volatile", collect(host))
    section = snap.sections["kernel_log_previous"]
    assert section.rc == 1
    assert "No such boot ID in journal" in section.stderr
    assert snap.previous_boot_xid_events == ()
    evaluation = assess([snap])
    assert not [f for f in evaluation.findings if f.rule in ("GA313", "GA002")]
    (outcome,) = [o for o in evaluation.outcomes if o.rule == "GA313"]
    assert outcome.outcome.value == "not_evaluated", outcome
    assert "No such boot ID in journal" in outcome.reason
