from __future__ import annotations

import importlib
import re

import pytest

from gpuaudit.model.snapshot import HostStatus
from gpuaudit.policy.defaults import DEFAULT_POLICY, host_policy, merge_policy
from gpuaudit.rules import FLEET_HOST, all_rules, evaluate
from gpuaudit.rules.base import REGISTRY, Owner, Rule, Severity, register, rule

_CATEGORY_BY_PREFIX = {
    "GA0": "audit",
    "GA1": "software",
    "GA2": "mig",
    "GA3": "health",
    "GA4": "services",
    "GA5": "topology",
    "GA6": "system",
    "GA7": "fleet",
    "GA8": "capacity",
    # GA9xx: what the scheduler and the monitoring believe, and active checks, by tens.
    "GA90": "scheduler",
    "GA91": "scheduler",
    "GA92": "monitoring",
    "GA93": "readiness",
}


def _category_of(code: str) -> str:
    return _CATEGORY_BY_PREFIX[code[:4] if code.startswith("GA9") else code[:3]]


def test_registry_has_documented_unique_rules():
    rules = all_rules()
    codes = [r.code for r in rules]
    assert len(rules) >= 12
    assert len(codes) == len(set(codes))
    assert codes == sorted(codes)
    for r in rules:
        assert re.fullmatch(r"GA\d{3}", r.code)
        assert len(r.doc) > 80, r.code
        assert "Why" in r.doc and "Evidence" in r.doc, r.code
        assert r.references and r.remediation, r.code
        assert 1 <= r.likelihood <= 5 and 1 <= r.impact <= 5
        assert isinstance(r.owner, Owner) and isinstance(r.severity, Severity)
        assert r.category == _category_of(r.code), r.code


def test_required_rules_are_present():
    for code in ("GA001", "GA101", "GA102", "GA103", "GA104", "GA105", "GA106", "GA201"):
        assert code in REGISTRY
    for code in ("GA301", "GA302", "GA303", "GA304", "GA305", "GA306", "GA307", "GA320"):
        assert code in REGISTRY
    for code in ("GA401", "GA402", "GA501", "GA502", "GA601", "GA602", "GA701"):
        assert code in REGISTRY
    assert REGISTRY["GA401"].operation == "gpuaudit.operations.persistence.enable"
    assert REGISTRY["GA106"].operation == "gpuaudit.operations.driver.pin"
    assert REGISTRY["GA701"].check_fleet is not None


def test_healthy_fleet_has_no_findings(make_host):
    fleet = [make_host("gpu-01"), make_host("gpu-02")]
    result = evaluate(fleet)
    # Only the capacity summary, which is information, not a risk.
    assert [(f.rule, f.host, f.severity) for f in result] == [
        ("GA801", "gpu-01", Severity.INFO),
        ("GA801", "gpu-02", Severity.INFO),
    ]


def test_register_refuses_reused_code_and_undocumented_rules():
    with pytest.raises(ValueError, match="already taken"):

        @rule(
            "GA301",
            "impostor",
            category="health",
            owner=Owner.INFRA,
            severity=Severity.LOW,
            likelihood=1,
            impact=1,
            remediation="none",
            references=("x",),
        )
        def impostor(rule, snap, ctx):
            """Pretends to be GA301, which is taken."""
            return []

    bare = Rule("GA990", "t", "audit", Owner.INFRA, Severity.LOW, 1, 1, "fix", ("ref",), doc="")
    with pytest.raises(ValueError, match="docstring"):
        register(bare)
    assert "GA990" not in REGISTRY


@pytest.fixture
def exploding_rules():
    def host_boom(rule, snap, ctx):
        yield from ()
        raise RuntimeError(f"cannot read {snap.host}")

    def fleet_boom(rule, snaps, ctx):
        raise KeyError("no such model")

    added = [
        Rule(
            "GA998", "explodes per host", "audit", Owner.INFRA, Severity.LOW, 1, 1, "fix",
            ("ref",), doc="Raises on purpose.", check_host=host_boom,
        ),
        Rule(
            "GA999", "explodes per fleet", "audit", Owner.INFRA, Severity.LOW, 1, 1, "fix",
            ("ref",), doc="Raises on purpose.", check_fleet=fleet_boom,
        ),
    ]  # fmt: skip
    for r in added:
        register(r)
    yield
    for r in added:
        REGISTRY.pop(r.code, None)


def test_evaluate_survives_rules_that_raise(exploding_rules, make_host, make_gpu):
    sick = make_host("gpu-02", gpus=[make_gpu(0, persistence_mode=False)])
    result = evaluate([make_host("gpu-01"), sick])
    failures = [f for f in result if f.rule == "GA000"]
    assert {(f.host, f.evidence.fact) for f in failures} == {
        ("gpu-01", "GA998"),
        ("gpu-02", "GA998"),
        (FLEET_HOST, "GA999"),
    }
    host_failure = next(f for f in failures if f.host == "gpu-01")
    assert "RuntimeError: cannot read gpu-01" in host_failure.message
    assert "RuntimeError" in host_failure.evidence.excerpt
    # The other rules still ran.
    assert any(f.rule == "GA401" and f.host == "gpu-02" for f in result)


