"""GA911-GA916: Slurm's view against the GPUs the audit saw.

The Slurm side is parsed from the real captures in tests/fixtures/slurm/; where a test changes
a value in one (a count, a state), it says so."""

from __future__ import annotations

from pathlib import Path

from gpuaudit.model.findings import Outcome
from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus, MigDevice, SlurmView
from gpuaudit.parsers.slurm import parse_gres_conf, parse_scontrol_node, parse_slurmd_gres
from gpuaudit.rules import assess

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
NODE = (
    FIXTURES / "scontrol-show-node/awsome-distributed-ai-195-rtx3090-idle-drain-gres-lower.txt"
).read_text()
STATIC_8 = (FIXTURES / "gres-conf/slinky-operator-101-8x-h100-file-lines.conf").read_text()
AUTODETECT_MIXED = (
    FIXTURES / "gres-conf/schedmd-gres-shtml-autodetect-nvml-with-file-lines.conf"
).read_text()
MIG_G = (FIXTURES / "slurmd-G/ansible-slurm-appliance-docs-mig-h100-wrapped.txt").read_text()
NAME = "yigou-dev-102-68"


def node_text(
    gres: str = "gpu:nvidia-rtx-3090:1", state: str = "IDLE+DRAIN", reason: bool = True
) -> str:
    """The captured record with its Gres= and State= changed (derived), its Reason= kept or cut."""
    text = NODE.replace("Gres=gpu:nvidia-rtx-3090:1", f"Gres={gres}")
    text = text.replace("State=IDLE+DRAIN", f"State={state}")
    return text if reason else text.split("   Reason=")[0]


def gpus(
    count: int, *, mig: dict[int, list[str]] | None = None, errored: int = 0
) -> tuple[Gpu, ...]:
    out = []
    for i in range(count):
        slices = (mig or {}).get(i)
        out.append(
            Gpu(
                index=i,
                name="NVIDIA A100-SXM4-80GB",
                status="error" if i < errored else "ok",
                mig_mode_current="Enabled" if slices else "Disabled",
                mig_devices=tuple(
                    MigDevice(index=j, gpu_instance_id=j, compute_instance_id=0, profile=p)
                    for j, p in enumerate(slices or ())
                ),
            )
        )
    return tuple(out)


def snap(view: SlurmView | None, gpu_list: tuple[Gpu, ...] = (), **extra: object) -> HostSnapshot:
    return HostSnapshot(
        host=NAME,
        status=HostStatus.OK,
        collected_at="2024-12-19T12:00:00Z",
        gpus=gpu_list,
        slurm=view,
        **extra,  # type: ignore[arg-type]
    )


def view(
    text: str | None = None, gres_conf: str | None = None, slurmd_g: str | None = None
) -> SlurmView:
    return SlurmView(
        node=parse_scontrol_node(text) if text is not None else None,
        node_name=NAME,
        gres_conf=parse_gres_conf(gres_conf) if gres_conf is not None else None,
        slurmd_gres=parse_slurmd_gres(slurmd_g) if slurmd_g is not None else None,
        problems={}
        if text is not None
        else {"node": "exit status 1: Node yigou-dev-102-68 not found"},
    )


def outcomes(snapshot: HostSnapshot) -> tuple[dict[str, Outcome], dict[str, list]]:
    evaluation = assess([snapshot])
    by_rule = {o.rule: o.outcome for o in evaluation.outcomes if o.rule.startswith("GA91")}
    found: dict[str, list] = {}
    for f in evaluation.findings:
        found.setdefault(f.rule, []).append(f)
    reasons = {o.rule: o.reason for o in evaluation.outcomes if o.rule.startswith("GA91")}
    by_rule["_reasons"] = reasons  # type: ignore[assignment]
    return by_rule, found


def test_the_slurm_rules_do_not_apply_to_a_host_without_slurm() -> None:
    by_rule, found = outcomes(snap(None, gpus(8)))
    for code in ("GA911", "GA912", "GA913", "GA914", "GA915", "GA916"):
        assert by_rule[code] is Outcome.NOT_APPLICABLE
        assert "not a Slurm node" in by_rule["_reasons"][code]  # type: ignore[index]
        assert code not in found


def test_over_count_slurm_schedules_gpus_that_are_not_there() -> None:
    # Derived: Gres=gpu:a100:8 on an idle node; the host has 8 GPUs, one lost, one erroring.
    text = node_text("gpu:a100:8", "IDLE", reason=False)
    by_rule, found = outcomes(snap(view(text), gpus(7, errored=1), attached_gpus=8))
    assert by_rule["GA911"] is Outcome.FAIL
    [finding] = found["GA911"]
    assert finding.severity.value == "high"
    assert finding.evidence.actual == {"slurm_gres_gpu": 8, "healthy_gpus": 6}
    assert "1 GPU(s) answer with an error" in finding.message
    assert "attached GPUs but lists 7" in finding.message
    assert by_rule["GA912"] is Outcome.PASS
    assert by_rule["GA913"] is Outcome.PASS


def test_under_count_leaves_gpus_idle() -> None:
    text = node_text("gpu:a100:4", "IDLE", reason=False)  # derived: 4 configured
    by_rule, found = outcomes(snap(view(text), gpus(8)))
    assert by_rule["GA912"] is Outcome.FAIL and by_rule["GA911"] is Outcome.PASS
    assert "4 are never scheduled" in found["GA912"][0].message


def test_counts_match() -> None:
    text = node_text("gpu:a100:8", "MIXED", reason=False)
    by_rule, _ = outcomes(snap(view(text), gpus(8)))
    assert by_rule["GA911"] is Outcome.PASS and by_rule["GA912"] is Outcome.PASS


