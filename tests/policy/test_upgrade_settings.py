"""The policy's upgrade: section: read strictly into UpgradeSettings, every mistake located."""

from __future__ import annotations

import re

import pytest
from policy_helpers import ROOT, parse, problems

import gpuaudit.policy
from gpuaudit.policy import Policy, load_policy
from gpuaudit.policy.upgrade import DrainSettings, GateSettings, UpgradeSettings

FULL = """
upgrade:
  max_parallel: 3
  max_unavailable: "25%"
  failure_budget: 2
  canary_failure_budget: 1
  soak_seconds: 1800
  drain:
    kind: kubectl
    timeout_seconds: 300
    kubectl_context: prod-east
  gate:
    dcgm_diag_level: 3
    command: /usr/local/bin/gpu-smoke --quick
    timeout_seconds: 600
    wait_for_host_seconds: 1200
  reboot: always
  stages: [canary, early, late]
"""


def test_a_full_section_loads_into_typed_settings():
    policy = parse(FULL)
    assert policy.upgrade == UpgradeSettings(
        max_parallel=3,
        max_unavailable="25%",
        failure_budget=2,
        canary_failure_budget=1,
        soak_seconds=1800,
        drain=DrainSettings(kind="kubectl", timeout_seconds=300, kubectl_context="prod-east"),
        gate=GateSettings(
            dcgm_diag_level=3,
            command="/usr/local/bin/gpu-smoke --quick",
            timeout_seconds=600,
            wait_for_host_seconds=1200,
        ),
        reboot="always",
        stages=("canary", "early", "late"),
    )
    assert policy.upgrade.canary_stage == "canary" and policy.upgrade.last_stage == "late"


def test_without_a_section_the_defaults_apply():
    assert parse("defaults: {expected_gpu_count: 8}\n").upgrade == UpgradeSettings()
    assert Policy().upgrade == UpgradeSettings()
    defaults = UpgradeSettings()
    assert (defaults.max_parallel, defaults.max_unavailable, defaults.failure_budget) == (1, 1, 0)
    assert defaults.stages == ("canary", "wave1", "wave2", "wave3")
    assert defaults.gate.dcgm_diag_level == 1 and defaults.drain.kind == "none"


def test_a_partial_section_keeps_the_other_defaults():
    policy = parse("upgrade:\n  max_unavailable: 2\n  gate: {dcgm_diag_level: null}\n")
    assert policy.upgrade.max_unavailable == 2
    assert policy.upgrade.gate == GateSettings(dcgm_diag_level=None)
    assert policy.upgrade.max_parallel == 1 and policy.upgrade.drain == DrainSettings()


def test_a_command_drain_with_both_commands():
    policy = parse(
        "upgrade:\n  drain: {kind: command, command: /bin/drain, undrain_command: /bin/resume}\n"
    )
    assert policy.upgrade.drain.command == "/bin/drain"
    assert policy.upgrade.drain.undrain_command == "/bin/resume"


def test_the_example_policy_has_a_valid_upgrade_section():
    upgrade = load_policy(ROOT / "policies" / "example.yaml").upgrade
    assert upgrade != UpgradeSettings()
    assert upgrade.stages == ("canary", "wave1", "wave2")  # inventory/prod.py's groups
    assert upgrade.max_unavailable == "25%" and upgrade.drain.kind == "slurm"