def test_findings_sorted_by_severity_then_host_rule_gpu(make_host, make_gpu):
    a = make_host(
        "b-host",
        gpus=[make_gpu(0, persistence_mode=False), make_gpu(1, persistence_mode=False)],
    )
    b = make_host("a-host", status=HostStatus.UNREACHABLE, gpus=())
    result = evaluate([a, b], {"disabled_rules": ["GA801"]})
    keys = [(f.severity.rank, f.host, f.rule, f.gpu) for f in result]
    assert keys == [
        (3, "a-host", "GA001", None),
        (2, "b-host", "GA401", 0),
        (2, "b-host", "GA401", 1),
    ]


def test_uncollected_host_only_gets_ga001(make_host):
    snap = make_host(
        status=HostStatus.COLLECTION_FAILED,
        status_detail="output ends inside section 'nvidia_smi_xml'",
        gpus=(),
        sysctls={},
        tools={},
    )
    result = evaluate([snap])
    assert [f.rule for f in result] == ["GA001"]
    assert result[0].severity is Severity.HIGH
    assert "output ends inside section" in result[0].message
    assert result[0].evidence.actual == "collection_failed"


def test_policy_disables_rules_and_overrides_severity(make_host, make_gpu):
    snap = make_host(gpus=[make_gpu(0, persistence_mode=False)], sysctls={})
    result = evaluate(
        [snap],
        {"disabled_rules": ["GA601", "GA801"], "severity_overrides": {"GA401": "high"}},
    )
    assert [(f.rule, f.severity) for f in result] == [("GA401", Severity.HIGH)]


def test_policy_merges_nested_and_host_data_overrides(make_host):
    merged = merge_policy(DEFAULT_POLICY, {"sysctl_baseline": {"vm.max_map_count": 262144}})
    assert merged["sysctl_baseline"]["net.core.rmem_max"] == 134217728
    assert merged["sysctl_baseline"]["vm.max_map_count"] == 262144
    assert DEFAULT_POLICY["sysctl_baseline"] == {
        "net.core.rmem_max": 134217728,
        "net.core.wmem_max": 134217728,
    }
    snap = make_host(host_data={"expected_gpu_count": 8, "vendor": "amd", "groups": ["a"]})
    policy = host_policy(snap, {"expected_gpu_count": 4, "retired_pages_limit": 10})
    assert policy["expected_gpu_count"] == 8
    assert policy["gpu_vendor"] == "amd"
    assert policy["retired_pages_limit"] == 10
    assert "groups" not in policy


def test_finding_round_trips_through_dict(make_host, make_gpu):
    snap = make_host(gpus=[make_gpu(0, persistence_mode=False)])
    (finding,) = evaluate([snap], {"disabled_rules": ["GA801"]})
    data = finding.to_dict()
    assert data["gpu"] == 0 and data["gpu_uuid"] == "GPU-00000000"
    assert data["operation"] == "gpuaudit.operations.persistence.enable"
    assert data["score"] == finding.likelihood * finding.impact
    assert type(finding).from_dict(data) == finding


def test_every_named_operation_exists_and_is_a_pyinfra_operation():
    named = {r.operation for r in all_rules() if r.operation}
    assert named  # persistence, driver pin, services
    for dotted in named:
        module, _, name = dotted.rpartition(".")
        operation = getattr(importlib.import_module(module), name)
        assert callable(operation) and hasattr(operation, "_inner"), dotted


def _rule_texts():
    for r in all_rules():
        yield r.code, " ".join([r.title, r.remediation, r.doc or ""])


def test_every_operation_and_subcommand_named_in_rule_texts_exists():
    import argparse
    import re

    from gpuaudit.cli import build_parser

    subparsers = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    commands = set(subparsers.choices)
    seen_operations = 0
    for code, text in _rule_texts():
        for dotted in re.findall(r"gpuaudit\.operations\.[a-z_]+\.[a-z_]+", text):
            module, _, name = dotted.rpartition(".")
            operation = getattr(importlib.import_module(module), name, None)
            assert operation is not None and hasattr(operation, "_inner"), (code, dotted)
            seen_operations += 1
        # A command as texts write one: in backquotes or parentheses, or opening a line.
        for command in re.findall(r"(?:^|`|\(|: )gpuaudit ([a-z][a-z-]+)", text, re.M):
            assert command in commands, (code, f"gpuaudit {command}")
    assert seen_operations >= 6


def test_a_rule_with_an_operation_names_it_in_its_remediation():
    for r in all_rules():
        if r.operation:
            assert r.operation in r.remediation, r.code
