"""Snapshot building from bundles made of real captured sections (no collector, no GPU)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from gpuaudit.assemble import build
from gpuaudit.assemble.build import build_snapshot, failed_snapshot, unreachable_snapshot
from gpuaudit.model.snapshot import HostSnapshot, HostStatus, Section
from gpuaudit.parsers.bundle import Bundle

FIXTURES = Path(__file__).parent / "fixtures"
DRIVER_DOWN = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)
NVIDIA_TOOLS = (
    "nvidia-smi=1\nrocm-smi=0\namd-smi=0\ndmesg=1\njournalctl=1\nsystemctl=1\n"
    "dpkg-query=1\napt-mark=1\nrpm=0\nlspci=1\ntimeout=1\npython3=1\n"
)
NO_GPU_TOOLS = NVIDIA_TOOLS.replace("nvidia-smi=1", "nvidia-smi=0")
AMD_TOOLS = NO_GPU_TOOLS.replace("rocm-smi=0", "rocm-smi=1")
ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def fixture(path: str) -> str:
    return (FIXTURES / path).read_text(encoding="utf-8")


def ok(stdout: str, stderr: str = "") -> Section:
    return Section(rc=0, stdout=stdout, stderr=stderr)


def missing(tool: str) -> Section:
    return Section(rc=127, stderr=f"{tool}: command not found\n")


def base_sections(tools: str = NVIDIA_TOOLS) -> dict[str, Section]:
    return {
        "meta": ok(
            "hostname=gpu-a01\nkernel=5.15.0-119-generic\ndate=2024-11-15T12:00:00Z\nuid=0\n"
        ),
        "tools": ok(tools),
        "os_release": ok('PRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n'),
        "driver_proc": ok(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  "
            "Tue Jun  6 22:20:39 UTC 2023\n"
        ),
        "packages": ok("nvidia-driver-535\t535.54.03-0ubuntu1\tinstall ok installed\n"),
        "package_holds": ok("nvidia-driver-535\n"),
        "sysctl": ok("vm.swappiness = 10\n"),
        "services": ok("nvidia-persistenced\tactive\tenabled\n"),
        "device_nodes": ok("666 root root /dev/nvidia0\n666 root root /dev/nvidiactl\n"),
        "lspci": ok("0000:01:00.0 0302: 10de:20b2 (rev a1)\n"),
        "rocm_smi": missing("rocm-smi"),
    }


def nvidia_bundle(**overrides: Section) -> Bundle:
    # Captures from different machines: the A100 XML (GPU at 0000:01:00.0, MIG GIs 3-6), a
    # 4x GI listing, a topology matrix and a kernel log whose bus id is that GPU's. Only the
    # plumbing between sections is under test, not that they came from one host.
    sections = base_sections()
    sections.update(
        nvidia_smi_xml=ok(
            fixture("nvidia-smi-xml/telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml")
        ),
        nvidia_topo=ok(fixture("topo/utk-1x-h100-mig-vm-ansi-header.txt")),
        mig_gi=ok(fixture("mig/summerlo-a30-class-mig-lgi-4x-1g.6gb.txt")),
        mig_ci=ok("No compute instances found: Not Found\n"),
        kernel_log=ok(
            fixture("kernel-log/issue-bumblebee-554-legacy-gpu-fallen-off-bus-no-xid.log"),
            "source=dmesg lines=6 max=5000\n",
        ),
    )
    sections.update(overrides)
    return Bundle(sections=sections, complete=True)


def test_healthy_nvidia_host() -> None:
    snap = build_snapshot("gpu-a01", nvidia_bundle(), host_data={"expected_gpu_count": 4})
    assert snap.status is HostStatus.OK, snap.status_detail
    assert snap.parse_errors == {}
    assert "1 GPU(s)" in snap.status_detail and "535.54.03" in snap.status_detail
    assert (snap.driver_version, snap.cuda_version, snap.driver_version_proc) == (
        "535.54.03", "12.2", "535.54.03"
    )  # fmt: skip
    assert snap.attached_gpus == 4 and len(snap.gpus) == 1
    assert snap.gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert snap.os.hostname == "gpu-a01" and snap.os.pretty_name == "Ubuntu 22.04.4 LTS"
    assert snap.tools["nvidia-smi"] is True and snap.tools["rocm-smi"] is False
    assert snap.packages[0].held is True
    assert snap.services[0].running and snap.device_nodes[0].world_writable
    assert snap.sysctls == {"vm.swappiness": "10"}
    assert snap.pci_devices[0].bus_id == "0000:01:00.0"
    assert snap.host_data == {"expected_gpu_count": 4}
    assert ISO_Z.match(snap.collected_at)


def test_raw_sections_are_kept_verbatim() -> None:
    bundle = nvidia_bundle()
    snap = build_snapshot("gpu-a01", bundle)
    assert snap.sections == bundle.sections
    assert snap.sections["nvidia_smi_xml"].stdout.startswith("<?xml")


A100_UUID = "GPU-513536b6-7d19-9063-b049-1e69664bb298"  # the A100 XML's one GPU


def nvml_probe(index: int) -> Section:
    """The collector's NVML probe (gpuaudit's own JSON, collect/nvml_probe.py) on a host of
    four GPUs, naming the A100 XML's GPU (bus 0000:01:00.0) as NVML index ``index``."""
    gpu = {"index": index, "vendor": "nvidia", "pci_bus_id": "00000000:01:00.0", "uuid": A100_UUID}
    return ok(json.dumps({"probe": 1, "library": "pynvml", "device_count": 4, "gpus": [gpu]}))