def test_drained_by_slurmctld_for_a_gres_count_mismatch() -> None:
    # The capture as found: drained by "slurm" (slurmctld itself).
    by_rule, found = outcomes(snap(view(NODE), gpus(1)))
    [finding] = found["GA913"]
    assert finding.severity.value == "high"
    assert finding.evidence.actual["set_by"] == "slurm"
    assert finding.evidence.actual["set_at"] == "2024-12-19T11:03:34"
    assert "gres/gpu count reported lower than configured (0 < 1)" in finding.message
    # A drained node is GA913's: GA911 does not repeat it as jobs failing.
    assert by_rule["GA911"] is Outcome.PASS


def test_drained_by_a_person_while_healthy() -> None:
    # Derived: the capture's reason replaced by an operator's.
    text = NODE.replace(
        "gres/gpu count reported lower than configured (0 < 1) [slurm@2024-12-19T11:03:34]",
        "bad DIMM, ticket 4711 [root@2024-12-19T11:03:34]",
    )
    _, found = outcomes(snap(view(text), gpus(1)))
    [finding] = found["GA913"]
    assert finding.severity.value == "medium"
    assert finding.evidence.actual["set_by"] == "root"
    assert "may be stale" in finding.message


def test_down_not_responding_counts_as_unschedulable() -> None:
    text = node_text(state="DOWN*", reason=False)  # derived
    by_rule, found = outcomes(snap(view(text), gpus(1)))
    assert by_rule["GA913"] is Outcome.FAIL
    assert "no reason given" in found["GA913"][0].message


def test_node_record_missing_is_not_evaluated_with_scontrol_s_words() -> None:
    by_rule, _ = outcomes(snap(view(None), gpus(1)))
    assert by_rule["GA911"] is Outcome.NOT_EVALUATED
    assert "Node yigou-dev-102-68 not found" in by_rule["_reasons"]["GA911"]  # type: ignore[index]


def test_slurmd_reports_fewer_than_configured() -> None:
    # The MIG capture's slurmd -G (10 GPUs) against a node configured with 12 (derived).
    text = node_text(
        "gpu:nvidia_h100_80gb_hbm3:4,gpu:nvidia_h100_80gb_hbm3_1g.10gb:8", "IDLE", reason=False
    )
    _, found = outcomes(snap(view(text, slurmd_g=MIG_G), gpus(2)))
    [finding] = found["GA914"]
    assert finding.evidence.actual["slurmd_reports"] == 10
    assert finding.evidence.expected == 12
    assert finding.severity.value == "high"
    assert "drains the node" in finding.message


def test_slurmd_reports_what_is_configured() -> None:
    text = node_text(
        "gpu:nvidia_h100_80gb_hbm3:2,gpu:nvidia_h100_80gb_hbm3_4g.40gb:2,"
        "gpu:nvidia_h100_80gb_hbm3_1g.10gb:6",
        "IDLE",
        reason=False,
    )
    host = gpus(
        4,
        mig={
            2: ["4g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"],
            3: ["4g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"],
        },
    )
    by_rule, found = outcomes(snap(view(text, slurmd_g=MIG_G), host[:2] + host[2:]))
    assert by_rule["GA914"] is Outcome.PASS
    # 2 whole GPUs and 8 MIG slices on both sides; no gres.conf read: AutoDetect unknown.
    assert by_rule["GA911"] is Outcome.PASS and by_rule["GA912"] is Outcome.PASS
    assert "AutoDetect=unset" in found["GA915"][0].message


def test_mig_on_the_host_but_whole_gpus_in_slurm() -> None:
    text = node_text("gpu:a100:2", "IDLE", reason=False)
    host = gpus(2, mig={0: ["1g.10gb"] * 2, 1: ["1g.10gb"] * 2})
    _, found = outcomes(snap(view(text, gres_conf="AutoDetect=nvml\n"), host))
    [finding] = found["GA915"]
    assert "configures no MIG GRES" in finding.message
    assert finding.evidence.expected == {"1g.10gb": 4}


def test_autodetect_mixed_with_static_lines() -> None:
    text = node_text("gpu:gp100:2,gpu:p6000:2", "IDLE", reason=False)
    _, found = outcomes(snap(view(text, gres_conf=AUTODETECT_MIXED), gpus(4)))
    [finding] = found["GA916"]
    assert finding.severity.value == "low"
    assert finding.evidence.actual == {"auto_detect": "nvml", "static_gpu_lines": 4}


def test_static_lines_that_outnumber_the_gpus() -> None:
    text = node_text("gpu:h100:8", "IDLE", reason=False)
    _, found = outcomes(snap(view(text, gres_conf=STATIC_8), gpus(7)))
    [finding] = found["GA916"]
    assert finding.severity.value == "medium"
    assert finding.evidence.actual == {"auto_detect": None, "gpu_files": 8}
    assert finding.evidence.expected == 7


def test_a_node_line_overrides_the_global_autodetect() -> None:
    # Derived: the capture's static lines under a global AutoDetect=nvml, turned off for this
    # node by a NodeName= line (gres.conf(5)).
    conf = "AutoDetect=nvml\nNodeName=yigou-dev-10[0-2]-68 AutoDetect=off\n" + STATIC_8
    text = node_text("gpu:h100:8", "IDLE", reason=False)
    _, found = outcomes(snap(view(text, gres_conf=conf), gpus(6)))
    assert found["GA916"][0].evidence.actual["auto_detect"] == "off"
