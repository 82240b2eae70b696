from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpuaudit.parsers import nvidia_xml
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvidia_xml import parse_float, parse_int, parse_nvidia_smi_xml
from gpuaudit.parsers.warnings import collecting

FIXTURES = Path(__file__).parents[1] / "fixtures"
XML = FIXTURES / "nvidia-smi-xml"
ALL_XML = sorted(XML.glob("*.xml"))


def read(name: str) -> str:
    return (XML / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("path", ALL_XML, ids=lambda p: p.name)
def test_every_capture_parses(path: Path) -> None:
    log = parse_nvidia_smi_xml(path.read_text(encoding="utf-8"))
    assert log.gpus, "every capture holds at least one <gpu>"
    for index, gpu in enumerate(log.gpus):
        assert gpu.index == index
        assert gpu.vendor == "nvidia"
        assert gpu.status == "ok"
        assert gpu.name
        assert gpu.pci_bus_id and len(gpu.pci_bus_id) == len("0000:00:00.0")
        assert gpu.memory_total_mib and gpu.memory_total_mib > 0


def test_fixture_set_covers_both_dtd_generations() -> None:
    texts = [p.read_text(encoding="utf-8") for p in ALL_XML]
    assert any("nvsmi_device_v12.dtd" in t for t in texts)
    assert any("nvsmi_device_v13.dtd" in t for t in texts)


def test_a100_mig_enabled_driver535() -> None:
    log = parse_nvidia_smi_xml(read("telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml"))
    assert (log.driver_version, log.cuda_version) == ("535.54.03", "12.2")
    assert log.timestamp == "Fri Aug  4 11:44:30 2023"
    # The publisher kept one <gpu> of a 4-GPU host: the gap must stay visible.
    assert log.attached_gpus == 4 and len(log.gpus) == 1
    gpu = log.gpus[0]
    assert gpu.name == "NVIDIA A100-SXM4-80GB"
    assert gpu.architecture == "Ampere"
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.serial == "1650522003820"
    assert gpu.pci_bus_id == "0000:01:00.0"
    assert gpu.vbios_version == "92.00.36.00.02"
    assert gpu.inforom_image == "G506.0212.00.01"
    assert (gpu.mig_mode_current, gpu.mig_mode_pending) == ("Enabled", "Enabled")
    assert [d.gpu_instance_id for d in gpu.mig_devices] == [3, 4, 5, 6]
    assert {d.memory_total_mib for d in gpu.mig_devices} == {19968}
    assert {d.multiprocessor_count for d in gpu.mig_devices} == {14}
    assert gpu.persistence_mode is False
    assert gpu.memory_total_mib == 81920 and gpu.memory_used_mib == 50
    assert gpu.power_draw_w == pytest.approx(67.03)
    assert gpu.power_limit_w == pytest.approx(500.0)
    assert gpu.temperature_c == 27.0 and gpu.temperature_slowdown_c == 89.0
    assert gpu.utilization_gpu_pct is None  # "N/A" under MIG
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (4, 4)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
    assert gpu.ecc_mode_current == "Enabled"
    assert gpu.ecc_aggregate.corrected == 0 and gpu.ecc_aggregate.dram_uncorrected == 0
    assert gpu.remapped_rows.pending is None  # <remapped_rows>N/A</remapped_rows>
    assert (gpu.reset_required, gpu.drain_and_reset_recommended) == (False, False)
    assert gpu.clock_event_reasons == ()


def test_old_ecc_schema_sums_single_and_double_bit_totals() -> None:
    gpu = parse_nvidia_smi_xml(read("netdata-tesla-p100-pcie-16gb-driver510.xml")).gpus[0]
    assert gpu.name == "Tesla P100-PCIE-16GB"
    assert gpu.ecc_aggregate.corrected == 3
    assert gpu.ecc_aggregate.uncorrected == 0
    assert gpu.ecc_aggregate.sram_uncorrected is None  # not split on Pascal
    assert gpu.ecc_volatile.corrected == 0
    assert (gpu.retired_pages.single_bit, gpu.retired_pages.double_bit) == (0, 0)
    assert gpu.retired_pages.pending is False
    # Old tag names: clocks_throttle_reasons, power_readings/power_limit.
    assert gpu.clock_event_reasons == ("gpu_idle",)
    assert gpu.power_limit_w == 250.0 and gpu.power_draw_w == pytest.approx(26.16)


def test_remapped_rows_on_ampere_a10g() -> None:
    gpu = parse_nvidia_smi_xml(read("telegraf-a10g-driver515.xml")).gpus[0]
    rows = gpu.remapped_rows
    assert (rows.correctable, rows.uncorrectable, rows.pending, rows.failure) == (
        0,
        0,
        False,
        False,
    )
    assert gpu.pci_bus_id == "0000:00:1E.0"


def test_v13_schema_sram_split_and_instant_power() -> None:
    gpu = parse_nvidia_smi_xml(read("telegraf-rtx3080-driver595-v13.xml")).gpus[0]
    # v13 dropped <power_draw> for instant/average readings.
    assert gpu.power_draw_w == pytest.approx(142.33)
    assert gpu.utilization_gpu_pct == 65.0
    assert gpu.ecc_volatile.sram_uncorrected is None  # all N/A on GeForce
    assert gpu.recovery_action == "None"


def test_v13_active_reason_sw_power_cap() -> None:
    log = parse_nvidia_smi_xml(read("telegraf-rtx3090-driver590-v13.xml"))
    assert log.gpus[0].clock_event_reasons == ("sw_power_cap",)
    assert log.cuda_version == "13.1"


def test_two_gpus_in_file_order() -> None:
    log = parse_nvidia_smi_xml(read("telegraf-2x-rtx2070-driver590-v13.xml"))
    assert [g.pci_bus_id for g in log.gpus] == ["0000:01:00.0", "0000:02:00.0"]
    assert [g.index for g in log.gpus] == [0, 1]
    assert all(g.serial is None for g in log.gpus)  # "N/A"
    assert all(g.driver_version == "590.44.01" for g in log.gpus)


def test_link_width_below_max_is_reported() -> None:
    gpu = parse_nvidia_smi_xml(read("datakit-gtx1050-driver515.xml")).gpus[0]
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (8, 16)
    assert gpu.power_draw_w is None  # "N/A" on this laptop part


def test_minimal_capture_without_driver_version() -> None:
    # Cut down by its publisher: no driver, no pci_bus_id element (the <gpu id> is used).
    log = parse_nvidia_smi_xml(read("telegraf-gtx1070ti-minimal.xml"))
    assert log.driver_version is None and log.attached_gpus is None
    gpu = log.gpus[0]
    assert gpu.pci_bus_id == "0000:01:00.0"
    assert gpu.pcie_width_current == 16 and gpu.pcie_width_max is None


def test_windows_persistence_mode_na() -> None:
    gpu = parse_nvidia_smi_xml(read("telegraf-rtx3080-windows-driver536-v12.xml")).gpus[0]
    assert gpu.persistence_mode is None


def test_unknown_error_marks_gpu_as_error_without_hiding_the_other() -> None:
    text = read("telegraf-2x-rtx2070-driver590-v13.xml")
    second = text.index('<gpu id="00000000:02:00.0">')
    head, tail = text[:second], text[second:]
    tail = tail.replace(
        "<product_name>NVIDIA GeForce RTX 2070</product_name>",
        "<product_name>Unknown Error</product_name>",
        1,
    )
    log = parse_nvidia_smi_xml(head + tail)
    assert log.gpus[0].status == "ok"
    assert log.gpus[1].status == "error"
    assert "product_name" in log.gpus[1].status_detail
    assert log.gpus[1].name is None
    assert log.gpus[1].pci_bus_id == "0000:02:00.0"


def test_gpu_is_lost_anywhere_marks_error() -> None:
    text = read("telegraf-tesla-t4-driver515.xml").replace(
        "<gpu_temp>40 C</gpu_temp>", "<gpu_temp>GPU is lost</gpu_temp>"
    )
    gpu = parse_nvidia_smi_xml(text).gpus[0]
    assert gpu.status == "error" and "GPU is lost" in gpu.status_detail
    assert gpu.temperature_c is None


def test_truncated_xml_raises_parse_error() -> None:
    text = read("telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml")
    with pytest.raises(ParseError, match="truncated"):
        parse_nvidia_smi_xml(text[: len(text) // 2])


@pytest.mark.parametrize("path", ALL_XML, ids=lambda p: p.name)
def test_the_c_parser_reads_every_capture_as_defusedxml_does(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = path.read_text(encoding="utf-8")
    assert "<!ENTITY" not in text  # what nvidia-smi prints goes to the C parser
    fast = parse_nvidia_smi_xml(text)
    # A marker no document holds sends every document through defusedxml.
    monkeypatch.setattr(nvidia_xml, "_ENTITY_DECLARATION", "<")
    assert parse_nvidia_smi_xml(text) == fast


def test_an_external_dtd_or_entity_is_never_fetched() -> None:
    text = read("telegraf-gtx1070ti-minimal.xml")
    for doctype in (
        '<!DOCTYPE nvidia_smi_log SYSTEM "file:///etc/passwd">',
        '<!DOCTYPE nvidia_smi_log SYSTEM "http://127.0.0.1:9/evil.dtd">',
    ):
        hostile = text.replace('<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v10.dtd">', doctype)
        assert doctype in hostile
        # The DTD is not loaded: the GPUs are read as without it.
        assert parse_nvidia_smi_xml(hostile).gpus == parse_nvidia_smi_xml(text).gpus
        # An entity the document does not declare is an error, not a lookup anywhere.
        used = hostile.replace("<product_name>", "<product_name>&xxe;", 1)
        with pytest.raises(ParseError, match="malformed"):
            parse_nvidia_smi_xml(used)


def test_entity_text_outside_a_declaration_is_read_by_defusedxml() -> None:
    # "<!ENTITY" in a comment declares nothing: the safe reader reads the document whole.
    text = read("telegraf-gtx1070ti-minimal.xml").replace(
        "<nvidia_smi_log>", "<nvidia_smi_log><!-- <!ENTITY x 'y'> -->", 1
    )
    assert "<!ENTITY" in text
    assert (
        parse_nvidia_smi_xml(text).gpus
        == parse_nvidia_smi_xml(read("telegraf-gtx1070ti-minimal.xml")).gpus
    )


def test_entity_declarations_are_refused() -> None:
    text = read("telegraf-gtx1070ti-minimal.xml").replace(
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v10.dtd">',
        '<!DOCTYPE nvidia_smi_log [<!ENTITY boom "boom"><!ENTITY b2 "&boom;&boom;">]>',
    )
    with pytest.raises(ParseError, match="unsafe"):
        parse_nvidia_smi_xml(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "<html><body>not nvidia</body></html>",
        "<nvidia_smi_log><gpu>",
    ],
)
def test_garbage_raises_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_nvidia_smi_xml(text)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("80 MiB", 80), ("16x", 16), ("N/A", None), ("[N/A]", None), ("[Not Supported]", None),
     ("Unknown Error", None), ("0", 0), ("garbage", None), (None, None)],
)  # fmt: skip
def test_parse_int(raw: str | None, expected: int | None) -> None:
    assert parse_int(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("70.50 W", 70.5), ("45 C", 45.0), ("65 %", 65.0), ("Not Supported", None), ("", None)],
)
def test_parse_float(raw: str, expected: float | None) -> None:
    assert parse_float(raw) == expected