def test_sections_feed_each_other() -> None:
    snap = build_snapshot("gpu-a01", nvidia_bundle(nvml=nvml_probe(0)))
    # XID events resolved to the GPU with the same bus id.
    assert [(e.kind, e.gpu_index) for e in snap.xid_events] == [("fallen_off_bus", 0)] * 2
    # MIG devices named after the GPU instance they sit in (the XML does not say).
    assert [d.profile for d in snap.gpus[0].mig_devices] == ["1g.6gb"] * 4
    assert [i.instance_id for i in snap.mig_gpu_instances] == [3, 4, 5, 6]
    assert snap.mig_compute_instances == ()
    assert snap.topology is not None and snap.topology.cpu_affinity == {"GPU0": "0-19"}


def test_a_report_without_every_attached_gpu_gives_no_index_to_match_mig_rows_by() -> None:
    # The A100 XML lists one <gpu> of attached_gpus 4 (a one-GPU report, or three GPUs left
    # out): its place in the report is not nvidia-smi's index, so -lgi's GPU 0 rows may be
    # another GPU's.
    snap = build_snapshot("gpu-a01", nvidia_bundle())
    assert snap.unnumbered_gpus == (0,) and snap.nvidia_smi_index(snap.gpus[0]) is None
    assert [d.profile for d in snap.gpus[0].mig_devices] == [None] * 4
    assert any(w.source == "GPU numbering" for w in snap.parse_warnings)
    # The rows are kept as listed all the same.
    assert [i.instance_id for i in snap.mig_gpu_instances] == [3, 4, 5, 6]


def test_the_nvml_probe_gives_the_index_and_mig_rows_follow_it() -> None:
    snap = build_snapshot("gpu-a01", nvidia_bundle(nvml=nvml_probe(1)))
    (gpu,) = snap.gpus
    assert (gpu.index, snap.unnumbered_gpus, snap.nvidia_smi_index(gpu)) == (1, (), 1)
    # -lgi lists GPU 0 only: not this GPU's instances.
    assert [d.profile for d in gpu.mig_devices] == [None] * 4
    assert [(e.kind, e.gpu_index) for e in snap.xid_events] == [("fallen_off_bus", 1)] * 2


def test_the_nvlink_listing_gives_the_index_by_uuid() -> None:
    # A real `nvidia-smi nvlink -s` (3x RTX A6000), its GPU 2 given the A100 XML's UUID: the
    # one change to the capture, so that the listing names the report's GPU.
    listing = fixture("nvlink/siboehm-3x-rtx-a6000-nvlink-s-gpu2-all-inactive.txt")
    header = next(line for line in listing.splitlines() if line.startswith("GPU 2:"))
    adapted = listing.replace(header, re.sub(r"GPU-[0-9a-f-]+", A100_UUID, header))
    snap = build_snapshot("gpu-a01", nvidia_bundle(nvlink_status=ok(adapted)))
    assert [g.index for g in snap.gpus] == [2] and snap.unnumbered_gpus == ()


