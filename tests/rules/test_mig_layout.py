from __future__ import annotations

import pytest

from gpuaudit.model.mig_spec import MigSpecError, read_mig_configs
from gpuaudit.model.snapshot import MigDevice, MigInstance, PciDevice, Section
from gpuaudit.rules import assess
from gpuaudit.rules.base import Outcome, Severity

A100 = "NVIDIA A100-SXM4-80GB"

# mig-parted's own format, as a site would keep it in its policy.
MIG_PARTED = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "half": [
            {"devices": [0], "mig-enabled": False},
            {"devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        ],
        "by-device-id": [
            {"devices": "all", "mig-enabled": False},
            {
                "device-filter": ["0x20B210DE"],
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": {"1c.3g.40gb": 1, "3g.40gb": 1},
            },
        ],
    },
}


def gi(gpu: int, profile: str, instance: int) -> MigInstance:
    return MigInstance(gpu=gpu, profile_name=profile, profile_id=None, instance_id=instance)


def mig_gpu(make_gpu, index, mode="Enabled", pending=None, devices=()):
    return make_gpu(
        index, name=A100, mig_mode_current=mode, mig_mode_pending=pending or mode,
        mig_devices=devices,
    )  # fmt: skip


def host(make_host, gpus, config, instances=(), **changes):
    data = {"expected_gpu_count": len(gpus), "mig_config_name": config, "mig_configs": MIG_PARTED}
    return make_host(
        gpus=gpus,
        host_data=data,
        mig_gpu_instances=tuple(instances),
        sections={"mig_gi": Section(rc=0, stdout="(listing)")},
        **changes,
    )


# --- GA203 layout vs the site's config --------------------------------------------------------


def test_wrong_instances_and_wrong_mode(make_host, make_gpu, findings):
    gpus = [mig_gpu(make_gpu, 0), mig_gpu(make_gpu, 1, mode="Disabled")]
    instances = [gi(0, "1g.10gb", i) for i in range(4)] + [gi(0, "MIG 2g.20gb", 9)]
    snap = host(make_host, gpus, "all-1g.10gb", instances)
    result = {f.gpu: f for f in findings("GA203", snap)}
    assert sorted(result) == [0, 1]
    first = result[0]
    assert (first.severity, first.operation) == (Severity.MEDIUM, "gpuaudit.operations.mig.apply")
    assert first.evidence.actual["gpu_instances"] == {"1g.10gb": 4, "2g.20gb": 1}
    assert first.evidence.expected == {"mig_enabled": True, "gpu_instances": {"1g.10gb": 7}}
    assert "4× 1g.10gb, 1× 2g.20gb, the config wants 7× 1g.10gb" in first.message
    assert "MIG is disabled, the config wants it enabled" in result[1].message


def test_matching_layout_is_silent_including_mig_devices_from_the_xml(
    make_host, make_gpu, findings
):
    instances = [gi(0, "1g.10gb", i) for i in range(7)]
    # GPU 1: no -lgi rows, but nvidia-smi -q lists its MIG devices (two CIs share GI 1).
    devices = tuple(MigDevice(i, 1 if i < 2 else i, 0, "3g.40gb") for i in range(3))
    gpus = [mig_gpu(make_gpu, 0), mig_gpu(make_gpu, 1, devices=devices[:1] + devices[2:])]
    assert findings("GA203", host(make_host, gpus, "all-1g.10gb", instances))[0].gpu == 1
    both = [mig_gpu(make_gpu, 0, mode="Disabled"), mig_gpu(make_gpu, 1, devices=devices)]
    assert findings("GA203", host(make_host, both, "half")) == []


def test_pending_enable_and_non_mig_gpu(make_host, make_gpu, findings):
    pending = mig_gpu(make_gpu, 0, mode="Disabled", pending="Enabled")
    no_mig = make_gpu(1, mig_mode_current=None, mig_mode_pending=None)
    result = {
        f.gpu: f for f in findings("GA203", host(make_host, [pending, no_mig], "all-1g.10gb"))
    }
    assert "pending a GPU reset: GA201" in result[0].message
    assert "does not support it" in result[1].message


def test_disabled_config_flags_mig_gpus(make_host, make_gpu, findings):
    gpus = [mig_gpu(make_gpu, 0), mig_gpu(make_gpu, 1, mode="Disabled")]
    (f,) = findings("GA203", host(make_host, gpus, "all-disabled", [gi(0, "7g.80gb", 0)]))
    assert f.gpu == 0 and "MIG is enabled, the config wants it disabled" in f.message


def test_device_filter_and_compute_instance_profiles(make_host, make_gpu, findings):
    gpus = [mig_gpu(make_gpu, 0), mig_gpu(make_gpu, 1)]
    pci = tuple(
        PciDevice(g.pci_bus_id or "", "0302", "10de", dev)
        for g, dev in zip(gpus, ("20b2", "2330"), strict=True)
    )
    instances = [gi(0, "3g.40gb", 1), gi(0, "3g.40gb", 2), gi(1, "7g.80gb", 0)]
    snap = host(make_host, gpus, "by-device-id", instances, pci_devices=pci)
    # GPU 0 (0x20B2) gets the MIG entry: 1c.3g.40gb + 3g.40gb = two 3g.40gb GIs, as it has.
    # GPU 1 (0x2330) only matches the first entry, which wants MIG disabled.
    (f,) = findings("GA203", snap)
    assert f.gpu == 1 and "wants it disabled" in f.message