def test_the_documented_upgrade_example_loads():
    doc = gpuaudit.policy.__doc__ or ""
    match = re.search(r"^    upgrade:.*?(?=^\S|\Z)", doc, flags=re.S | re.M)
    assert match is not None
    block = "\n".join(line[4:] for line in match.group(0).splitlines())
    upgrade = parse(block).upgrade
    assert upgrade.max_unavailable == "25%" and upgrade.drain.kubectl_context == "prod"
    assert upgrade.gate.command == "/usr/local/bin/smoke"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "upgrade:\n  max_parallel: 0\n",
            "site.yaml:3:17: upgrade.max_parallel must be at least 1, not 0",
        ),
        (
            'upgrade:\n  max_parallel: "2"\n',
            "site.yaml:3:17: upgrade.max_parallel must be an integer, not the string '2'",
        ),
        (
            'upgrade:\n  max_unavailable: "25"\n',
            "site.yaml:3:20: upgrade.max_unavailable must be a host count or a percentage "
            "such as \"25%\", not '25'",
        ),
        (
            'upgrade:\n  max_unavailable: "0%"\n',
            "site.yaml:3:20: upgrade.max_unavailable must be a percentage from 1% to 100%, "
            "not '0%'",
        ),
        (
            'upgrade:\n  max_unavailable: "150%"\n',
            "site.yaml:3:20: upgrade.max_unavailable must be a percentage from 1% to 100%, "
            "not '150%'",
        ),
        (
            'upgrade:\n  max_unavailable: "12.5%"\n',
            "site.yaml:3:20: upgrade.max_unavailable must be a host count or a percentage "
            "such as \"25%\", not '12.5%'",
        ),
        (
            "upgrade:\n  max_unavailable: 0\n",
            "site.yaml:3:20: upgrade.max_unavailable must be at least 1 host, not 0",
        ),
        (
            "upgrade:\n  max_unavailable: 2.5\n",
            "site.yaml:3:20: upgrade.max_unavailable must be a host count (1 or more) or a "
            'percentage such as "25%", not the number 2.5',
        ),
        (
            "upgrade:\n  max_unavailable: true\n",
            "site.yaml:3:20: upgrade.max_unavailable must be a host count (1 or more) or a "
            'percentage such as "25%", not the boolean true',
        ),
        (
            "upgrade:\n  failure_budget: -1\n",
            "site.yaml:3:19: upgrade.failure_budget must be at least 0, not -1",
        ),
        (
            "upgrade:\n  canary_failure_budget: one\n",
            "site.yaml:3:26: upgrade.canary_failure_budget must be an integer, "
            "not the string 'one'",
        ),
        (
            "upgrade:\n  soak_seconds: 1.5\n",
            "site.yaml:3:17: upgrade.soak_seconds must be an integer, not the number 1.5",
        ),
        (
            "upgrade:\n  reboot: sometimes\n",
            "site.yaml:3:11: upgrade.reboot must be one of auto, always, never, "
            "not the string 'sometimes'",
        ),
        (
            "upgrade:\n  reboot: off\n",
            "site.yaml:3:11: upgrade.reboot must be one of auto, always, never, "
            "not the boolean off",
        ),
        (
            "upgrade:\n  stages: []\n",
            "site.yaml:3:11: upgrade.stages must name at least one stage",
        ),
        (
            "upgrade:\n  stages: canary\n",
            "site.yaml:3:11: upgrade.stages must be a list, not the string 'canary'",
        ),
        (
            "upgrade:\n  stages: [canary, wave1, canary]\n",
            "site.yaml:3:27: upgrade.stages[2]: 'canary' is listed twice",
        ),
        (
            'upgrade:\n  stages: [canary, "wave 1"]\n',
            "site.yaml:3:20: upgrade.stages[1]: 'wave 1' is not a stage name "
            "(an inventory group name such as wave1)",
        ),
        (
            "upgrade:\n  stages: [canary, 1]\n",
            "site.yaml:3:20: upgrade.stages[1] must be a string, not the number 1",
        ),
        (
            "upgrade:\n  drain: kubectl\n",
            "site.yaml:3:10: upgrade.drain must be a mapping, not the string 'kubectl'",
        ),
        (
            "upgrade:\n  drain: {kind: k8s}\n",
            "site.yaml:3:17: upgrade.drain.kind must be one of none, kubectl, slurm, command, "
            "not the string 'k8s'",
        ),
        (
            "upgrade:\n  drain: {kind: slurm, timeout_seconds: 0}\n",
            "site.yaml:3:41: upgrade.drain.timeout_seconds must be at least 1, not 0",
        ),
        (
            "upgrade:\n  drain: {kind: command, undrain_command: /bin/up}\n",
            "site.yaml:3:11: upgrade.drain.command is needed when the drain kind is command",
        ),
        (
            "upgrade:\n  drain: {kind: kubectl, command: /bin/drain}\n",
            "site.yaml:3:26: upgrade.drain.command is only read when the drain kind is command",
        ),
        (
            "upgrade:\n  drain: {kind: slurm, kubectl_context: prod}\n",
            "site.yaml:3:24: upgrade.drain.kubectl_context is only read when the drain kind "
            "is kubectl",
        ),
        (
            "upgrade:\n  drain: {kind: command, command: '', undrain_command: /bin/up}\n",
            "site.yaml:3:35: upgrade.drain.command must not be empty",
        ),
        (
            "upgrade:\n  drain: {kind: none, timeout: 60}\n",
            "site.yaml:3:23: unknown key 'timeout' in upgrade.drain; did you mean "
            "'timeout_seconds'?",
        ),
        (
            "upgrade:\n  gate: {dcgm_diag_level: 5}\n",
            "site.yaml:3:27: upgrade.gate.dcgm_diag_level must be 1, 2, 3 or 4 (dcgmi diag -r), "
            "not 5",
        ),
        (
            'upgrade:\n  gate: {dcgm_diag_level: "1"}\n',
            "site.yaml:3:27: upgrade.gate.dcgm_diag_level must be an integer, not the string '1'",
        ),
        (
            "upgrade:\n  gate: {wait_for_host_seconds: 0}\n",
            "site.yaml:3:33: upgrade.gate.wait_for_host_seconds must be at least 1, not 0",
        ),
        (
            "upgrade:\n  gate: {command: [a, b]}\n",
            "site.yaml:3:19: upgrade.gate.command must be a single value, not a list",
        ),
        (
            "upgrade:\n  gate: {level: 2}\n",
            "site.yaml:3:10: unknown key 'level' in upgrade.gate",
        ),
        (
            "upgrade:\n  maxUnavailable: 2\n",
            "site.yaml:3:3: unknown key 'maxUnavailable' in upgrade: gpuaudit's spelling is "
            "max_unavailable:",
        ),
        (
            "upgrade:\n  parallel: 2\n",
            "site.yaml:3:3: unknown key 'parallel' in upgrade",
        ),
        (
            "upgrade:\n  canary: [gpu-01]\n",
            "site.yaml:3:3: unknown key 'canary' in upgrade: stages come from the inventory: "
            "list the group names in stages:",
        ),
        (
            "upgrade: [max_parallel]\n",
            "site.yaml:2:10: upgrade must be a mapping, not a list",
        ),
        (
            "rollout: {max_parallel: 2}\n",
            "site.yaml:2:1: unknown key 'rollout' in the policy: the staged upgrade's settings "
            "go under upgrade:",
        ),
    ],
)
def test_mistakes_are_refused_with_their_position(body, expected):
    lines = problems("version: 1\n" + body)
    assert lines[0].startswith(expected), lines
    assert len(lines) == 1, lines