def test_driver_not_responding() -> None:
    down = Section(rc=9, stdout=DRIVER_DOWN)
    bundle = nvidia_bundle(nvidia_smi_xml=down, nvidia_topo=down, mig_gi=down, mig_ci=down)
    snap = build_snapshot("gpu-a02", bundle)
    assert snap.status is HostStatus.DRIVER_NOT_RESPONDING
    assert "couldn't communicate with the NVIDIA driver" in snap.status_detail
    assert "exit status 9" in snap.status_detail and "\n" not in snap.status_detail
    assert snap.gpus == () and snap.topology is None
    assert snap.driver_version == "535.54.03"  # from /proc/driver/nvidia/version
    assert snap.cuda_version is None
    assert snap.parse_errors["nvidia_smi_xml"].startswith("exit status 9: NVIDIA-SMI has failed")
    assert "nvidia_topo" in snap.parse_errors


def test_nonzero_exit_without_message_is_also_driver_not_responding() -> None:
    bundle = nvidia_bundle(nvidia_smi_xml=Section(rc=124, stdout="", stderr=""))
    snap = build_snapshot("gpu-a02", bundle)
    assert snap.status is HostStatus.DRIVER_NOT_RESPONDING
    assert "exit status 124" in snap.status_detail


def test_missing_nvidia_smi_is_no_gpu_tooling() -> None:
    sections = base_sections(NO_GPU_TOOLS)
    sections.update(
        nvidia_smi_xml=missing("nvidia-smi"),
        nvidia_topo=missing("nvidia-smi"),
        mig_gi=missing("nvidia-smi"),
        mig_ci=missing("nvidia-smi"),
        lspci=ok("0000:3b:00.0 0302: 10de:2330 (rev a1)\n0000:86:00.0 0302: 10de:2330 (rev a1)\n"),
    )
    snap = build_snapshot("cpu-01", Bundle(sections=sections, complete=True))
    assert snap.status is HostStatus.NO_GPU_TOOLING
    assert "neither nvidia-smi nor rocm-smi" in snap.status_detail
    assert "lspci lists 2 GPU" in snap.status_detail
    assert "nvidia_smi_xml" not in snap.parse_errors  # a missing tool is not a parse error
    assert snap.tools["nvidia-smi"] is False


def test_incomplete_bundle_without_xml_is_collection_failed() -> None:
    sections = {k: v for k, v in base_sections().items() if k in ("meta", "tools", "os_release")}
    bundle = Bundle(
        sections, complete=False, problems=("output ends inside section 'nvidia_smi_xml'",)
    )
    snap = build_snapshot("gpu-a03", bundle)
    assert snap.status is HostStatus.COLLECTION_FAILED
    assert "cut short" in snap.status_detail and "nvidia_smi_xml" in snap.status_detail
    assert snap.os.hostname == "gpu-a01"  # what did arrive is still parsed
    assert snap.parse_errors["bundle"].startswith("output ends inside")


def test_incomplete_bundle_after_xml_is_degraded() -> None:
    bundle = nvidia_bundle()
    cut = {k: v for k, v in bundle.sections.items() if k not in ("services", "device_nodes")}
    snap = build_snapshot("gpu-a03", Bundle(cut, complete=False, problems=("no done marker",)))
    assert snap.status is HostStatus.DEGRADED
    assert "cut short" in snap.status_detail
    assert len(snap.gpus) == 1


def test_empty_bundle() -> None:
    snap = build_snapshot("gpu-a04", Bundle({}, complete=False, problems=("no gpuaudit header",)))
    assert snap.status is HostStatus.COLLECTION_FAILED
    assert "no sections" in snap.status_detail and "no gpuaudit header" in snap.status_detail


def test_entity_declarations_are_recorded_not_raised() -> None:
    xml = fixture("nvidia-smi-xml/telegraf-gtx1070ti-minimal.xml").replace(
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v10.dtd">',
        '<!DOCTYPE nvidia_smi_log [<!ENTITY a "x"><!ENTITY b "&a;&a;&a;&a;">]>',
    )
    snap = build_snapshot("gpu-a05", nvidia_bundle(nvidia_smi_xml=ok(xml)))
    assert "unsafe" in snap.parse_errors["nvidia_smi_xml"]
    assert snap.status is HostStatus.DEGRADED and snap.gpus == ()
    assert "unreadable" in snap.status_detail


