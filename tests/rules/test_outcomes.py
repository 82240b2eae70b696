"""Rule outcomes: every rule fails, passes, is not evaluated (with why) or is disabled, per host
and per GPU, and silence where data was missing is never a pass."""

from __future__ import annotations

import pytest

from gpuaudit.model.snapshot import HostStatus, Section
from gpuaudit.parsers.system import parse_lspci
from gpuaudit.policy import Policy
from gpuaudit.rules import all_rules, assess
from gpuaudit.rules.base import REGISTRY, Outcome, Owner, Rule, RuleOutcome, Severity

DEAD = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
LSPCI_T4 = "0000:3b:00.0 0302: 10de:1eb8 (rev a1)\n"


def outcomes_of(*snapshots, policy=None) -> dict[tuple[str, str], RuleOutcome]:
    return {(o.host, o.rule): o for o in assess(snapshots, policy).outcomes}


def test_every_rule_has_an_outcome_on_every_host(make_host):
    fleet = [make_host("gpu-01"), make_host("gpu-02", status=HostStatus.UNREACHABLE, gpus=())]
    outcomes = assess(fleet).outcomes
    codes = {r.code for r in all_rules()}
    assert {(o.host, o.rule) for o in outcomes} == {
        (host, code) for host in ("gpu-01", "gpu-02") for code in codes
    }
    assert len(outcomes) == 2 * len(codes)


def test_healthy_host_passes_and_judges_each_gpu(make_host):
    outcomes = outcomes_of(make_host("gpu-01"))
    ecc = outcomes["gpu-01", "GA303"]
    assert ecc.outcome is Outcome.PASS and ecc.reason == ""
    assert [(g.gpu, g.outcome) for g in ecc.gpus] == [(0, Outcome.PASS), (1, Outcome.PASS)]
    # GA801 informs with a finding: it failed in the rules' sense, the report reads its severity.
    assert outcomes["gpu-01", "GA801"].outcome is Outcome.FAIL
    assert outcomes["gpu-01", "GA801"].findings == 1


def test_dead_driver_is_not_evaluated_with_the_section_that_failed(make_host):
    dead = make_host(
        "gpu-01",
        status=HostStatus.DRIVER_NOT_RESPONDING,
        gpus=(),
        driver_version=None,
        driver_version_proc=None,
        sections={"nvidia_smi_xml": Section(rc=9, stdout=DEAD)},
    )
    outcomes = outcomes_of(dead)
    assert outcomes["gpu-01", "GA101"].outcome is Outcome.FAIL
    for code in ("GA102", "GA201", "GA303", "GA401", "GA701"):
        outcome = outcomes["gpu-01", code]
        assert outcome.outcome is Outcome.NOT_EVALUATED, code
        assert "nvidia_smi_xml section failed: exit status 9" in outcome.reason, code
        assert "couldn't communicate with the NVIDIA driver" in outcome.reason, code
    # A desired version against an unknown driver is not "the desired version".
    desired = outcomes_of(dead, policy={"desired_driver_version": "550.127.05"})
    assert desired["gpu-01", "GA107"].outcome is Outcome.NOT_EVALUATED


def test_gpu_in_error_is_not_evaluated_on_that_gpu_only(make_host, make_gpu):
    snap = make_host(
        "gpu-01",
        gpus=[make_gpu(0), make_gpu(1, status="error", status_detail="Unknown Error")],
    )
    outcomes = outcomes_of(snap)
    ecc = outcomes["gpu-01", "GA303"]
    assert ecc.outcome is Outcome.NOT_EVALUATED
    assert [(g.gpu, g.outcome) for g in ecc.gpus] == [
        (0, Outcome.PASS),
        (1, Outcome.NOT_EVALUATED),
    ]
    assert "GPU 1: it answers with an error: Unknown Error" in ecc.reason
    # The rule that reports the error state fails on it.
    error_state = outcomes["gpu-01", "GA103"]
    assert error_state.outcome is Outcome.FAIL
    assert [(g.gpu, g.outcome) for g in error_state.gpus] == [
        (0, Outcome.PASS),
        (1, Outcome.FAIL),
    ]