def test_every_mistake_of_a_section_is_listed_at_once():
    lines = problems(
        "version: 1\n"
        "upgrade:\n"
        "  max_parallel: 0\n"
        '  max_unavailable: "lots"\n'
        "  drain: {kind: command}\n"
        "  gate: {dcgm_diag_level: 9}\n"
        "  stages: [canary, canary]\n"
    )
    assert [line.split(": ")[0] for line in lines] == [
        "site.yaml:3:17",
        "site.yaml:4:20",
        "site.yaml:5:11",
        "site.yaml:5:11",
        "site.yaml:6:27",
        "site.yaml:7:20",
    ]
    assert "undrain_command is needed" in lines[3]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: UpgradeSettings(max_parallel=0), "upgrade.max_parallel"),
        (lambda: UpgradeSettings(max_unavailable="30"), "upgrade.max_unavailable"),
        (lambda: UpgradeSettings(max_unavailable=True), "upgrade.max_unavailable"),
        (lambda: UpgradeSettings(failure_budget=-1), "upgrade.failure_budget"),
        (lambda: UpgradeSettings(stages=()), "upgrade.stages"),
        (lambda: UpgradeSettings(stages=("a", "a")), "upgrade.stages"),
        (lambda: UpgradeSettings(reboot="maybe"), "upgrade.reboot"),  # type: ignore[arg-type]
        (lambda: DrainSettings(kind="command", command="x"), "drain.undrain_command"),
        (lambda: DrainSettings(kind="slurm", command="x"), "drain.command"),
        (lambda: DrainSettings(timeout_seconds=0), "drain.timeout_seconds"),
        (lambda: GateSettings(dcgm_diag_level=0), "gate.dcgm_diag_level"),
        (lambda: GateSettings(command=" "), "gate.command"),
    ],
)
def test_settings_built_in_code_are_checked_the_same_way(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()