def test_truncated_xml_is_recorded() -> None:
    text = fixture("nvidia-smi-xml/telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml")
    snap = build_snapshot("gpu-a06", nvidia_bundle(nvidia_smi_xml=ok(text[:5000])))
    assert snap.status is HostStatus.DEGRADED
    assert "truncated" in snap.parse_errors["nvidia_smi_xml"]
    # Killed by timeout half way: nothing usable, so the driver is what did not answer.
    killed = build_snapshot("gpu-a06", nvidia_bundle(nvidia_smi_xml=Section(124, text[:5000])))
    assert killed.status is HostStatus.DRIVER_NOT_RESPONDING
    assert "truncated" in killed.parse_errors["nvidia_smi_xml"]


def test_publisher_truncated_capture_falls_back_to_proc_driver_version() -> None:
    xml = fixture("nvidia-smi-xml/telegraf-gtx1070ti-minimal.xml")
    snap = build_snapshot("gpu-a07", nvidia_bundle(nvidia_smi_xml=ok(xml)))
    assert snap.status is HostStatus.OK
    assert snap.driver_version == "535.54.03" and snap.attached_gpus is None
    assert snap.gpus[0].name == "GeForce GTX 1070 Ti"


def test_gpu_with_unknown_error_degrades_host() -> None:
    xml = fixture("nvidia-smi-xml/telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml").replace(
        "<uuid>GPU-513536b6-7d19-9063-b049-1e69664bb298</uuid>", "<uuid>Unknown Error</uuid>"
    )
    snap = build_snapshot("gpu-a08", nvidia_bundle(nvidia_smi_xml=ok(xml)))
    assert snap.status is HostStatus.DEGRADED
    assert snap.status_detail.startswith("GPU 0: nvidia-smi reported 'Unknown Error' for uuid")


def test_nonzero_exit_with_usable_xml_is_degraded() -> None:
    xml = fixture("nvidia-smi-xml/telegraf-2x-rtx2070-driver590-v13.xml")
    stderr = "Unable to determine the device handle for GPU0000:03:00.0: Unknown Error\n"
    snap = build_snapshot("gpu-a09", nvidia_bundle(nvidia_smi_xml=Section(15, xml, stderr)))
    assert snap.status is HostStatus.DEGRADED
    assert "exited with status 15" in snap.status_detail and "GPU0000:03:00.0" in snap.status_detail
    assert len(snap.gpus) == 2


def test_unreadable_kernel_log_is_recorded_but_not_degrading() -> None:
    klog = Section(rc=127, stderr="no readable kernel log (dmesg, journalctl -k)\n")
    snap = build_snapshot("gpu-a10", nvidia_bundle(kernel_log=klog))
    assert snap.parse_errors["kernel_log"] == "no readable kernel log (dmesg, journalctl -k)"
    assert snap.status is HostStatus.OK and snap.xid_events == ()


def test_mig_listing_failure_degrades_only_when_mig_is_enabled() -> None:
    odd = Section(rc=6, stdout="Some message this parser has never seen\n")
    mig_host = build_snapshot("gpu-a13", nvidia_bundle(mig_gi=odd))
    assert mig_host.status is HostStatus.DEGRADED
    assert mig_host.parse_errors["mig_gi"].startswith("exit status 6: Some message")
    t4 = ok(fixture("nvidia-smi-xml/telegraf-tesla-t4-driver515.xml"))
    plain = build_snapshot("gpu-a14", nvidia_bundle(nvidia_smi_xml=t4, mig_gi=odd))
    assert plain.status is HostStatus.OK and "mig_gi" in plain.parse_errors


def test_unreadable_topology_degrades() -> None:
    snap = build_snapshot("gpu-a15", nvidia_bundle(nvidia_topo=ok("garbage\n")))
    assert snap.status is HostStatus.DEGRADED and snap.topology is None
    assert snap.status_detail.startswith("nvidia_topo: cannot parse nvidia-smi topo -m")