def test_a_check_can_say_it_could_not_judge_one_gpu(make_host, make_gpu):
    # MIG on, no MIG devices, and `mig -lgi` gave no answer: the instances are unknown.
    snap = make_host(
        "gpu-01",
        gpus=[make_gpu(0, mig_mode_current="Enabled", mig_mode_pending="Enabled")],
        sections={"mig_gi": Section(rc=2, stderr="Insufficient Permissions")},
    )
    outcome = outcomes_of(snap)["gpu-01", "GA202"]
    assert outcome.outcome is Outcome.NOT_EVALUATED
    assert outcome.gpus[0].outcome is Outcome.NOT_EVALUATED
    assert "Insufficient Permissions" in outcome.gpus[0].reason


def test_missing_sections_are_not_evaluated(make_host):
    snap = make_host(
        "gpu-01",
        services=(),
        sections={"services": Section(rc=127, stderr="systemctl: command not found")},
    )
    outcome = outcomes_of(snap)["gpu-01", "GA403"]
    assert outcome.outcome is Outcome.NOT_EVALUATED
    assert outcome.reason == (
        "no service list: the services section failed: exit status 127: "
        "systemctl: command not found"
    )


def test_host_not_audited(make_host):
    gone = make_host(
        "gpu-02", status=HostStatus.UNREACHABLE, gpus=(), status_detail="No route to host"
    )
    outcomes = outcomes_of(gone)
    assert outcomes["gpu-02", "GA001"].outcome is Outcome.FAIL
    assert outcomes["gpu-02", "GA301"].outcome is Outcome.NOT_EVALUATED
    assert outcomes["gpu-02", "GA301"].reason == (
        "the host was not audited (unreachable: No route to host)"
    )


def test_disabled_for_a_group_is_disabled_not_passed(make_host):
    policy = Policy.from_text(
        "version: 1\ngroups:\n  lab:\n    disabled_rules: [GA602, GA701]\n", "site.yaml"
    )
    lab = make_host("lab-01", host_data={"groups": ["lab"], "expected_gpu_count": 2})
    prod = make_host("prod-01", host_data={"expected_gpu_count": 2}, driver_version="535.1")
    evaluation = assess([lab, prod], policy)
    outcomes = {(o.host, o.rule): o for o in evaluation.outcomes}
    off = outcomes["lab-01", "GA602"]
    assert off.outcome is Outcome.DISABLED
    assert off.reason == "disabled_rules of the site policy site.yaml (group lab)"
    assert outcomes["prod-01", "GA602"].outcome is Outcome.PASS
    # A fleet rule disabled for a group: no outcome and no finding for that group's hosts.
    assert outcomes["lab-01", "GA701"].outcome is Outcome.DISABLED
    assert not [f for f in evaluation.findings if f.rule == "GA701" and f.host == "lab-01"]
    assert outcomes["prod-01", "GA701"].outcome is Outcome.FAIL


@pytest.fixture
def exploding_rule():
    def boom(rule, snap, ctx):
        raise RuntimeError("bad snapshot")

    REGISTRY["GA997"] = Rule(
        "GA997", "explodes", "audit", Owner.INFRA, Severity.LOW, 1, 1, "fix", ("ref",),
        doc="Raises on purpose.", check_host=boom,
    )  # fmt: skip
    yield
    REGISTRY.pop("GA997", None)


def test_a_rule_that_raises_is_not_evaluated(exploding_rule, make_host):
    outcomes = outcomes_of(make_host("gpu-01"))
    assert outcomes["gpu-01", "GA997"].outcome is Outcome.NOT_EVALUATED
    assert "RuntimeError: bad snapshot" in outcomes["gpu-01", "GA997"].reason
    assert outcomes["gpu-01", "GA000"].outcome is Outcome.FAIL


