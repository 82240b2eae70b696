"""The ``gpuaudit`` command.

gpuaudit audit INVENTORY [--fail-on SEVERITY] [--previous RUN_DIR]
                                                 run the audit (pyinfra), write a register
gpuaudit report RUN_DIR [--previous RUN_DIR]     rebuild register + page from snapshots
gpuaudit rules                                   list the rule catalogue
gpuaudit explain CODE                            print one rule in full
gpuaudit policy check FILE                       validate a site policy, show its settings
gpuaudit collect-script                          print the collector for hosts audited offline
gpuaudit inspect FILE...                         recognise captured outputs, print their parse
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuaudit.collect import collector_script
from gpuaudit.policy import Policy
from gpuaudit.policy.check import add_policy_parser, load_for_cli

SEVERITIES = ("critical", "high", "medium", "low", "info")


def _open_at_or_above(register: dict, threshold: str) -> int:
    # Open risks only: a waived risk is a decision already taken, not a reason to fail CI.
    from gpuaudit.report.register import open_risks_at_or_above

    return len(open_risks_at_or_above(register, threshold))


def cmd_audit(args: argparse.Namespace) -> int:
    from gpuaudit.report.run import new_run_dir

    if args.previous and not (Path(args.previous) / "hosts").is_dir():
        print(f"gpuaudit: --previous {args.previous} is not a gpuaudit run", file=sys.stderr)
        return 2
    if args.policy and load_for_cli(args.policy) is None:
        return 2  # checked before any host is contacted; the deploy loads it again
    run = new_run_dir(args.reports_dir, args.run_id)
    env = dict(os.environ, GPUAUDIT_RUN_DIR=str(Path(run.path).resolve()))
    if args.policy:
        env["GPUAUDIT_POLICY"] = str(Path(args.policy).resolve())
    # The deploy writes the register: it reads the trends baseline and junit threshold here.
    if args.previous:
        env["GPUAUDIT_PREVIOUS"] = str(Path(args.previous).resolve())
    if args.fail_on:
        env["GPUAUDIT_FAIL_ON"] = args.fail_on
    command = [sys.executable, "-m", "pyinfra", "-y", args.inventory]
    for pattern in args.limit or ():
        command += ["--limit", pattern]
    command.append("gpuaudit.deploy.audit")
    # pyinfra exits 1 whenever a host failed; for an audit that is a finding, so the exit status
    # here comes from the register (and --fail-on), not from pyinfra.
    pyinfra = subprocess.run(command, env=env, check=False)
    register_path = Path(run.register_path)
    if not register_path.exists():
        print(
            f"gpuaudit: no register was written (pyinfra exit {pyinfra.returncode})",
            file=sys.stderr,
        )
        return 2
    register = json.loads(register_path.read_text(encoding="utf-8"))
    print(f"gpuaudit report: {register_path.parent / 'index.html'}")
    print(f"gpuaudit register: {register_path}")
    if args.fail_on:
        count = _open_at_or_above(register, args.fail_on)
        if count:
            print(f"gpuaudit: {count} risks at {args.fail_on} or above", file=sys.stderr)
            return 1
    return 0


def _report_from_bundles(args: argparse.Namespace, policy: Policy | None) -> Path:
    from gpuaudit.offline import snapshots_from_bundles
    from gpuaudit.report.run import new_run_dir

    snapshots = snapshots_from_bundles(Path(p) for p in args.bundle)
    run = new_run_dir(args.reports_dir, args.run_id)
    for snapshot in snapshots:
        run.write_snapshot(snapshot)
    if policy is not None:
        policy.copy_to(run.path)
    return run.write_report(run.load_snapshots(), previous=args.previous, policy=policy)


def cmd_report(args: argparse.Namespace) -> int:
    from gpuaudit.report.run import rebuild

    if bool(args.bundle) == bool(args.run_dir):
        print("gpuaudit: give either a run directory or --bundle FILE...", file=sys.stderr)
        return 2
    policy = load_for_cli(args.policy) if args.policy else None
    if args.policy and policy is None:
        return 2
    try:
        if args.bundle:
            index = _report_from_bundles(args, policy)
        else:
            # The run keeps the policy its register was judged by: a new one replaces the copy.
            if policy is not None and Path(args.run_dir, "hosts").is_dir():
                policy.copy_to(args.run_dir)
            index = rebuild(Path(args.run_dir), previous=args.previous, policy=policy)
    except (FileNotFoundError, ValueError) as error:
        print(f"gpuaudit: {error}", file=sys.stderr)
        return 2
    print(f"gpuaudit report: {index}")
    return 0


def rules_markdown() -> str:
    """The rule catalogue as Markdown (docs/rules.md is this text)."""
    from gpuaudit.rules import all_rules

    rules = all_rules()
    lines = [
        "# gpuaudit rules",
        "",
        "Generated by `gpuaudit rules --markdown`; codes are stable and never reused.",
        "",
        "| code | title | category | owner | severity | likelihood × impact |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| [{r.code}](#{r.code.lower()}) | {r.title} | {r.category} | {r.owner.value} "
        f"| {r.severity.value} | {r.likelihood} × {r.impact} |"
        for r in rules
    ]
    for r in rules:
        lines += ["", f"## {r.code}", "", f"**{r.title}**", "", r.doc, ""]
        lines.append(f"Remediation: {r.remediation}")
        if r.operation:
            lines += ["", f"Operation: `{r.operation}`"]
        lines += ["", "References:", "", *(f"- {_markdown_reference(ref)}" for ref in r.references)]
    return "\n".join(lines) + "\n"


def _markdown_reference(ref: str) -> str:
    """A reference as docs/rules.md lists it: a docs path becomes a link relative to docs/."""
    from gpuaudit.report.references import DOCS_PREFIX, docs_page

    if docs_page(ref) is None:
        return ref
    return f"[{ref}]({ref.removeprefix(DOCS_PREFIX)})"


def cmd_rules(args: argparse.Namespace) -> int:
    from gpuaudit.rules import all_rules

    if args.markdown:
        sys.stdout.write(rules_markdown())
        return 0
    for rule in all_rules():
        print(f"{rule.code}  {rule.severity.value:<8}  {rule.owner.value:<14}  {rule.title}")
    return 0


def explain_text(code: str) -> str | None:
    """One rule in full, as `gpuaudit explain` prints it; None when no rule has the code."""
    from gpuaudit.rules import all_rules

    found = next((r for r in all_rules() if r.code == code.strip().upper()), None)
    if found is None:
        return None
    lines = [
        f"{found.code}  {found.title}",
        "",
        f"category:   {found.category}",
        f"owner:      {found.owner.value}",
        f"severity:   {found.severity.value}",
        f"risk:       likelihood {found.likelihood} × impact {found.impact} = "
        f"{found.likelihood * found.impact}",
        f"operation:  {found.operation or '(none: fixed by hand, see remediation)'}",
        "",
        found.doc,
        "",
        f"Remediation: {found.remediation}",
        "",
        "References:",
        *(f"  - {ref}" for ref in found.references),
    ]
    return "\n".join(lines) + "\n"


def cmd_explain(args: argparse.Namespace) -> int:
    text = explain_text(args.code)
    if text is None:
        print(f"gpuaudit: no rule {args.code!r} (gpuaudit rules lists them)", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


def cmd_collect_script(args: argparse.Namespace) -> int:
    sys.stdout.write(collector_script())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuaudit", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    audit = sub.add_parser("audit", help="audit the hosts of a pyinfra inventory")
    audit.add_argument("inventory", help="pyinfra inventory, e.g. inventory/prod.py")
    audit.add_argument("--reports-dir", default="reports")
    audit.add_argument("--run-id", default=None)
    audit.add_argument("--fail-on", choices=SEVERITIES, default=None,
                       help="exit 1 when risks at this severity or above are open")  # fmt: skip
    audit.add_argument("--limit", action="append", metavar="PATTERN",
                       help="audit only matching hosts or groups (pyinfra --limit)")  # fmt: skip
    audit.add_argument("--previous", metavar="RUN_DIR", default=None,
                       help="run to compare with (default: the newest earlier run)")  # fmt: skip
    audit.add_argument("--policy", metavar="FILE", default=None,
                       help="site policy (YAML, see gpuaudit.policy); kept in the run")  # fmt: skip
    audit.set_defaults(func=cmd_audit)

    report = sub.add_parser(
        "report", help="rebuild a run's register from its snapshots, or build one from bundles"
    )
    report.add_argument("run_dir", nargs="?", help="a run directory (reports/<run-id>)")
    report.add_argument(
        "--bundle",
        nargs="+",
        metavar="FILE",
        help="collector outputs (sh collect.sh > HOST.bundle) for a new run",
    )
    report.add_argument("--reports-dir", default="reports", help="where --bundle runs go")
    report.add_argument("--run-id", default=None, help="run id for --bundle runs")
    report.add_argument("--previous", metavar="RUN_DIR", default=None,
                        help="run to compare with (default: the newest earlier run)")  # fmt: skip
    report.add_argument("--policy", metavar="FILE", default=None,
                        help="site policy (default: the run's policy.yaml, if any)")  # fmt: skip
    report.set_defaults(func=cmd_report)

    rules = sub.add_parser("rules", help="list the rule catalogue")
    rules.add_argument("--markdown", action="store_true", help="full catalogue as Markdown")
    rules.set_defaults(func=cmd_rules)

    explain = sub.add_parser("explain", help="print one rule in full (e.g. gpuaudit explain GA301)")
    explain.add_argument("code", help="rule code, e.g. GA301")
    explain.set_defaults(func=cmd_explain)

    script = sub.add_parser("collect-script", help="print the collector shell script")
    script.set_defaults(func=cmd_collect_script)

    add_policy_parser(sub)
    add_upgrade_parser(sub)

    inspect = sub.add_parser(
        "inspect", help="recognise captured tool outputs and print what gpuaudit reads in them"
    )
    inspect.add_argument("files", nargs="+", metavar="FILE")
    inspect.set_defaults(func=cmd_inspect)
    return parser


def add_upgrade_parser(sub: argparse._SubParsersAction) -> None:
    upgrade = sub.add_parser(
        "upgrade", help="staged driver upgrade: canary, waves, health gates, halt and rollback"
    )
    upgrade.add_argument("inventory", help="pyinfra inventory, e.g. inventory/prod.py")
    upgrade.add_argument("--to", required=True, metavar="VERSION", help="driver version")
    upgrade.add_argument("--policy", metavar="FILE", default=None,
                         help="site policy; its upgrade: section sets the limits")  # fmt: skip
    upgrade.add_argument("--dry", action="store_true",
                         help="print the plan and change nothing")  # fmt: skip
    upgrade.add_argument("--resume", metavar="RUN_DIR", default=None,
                         help="carry on a rollout (reports/upgrades/<rollout-id>)")  # fmt: skip
    upgrade.add_argument("--limit", action="append", metavar="PATTERN", default=[],
                         help="only matching hosts or groups (pyinfra --limit)")  # fmt: skip
    upgrade.add_argument("--reports-dir", default="reports")
    upgrade.add_argument("--rollout-id", default=None)
    upgrade.set_defaults(func=cmd_upgrade)


def cmd_upgrade(args: argparse.Namespace) -> int:
    from gpuaudit.policy import PolicyError
    from gpuaudit.upgrade.runner import Options, upgrade

    options = Options(
        inventory=args.inventory,
        target=args.to,
        policy=args.policy,
        dry=args.dry,
        resume=Path(args.resume) if args.resume else None,
        limit=tuple(args.limit),
        reports_dir=Path(args.reports_dir),
        rollout_id=args.rollout_id,
    )
    try:
        return upgrade(options)
    except (PolicyError, ValueError, RuntimeError) as exc:
        print(f"gpuaudit upgrade: {exc}", file=sys.stderr)
        return 2


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print a JSON list, one entry per file; exit 1 when some file was not recognised."""
    from gpuaudit.inspect import inspect_file

    results = [inspect_file(path) for path in args.files]
    print(json.dumps(results, indent=1))
    return 1 if any("error" in result for result in results) else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
