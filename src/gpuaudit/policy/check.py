"""``gpuaudit policy check FILE``: validate a policy and show what it means for each group.

Meant for the CI of the repository that holds a site's policy: exit 2 lists every problem as
file:line:col; otherwise the effective settings of the defaults and of each group (only what
differs from gpuaudit's built-in defaults, so a review sees the site's decisions), the
severity overrides, the upgrade settings where the policy sets any, and the waivers with
their state today.
"""

from __future__ import annotations

import argparse
import sys
from datetime import date
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuaudit.policy.model import Policy

__all__ = ["add_policy_parser", "describe_policy", "load_for_cli"]


# The policy modules and YAML are imported by the functions that use them: `gpuaudit` adds this
# command's parser on every start, and most commands read no policy.


def load_for_cli(path: str) -> Policy | None:
    """The policy at ``path``, or None after printing why it cannot be used."""
    from gpuaudit.policy.loader import load_policy
    from gpuaudit.policy.nodes import PolicyError

    try:
        return load_policy(path)
    except PolicyError as error:
        print(f"gpuaudit: invalid policy:\n{error}", file=sys.stderr)
        return None


def _changed(settings: dict[str, Any]) -> dict[str, Any]:
    from gpuaudit.policy.defaults import DEFAULT_POLICY

    return {
        key: value
        for key, value in settings.items()
        if key != "mig_configs" and value != DEFAULT_POLICY.get(key)
    }


def describe_policy(policy: Policy, on: date) -> str:
    """The policy's effective settings per group, overrides and waivers, as YAML."""
    import yaml

    from gpuaudit.policy.upgrade import UpgradeSettings

    view: dict[str, Any] = {
        "defaults": _changed(policy.settings_for({})),
        "groups": {
            name: _changed(policy.settings_for({"groups": [name]})) for name, _ in policy.groups
        },
    }
    if policy.mig_configs:
        view["mig-configs"] = sorted(policy.mig_configs)
    overrides = {
        code: f"{o.severity.value}: {o.reason}" for code, o in policy.rule_overrides.items()
    }
    overrides.update(
        {
            f"XID {code}": f"{o.severity.value}: {o.reason}"
            for code, o in policy.xid_overrides.items()
        }
    )
    if overrides:
        view["severity_overrides"] = overrides
    if policy.upgrade != UpgradeSettings():
        view["upgrade"] = policy.upgrade.to_dict()
    if policy.waivers:
        view["waivers"] = [
            {
                "rule": w.rule,
                "hosts": list(w.hosts),
                **({"gpu": list(w.gpus)} if w.gpus is not None else {}),
                "owner": w.owner,
                "state": f"expired on {w.expires}" if w.expired(on) else f"until {w.expires}",
                "reason": w.reason,
            }
            for w in policy.waivers
        ]
    header = (
        f"# {policy.source}: valid policy (version {policy.version}); settings that differ "
        "from gpuaudit's defaults,\n# per group as defaults + that group (a host in several "
        "groups gets them in file order, then its inventory data)\n"
    )
    return header + yaml.safe_dump(view, sort_keys=False, allow_unicode=True, width=100)


def _cmd_check(args: argparse.Namespace) -> int:
    policy = load_for_cli(args.file)
    if policy is None:
        return 2
    today = date.today()
    sys.stdout.write(describe_policy(policy, today))
    expired = policy.expired_waivers(today)
    if expired and args.fail_on_expired:
        print(f"gpuaudit: {len(expired)} waiver(s) expired", file=sys.stderr)
        return 1
    return 0


def add_policy_parser(sub: Any) -> None:
    """Add ``policy check`` to the gpuaudit command's subcommands."""
    policy = sub.add_parser("policy", help="work with site policy files")
    actions = policy.add_subparsers(dest="policy_command", required=True)
    check = actions.add_parser("check", help="validate a policy, print its effective settings")
    check.add_argument("file", help="policy YAML file, e.g. policies/example.yaml")
    check.add_argument(
        "--fail-on-expired", action="store_true", help="exit 1 when a waiver has expired"
    )
    check.set_defaults(func=_cmd_check)