def _parsed_with_warnings(text: str) -> tuple[object, list[object]]:
    with collecting() as warnings:
        log = parse_nvidia_smi_xml(text)
    return log, list(warnings)


@pytest.mark.parametrize("path", ALL_XML, ids=lambda p: p.name)
def test_leaving_the_unread_blocks_out_reads_every_capture_alike(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supported clocks nothing reads are left out before parsing: the GPUs and the
    warnings are those of the whole document."""
    text = path.read_text(encoding="utf-8")
    short = _parsed_with_warnings(text)
    monkeypatch.setattr(nvidia_xml, "_UNREAD_BLOCKS", ())
    assert short == _parsed_with_warnings(text)


def test_the_cut_leaves_out_most_of_a_gpu_entry() -> None:
    text = read("telegraf-rtx3090-driver525-v12.xml")
    shorter = nvidia_xml._without_blocks(text)
    assert "<supported_clocks>" in text and "supported_clocks" not in shorter
    assert len(shorter) < len(text) / 4
    # Nothing to leave out: the text itself, not a copy.
    plain = read("telegraf-gtx1070ti-minimal.xml")
    assert "<supported_clocks>" not in plain
    assert nvidia_xml._without_blocks(plain) is plain


def test_a_cut_that_breaks_the_document_falls_back_to_the_whole_text() -> None:
    """Where the cut would change what the document says (here the opening tag is inside a
    comment), the document is read as printed, not refused."""
    whole = read("telegraf-tesla-t4-driver515.xml")
    text = whole.replace("<nvidia_smi_log>", "<nvidia_smi_log><!-- <supported_clocks> -->", 1)
    assert "<!-- <supported_clocks> -->" in text
    assert parse_nvidia_smi_xml(text) == parse_nvidia_smi_xml(whole)
    # A block left open (output cut short inside it) is an error, as before.
    cut = whole[: whole.index("</supported_clocks>")]
    with pytest.raises(ParseError, match="malformed or truncated"):
        parse_nvidia_smi_xml(cut)


def test_where_the_document_starts_is_the_first_line_that_begins_with_markup() -> None:
    # A text that starts with markup is answered without reading it line by line; behind a
    # line of prose the same text is read line by line, and must start two characters later.
    pieces = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u3000"]
    pieces += ["<", "a", "WARNING: infoROM is corrupted\n"]
    texts = ["", "<?xml?>", "  \n\t<a>", "warning <b>\n<a>", "x\r\n  <a>", "\u2028<a>"]
    generator = random.Random(20261202)
    texts += ["".join(generator.choice(pieces) for _ in range(generator.randint(0, 10)))
              for _ in range(20_000)]  # fmt: skip
    for text in texts:
        start = nvidia_xml._document_start(text)
        assert nvidia_xml._document_start("x\n" + text) == (start + 2 if start >= 0 else -1)
    assert nvidia_xml._document_start(" \u2028\t<nvidia_smi_log>") == 3
    assert nvidia_xml._document_start("warning <b>\n <a>") == 13


def test_memory_repair_and_the_sram_threshold_are_read() -> None:
    """A v13 report (driver 595): the repair states under <ecc_errors> and the aggregate SRAM
    threshold, as printed ("No", "N/A"), and each set to "Yes" in the same document."""
    text = (XML / "telegraf-rtx3080-driver595-v13.xml").read_text(encoding="utf-8")
    (gpu,) = parse_nvidia_smi_xml(text).gpus
    assert (gpu.channel_repair_pending, gpu.tpc_repair_pending) == (False, False)
    assert (gpu.unrepairable_memory, gpu.sram_threshold_exceeded) == (None, None)
    assert gpu.unavailable["unrepairable_memory"] == "not_applicable"
    for tag in ("channel_repair_pending", "tpc_repair_pending", "unrepairable_memory",
                "sram_threshold_exceeded"):  # fmt: skip
        start = text.index(f"<{tag}>")
        end = text.index(f"</{tag}>", start)
        changed = text[:start] + f"<{tag}>Yes" + text[end:]
        with collecting() as warnings:
            (flagged,) = parse_nvidia_smi_xml(changed).gpus
        assert getattr(flagged, tag) is True, tag
    assert not [w for w in warnings if "repair" in str(w) or "sram" in str(w)], warnings
