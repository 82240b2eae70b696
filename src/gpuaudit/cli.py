"""The ``gpuaudit`` command.

gpuaudit audit INVENTORY [--fail-on SEVERITY]   run the audit (pyinfra), write a register
gpuaudit report RUN_DIR                          rebuild register + page from snapshots
gpuaudit rules                                   list the rule catalogue
gpuaudit collect-script                          print the collector for hosts audited offline
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

SEVERITIES = ("critical", "high", "medium", "low", "info")


def _open_at_or_above(register: dict, threshold: str) -> int:
    allowed = SEVERITIES[: SEVERITIES.index(threshold) + 1]
    return sum(1 for f in register.get("findings", []) if f.get("severity") in allowed)


def cmd_audit(args: argparse.Namespace) -> int:
    from gpuaudit.report.run import new_run_dir

    run = new_run_dir(args.reports_dir, args.run_id)
    env = dict(os.environ, GPUAUDIT_RUN_DIR=str(Path(run.path).resolve()))
    command = [sys.executable, "-m", "pyinfra", "-y", args.inventory]
    command += [*args.pyinfra_args, "gpuaudit.deploy.audit"]
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


def cmd_report(args: argparse.Namespace) -> int:
    from gpuaudit.report.run import rebuild

    try:
        index = rebuild(Path(args.run_dir))
    except FileNotFoundError as error:
        print(f"gpuaudit: {error}", file=sys.stderr)
        return 2
    print(f"gpuaudit report: {index}")
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    from gpuaudit.rules import all_rules

    for rule in all_rules():
        print(f"{rule.code}  {rule.severity.value:<8}  {rule.owner.value:<14}  {rule.title}")
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
    audit.add_argument("pyinfra_args", nargs="*", help="extra pyinfra arguments after --")
    audit.set_defaults(func=cmd_audit)

    report = sub.add_parser("report", help="rebuild a run's register from its snapshots")
    report.add_argument("run_dir")
    report.set_defaults(func=cmd_report)

    rules = sub.add_parser("rules", help="list the rule catalogue")
    rules.set_defaults(func=cmd_rules)

    script = sub.add_parser("collect-script", help="print the collector shell script")
    script.set_defaults(func=cmd_collect_script)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