def test_truncated_kernel_log_flag() -> None:
    klog = Section(rc=0, stdout="", stderr="source=dmesg lines=9000 max=5000\n", truncated=True)
    assert build_snapshot("gpu-a11", nvidia_bundle(kernel_log=klog)).kernel_log_truncated


def test_amd_host() -> None:
    sections = base_sections(AMD_TOOLS)
    sections.update(
        nvidia_smi_xml=missing("nvidia-smi"),
        rocm_smi=ok(fixture("rocm-smi/telegraf-mi100-rocm5.7.1.json")),
        lspci=ok("0000:1e:00.0 0380: 1002:738c (rev 01)\n"),
    )
    snap = build_snapshot("mi100-01", Bundle(sections=sections, complete=True))
    assert snap.status is HostStatus.OK, snap.status_detail
    assert len(snap.gpus) == 6 and {g.vendor for g in snap.gpus} == {"amd"}


def test_amd_host_with_only_amd_smi() -> None:
    # Newer ROCm: amd-smi without rocm-smi. The section holds static then metric JSON.
    sections = base_sections(NO_GPU_TOOLS.replace("amd-smi=0", "amd-smi=1"))
    sections.update(
        nvidia_smi_xml=missing("nvidia-smi"),
        amd_smi=ok(
            fixture("amd-smi/luckylinux-rx6600-amd-smi-static.json")
            + fixture("amd-smi/luckylinux-rx6600-amd-smi-metric.json")
        ),
        lspci=ok("0000:0b:00.0 0300: 1002:73ff (rev c7)\n"),
    )
    snap = build_snapshot("rx6600-01", Bundle(sections=sections, complete=True))
    assert snap.status is HostStatus.OK, snap.status_detail
    assert snap.tools["amd-smi"] is True and snap.tools["rocm-smi"] is False
    (gpu,) = snap.gpus
    assert gpu.vendor == "amd" and gpu.pci_bus_id == "0000:0B:00.0"
    assert gpu.power_draw_w == 6.0 and gpu.pcie_width_current == 8


def test_amd_smi_failing_alone_degrades_and_fills_rocm_smi_gaps() -> None:
    sections = base_sections(AMD_TOOLS.replace("amd-smi=0", "amd-smi=1"))
    sections.update(nvidia_smi_xml=missing("nvidia-smi"), amd_smi=Section(rc=1, stderr="boom\n"))
    snap = build_snapshot("amd-02", Bundle(sections=sections, complete=True))
    assert snap.status is HostStatus.DEGRADED and "amd-smi failed" in snap.status_detail
    # Both tools: rocm-smi stays primary; amd-smi only fills GPUs with the same bus id, and
    # these two captures come from different cards, so it adds nothing.
    sections.update(
        rocm_smi=ok(fixture("rocm-smi/telegraf-rx6700xt-rocm6.1.2.json")),
        amd_smi=ok(fixture("amd-smi/luckylinux-rx6600-amd-smi-static.json")),
    )
    snap = build_snapshot("amd-02", Bundle(sections=sections, complete=True))
    assert snap.status is HostStatus.OK, snap.status_detail
    (gpu,) = snap.gpus
    assert gpu.pci_bus_id != "0000:0B:00.0" and gpu.pcie_width_max is None


def test_stray_nvidia_smi_on_amd_host_is_not_a_driver_failure() -> None:
    sections = base_sections(NVIDIA_TOOLS.replace("rocm-smi=0", "rocm-smi=1"))
    sections.update(
        nvidia_smi_xml=Section(rc=9, stdout=DRIVER_DOWN),
        rocm_smi=ok(fixture("rocm-smi/telegraf-rx6700xt-rocm6.1.2.json")),
        lspci=ok("0000:07:00.0 0300: 1002:73df (rev c1)\n"),
    )
    snap = build_snapshot("ws-01", Bundle(sections=sections, complete=True))
    assert snap.status is HostStatus.OK, snap.status_detail
    assert snap.gpus[0].vendor == "amd"


def test_parser_bug_costs_one_section(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str) -> dict[str, str]:
        raise IndexError("boom")

    monkeypatch.setattr(build, "parse_sysctl", broken)
    snap = build_snapshot("gpu-a12", nvidia_bundle())
    assert snap.parse_errors["sysctl"] == "parser failed: IndexError: boom"
    assert snap.sysctls == {} and snap.status is HostStatus.OK