def test_no_gpu_tool_and_no_inventory_expectation(make_host):
    tools = {"nvidia-smi": False, "rocm-smi": False, "amd-smi": False, "dmesg": True}
    bare = make_host("gpu-01", status=HostStatus.NO_GPU_TOOLING, gpus=(), tools=tools, host_data={})
    # Nothing says whether the host should have a GPU tool: GA104 cannot judge it.
    outcomes = outcomes_of(bare)
    assert outcomes["gpu-01", "GA104"].outcome is Outcome.NOT_EVALUATED
    assert outcomes["gpu-01", "GA101"].outcome is Outcome.NOT_EVALUATED
    # The PCI bus does: an NVIDIA GPU sits there without nvidia-smi.
    on_bus = make_host(
        "gpu-02",
        status=HostStatus.NO_GPU_TOOLING,
        gpus=(),
        tools=tools,
        host_data={},
        sections={"lspci": Section(rc=0, stdout=LSPCI_T4)},
        pci_devices=parse_lspci(LSPCI_T4),
    )
    finding = next(f for f in assess([on_bus]).findings if f.rule == "GA104")
    assert "nvidia-smi is not installed" in finding.message


def test_outcome_round_trips_through_json(make_host, make_gpu):
    snap = make_host("gpu-01", gpus=[make_gpu(0), make_gpu(1, status="error")])
    for outcome in assess([snap]).outcomes:
        assert RuleOutcome.from_dict(outcome.rule, outcome.host, outcome.to_dict()) == outcome


def test_gpu_count_is_checked_on_hosts_without_nvidia_smi(make_host, make_gpu):
    amd = [make_gpu(i, vendor="amd", name="AMD Instinct MI100") for i in range(6)]
    tools = {"nvidia-smi": False, "rocm-smi": True, "dmesg": True, "journalctl": True}
    snap = make_host(
        "mi-01", gpus=amd, tools=tools, host_data={"expected_gpu_count": 8, "vendor": "amd"}
    )
    (finding,) = [f for f in assess([snap]).findings if f.rule == "GA102"]
    assert finding.message.startswith("6 of 8 expected GPUs are visible")


def test_rules_that_need_the_same_data_share_one_verdict_per_host(make_host, monkeypatch):
    """A host's verdict for rules that found nothing is worked out once for each distinct list
    of needs (and per-GPU or not), and is the verdict each rule gets when judged on its own."""
    from gpuaudit.rules import audit

    fleet = [
        make_host("gpu-01"),
        make_host("gpu-02", gpus=(), sections={"nvidia_smi_xml": Section(rc=9, stdout=DEAD)}),
    ]
    rules = list(all_rules())
    # Equal lists of needs are one tuple, so the rules naming them share the verdict.
    assert len({r.needs for r in rules}) == len({id(r.needs) for r in rules})
    distinct = {(r.needs, r.per_gpu) for r in rules}
    assert len(distinct) < len(rules) / 2
    verdicts: list[object] = []
    real = audit._verdict
    monkeypatch.setattr(audit, "_verdict", lambda *a: verdicts.append(a) or real(*a))
    shared = {}
    for snap in fleet:
        host = audit.HostJudging(snap)
        shared.update({(snap.host, r.code): audit.judge(r, snap, [], None, host) for r in rules})
    assert len(verdicts) == len(fleet) * len(distinct)
    monkeypatch.undo()
    for snap in fleet:
        for rule in rules:
            assert audit.judge(rule, snap, []) == shared[snap.host, rule.code], rule.code
    # The dead host's GPU rules are not evaluated, with the reason, where the live one passes.
    assert shared["gpu-01", "GA303"].outcome is Outcome.PASS
    assert shared["gpu-02", "GA303"].outcome is Outcome.NOT_EVALUATED
    assert "exit status 9" in shared["gpu-02", "GA303"].reason
