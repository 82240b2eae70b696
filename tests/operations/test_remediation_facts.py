"""The facts the remediation operations read: command strings and pure parsing."""

from __future__ import annotations

from gpuaudit.facts.remediation import AptHolds, PersistenceModes, SystemdUnits


def test_persistence_modes_parse_csv_and_ignore_errors() -> None:
    fact = PersistenceModes()
    assert fact.command().startswith("LANG=C nvidia-smi --query-gpu=index,persistence_mode ")
    assert fact.command().endswith("|| true")
    assert fact.requires_command() == "nvidia-smi"
    output = ["0, Enabled", "1, Disabled", "2, [N/A]"]
    assert fact.process(output) == {"0": "Enabled", "1": "Disabled", "2": "[N/A]"}
    # A driver that does not answer prints a sentence, not CSV: no GPU to change.
    failed = ["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."]
    assert fact.process(failed) == {}


def test_apt_holds() -> None:
    assert AptHolds().command() == "LANG=C apt-mark showhold"
    assert AptHolds().process(["nvidia-utils-535", "", "nvidia-driver-535"]) == [
        "nvidia-driver-535",
        "nvidia-utils-535",
    ]


def test_systemd_units_command_quotes_names() -> None:
    command = SystemdUnits().command(units=["nvidia-dcgm", "x; reboot"])
    assert command.get_raw_value() == (
        "LANG=C systemctl show --property Id --property LoadState --property ActiveState "
        "--property UnitFileState nvidia-dcgm.service 'x; reboot.service'"
    )


def test_systemd_units_leave_out_missing_units_and_mark_masked_ones() -> None:
    output = [
        "Id=nvidia-persistenced.service",
        "LoadState=loaded",
        "ActiveState=inactive",
        "UnitFileState=disabled",
        "",
        "Id=dcgm-exporter.service",
        "LoadState=not-found",
        "ActiveState=inactive",
        "UnitFileState=",
        "",
        "Id=nvidia-dcgm.service",
        "LoadState=masked",
        "ActiveState=inactive",
        "UnitFileState=masked",
    ]
    assert SystemdUnits().process(output) == {
        "nvidia-persistenced.service": {"active": "inactive", "enabled": "disabled"},
        "nvidia-dcgm.service": {"active": "inactive", "enabled": "masked"},
    }


def test_driver_version_from_proc() -> None:
    from gpuaudit.facts.remediation import NvidiaDriverVersion

    fact = NvidiaDriverVersion()
    line = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Fri Feb 23 12:06:01 UTC 2024"
    )
    assert fact.process([line, "GCC version:  gcc version 12.3.0"]) == "535.161.08"
    open_module = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build"
    )
    assert fact.process([open_module]) == "560.35.03"
    assert fact.process([]) is None