def test_garbage_in_every_section_never_raises() -> None:
    rng = random.Random(7)
    for _ in range(30):
        sections = {
            name: Section(
                rc=rng.choice([0, 1, 9, 127, None]),
                stdout="".join(chr(rng.randrange(0, 0x2FF)) for _ in range(rng.randrange(0, 300))),
                stderr=rng.choice(["", "\x00\x01", DRIVER_DOWN]),
            )
            for name in nvidia_bundle().sections
        }
        snap = build_snapshot("fuzz", Bundle(sections, complete=rng.random() < 0.5))
        assert isinstance(snap.status, HostStatus)
        assert HostSnapshot.from_json(snap.to_json()) == snap


@pytest.mark.parametrize(
    "bundle",
    [
        nvidia_bundle(),
        nvidia_bundle(nvidia_smi_xml=Section(rc=9, stdout=DRIVER_DOWN)),
        nvidia_bundle(
            nvidia_topo=ok(fixture("topo/stelline-puget-wrx90-2gpu-phb-2nic.txt")),
            kernel_log=ok(fixture("kernel-log/gpud-xid48-dbe-xid63-rowremap-xid94-contained.log")),
        ),
    ],
    ids=["healthy", "driver-down", "nics-and-xids"],
)
def test_json_round_trip(bundle: Bundle) -> None:
    snap = build_snapshot(
        "gpu-a01", bundle, host_data={"groups": ["a100"], "expected_gpu_count": 4}
    )
    again = HostSnapshot.from_json(snap.to_json())
    assert again == snap


def test_unreachable_and_failed_snapshots() -> None:
    snap = unreachable_snapshot("gpu-z9", "ssh: connect to host gpu-z9 port 22:\nNo route to host")
    assert snap.status is HostStatus.UNREACHABLE
    assert snap.status_detail == "ssh: connect to host gpu-z9 port 22: No route to host"
    assert ISO_Z.match(snap.collected_at) and snap.gpus == ()
    assert HostSnapshot.from_json(snap.to_json()) == snap

    failed = failed_snapshot("gpu-z8", "garbled output", collected_at="2024-11-15T12:00:00Z")
    assert failed.status is HostStatus.COLLECTION_FAILED
    assert failed.collected_at == "2024-11-15T12:00:00Z"


@pytest.mark.parametrize(
    ("section", "tools", "capture", "vendor"),
    [
        (
            "nvidia_smi_xml",
            NVIDIA_TOOLS,
            "iluvatar-ixsmi-16x-bi-v150-driver4.3.0.txt",
            "Iluvatar",
        ),
        ("rocm_smi", AMD_TOOLS, "hygon-rocm-smi-json-dcu-dtk24.04.3.json", "Hygon"),
        ("rocm_smi", AMD_TOOLS, "hygon-rocm-smi-8x-dcu-300w.txt", "Hygon"),
    ],
)
def test_another_vendors_tool_in_place_of_nvidia_smi_or_rocm_smi_lists_no_gpus(
    section: str, tools: str, capture: str, vendor: str
) -> None:
    # A real look-alike's output where nvidia-smi's XML or rocm-smi's output belongs (the tool
    # installed under that name): its devices are neither NVIDIA's nor AMD's.
    sections = base_sections(tools)
    sections.update(
        nvidia_smi_xml=missing("nvidia-smi"),
        nvidia_topo=missing("nvidia-smi"),
        lspci=ok(""),
    )
    sections[section] = ok(fixture(f"lookalike/{capture}"))
    snap = build_snapshot("accel-01", Bundle(sections=sections, complete=True))
    assert snap.gpus == ()
    assert not any(g.vendor in ("nvidia", "amd") for g in snap.gpus)
    said = snap.parse_errors[f"{section}_lookalike"]
    assert vendor in said and "not audited" in said
    assert section not in snap.parse_errors  # not an unreadable output: another vendor's
    assert snap.status is HostStatus.NO_GPU_TOOLING
    assert snap.status_detail.startswith("the GPU tools are another vendor's:")
    assert vendor in snap.status_detail