def test_silent_without_a_config_and_loud_with_a_wrong_one(make_host, make_gpu, findings):
    gpus = [mig_gpu(make_gpu, 0)]
    assert findings("GA203", host(make_host, gpus, None)) == []
    (f,) = findings("GA000", host(make_host, gpus, "all-2g"))
    assert "GA203" in f.message and "'all-2g' is not in mig_configs" in f.message


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"version": "v2", "mig-configs": {}}, "version: v1"),
        ({"c": [{"devices": "all", "mig-enabled": True, "mig-devicez": {}}]}, "mig-devicez"),
        ({"c": [{"devices": "all"}]}, "mig-enabled must be"),
        ({"c": [{"devices": "0,1", "mig-enabled": False}]}, "devices must be"),
        ({"c": [{"mig-enabled": True, "mig-devices": {"1g.10gb": "7"}}]}, "mig-devices"),
        ({"c": {"devices": "all"}}, "a list of entries"),
        (
            {"c": [{"mig-enabled": True, "mig-devices": {"5g.40gb": 1}}]},
            "unknown Compute Instance slice size: 5",
        ),
        ({"c": [{"mig-enabled": True, "mig-devices": {"1g10gb": 7}}]}, "expected \\[<C>c"),
    ],
)
def test_mig_configs_are_read_strictly_like_mig_parted(value, message):
    with pytest.raises(MigSpecError, match=message):
        read_mig_configs(value)


def test_bare_mig_configs_map_is_accepted():
    configs = read_mig_configs(MIG_PARTED["mig-configs"])
    assert configs == read_mig_configs(MIG_PARTED)
    (entry,) = configs["all-1g.10gb"]
    assert entry.devices is None and entry.gpu_instances() == {"1g.10gb": 7}


# --- GA204 MIG without a declared layout ------------------------------------------------------


def test_mig_in_use_without_declared_layout(make_host, make_gpu, findings):
    gpus = [mig_gpu(make_gpu, 0), make_gpu(1)]
    snap = make_host(gpus=gpus, mig_gpu_instances=(gi(0, "3g.40gb", 1), gi(0, "3g.40gb", 2)))
    (f,) = findings("GA204", snap)
    assert (f.severity, f.gpu) == (Severity.LOW, None)
    assert f.evidence.actual == {"GPU 0": {"3g.40gb": 2}}
    assert findings("GA204", host(make_host, gpus, "half")) == []
    assert findings("GA204", make_host()) == []


# --- GA205 multi-tenant host without MIG ------------------------------------------------------


def test_multi_tenant_host_without_mig(make_host, make_gpu, findings):
    gpus = [
        mig_gpu(make_gpu, 0),
        mig_gpu(make_gpu, 1, mode="Disabled"),
        make_gpu(2, name="NVIDIA L40S"),  # no MIG support
    ]
    snap = make_host(gpus=gpus, host_data={"expected_gpu_count": 3, "multi_tenant": True})
    (f,) = findings("GA205", snap)
    assert f.severity is Severity.MEDIUM
    assert "GPU 1 could run MIG but do not" in f.message
    assert "GPU 2 do not support MIG" in f.message
    assert findings("GA205", make_host(gpus=gpus)) == []  # not declared multi-tenant


# --- a GPU whose nvidia-smi index is not known (HostSnapshot.unnumbered_gpus) -----------------


def _gpu_outcomes(snap, code):
    (outcome,) = [o for o in assess((snap,)).outcomes if o.rule == code]
    return {g.gpu: (g.outcome, g.reason) for g in outcome.gpus}


def test_mig_rows_are_not_matched_to_a_gpu_without_its_nvidia_smi_index(
    make_host, make_gpu, findings
):
    # GPU 1 stands in for a GPU the report listed without saying which NVML index it has:
    # -lgi's "GPU 1" rows may be another GPU's (one the XML left out), so they are not its.
    gpus = [mig_gpu(make_gpu, 0), mig_gpu(make_gpu, 1)]
    rows = [gi(g, "MIG 1g.10gb", 7 + n) for g in (0, 1) for n in range(7)]
    snap = host(make_host, gpus, "all-1g.10gb", rows, unnumbered_gpus=(1,))
    assert findings("GA203", snap) == [] and findings("GA202", snap) == []
    # GPU 0 has MIG on where "half" wants it off; GPU 1 is not judged.
    half_host = host(make_host, gpus, "half", rows, unnumbered_gpus=(1,))
    assert [f.gpu for f in findings("GA203", half_host)] == [0]
    by_gpu = _gpu_outcomes(snap, "GA202")
    assert by_gpu[0][0] is Outcome.PASS
    assert by_gpu[1][0] is Outcome.NOT_EVALUATED and "index of this GPU" in by_gpu[1][1]
    # An "all" entry needs no index: the layout is judged, by the XML's own MIG devices only.
    assert _gpu_outcomes(snap, "GA203")[1][0] is not Outcome.NOT_EVALUATED
    # An entry for listed indexes may or may not be this GPU's.
    half = _gpu_outcomes(half_host, "GA203")
    assert half[1][0] is Outcome.NOT_EVALUATED
    # Numbered, the same rows are GPU 1's (and a layout of 7x 1g.10gb differs from "half").
    drift = findings("GA203", host(make_host, gpus, "half", rows))
    assert [f.gpu for f in drift] == [0, 1]
    assert drift[1].evidence.actual["gpu_instances"] == {"1g.10gb": 7}
