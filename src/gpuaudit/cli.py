"""The ``gpuaudit`` command.

gpuaudit audit INVENTORY [--fail-on SEVERITY] [--previous RUN_DIR] [PYINFRA OPTIONS]
                                                 run the audit (pyinfra), write a register
gpuaudit report RUN_DIR [--previous RUN_DIR] [--fail-on SEVERITY]
                                                 rebuild register + page from snapshots
gpuaudit rules                                   list the rule catalogue
gpuaudit explain CODE [RUN_DIR]                  print one rule in full (CODE: GA301 or a
                                                 risk id, GA301:79), and that risk in a run
gpuaudit policy check FILE                       validate a site policy, show its settings
gpuaudit collect-script                          print the collector for hosts audited offline
gpuaudit inspect FILE...                         recognise captured outputs, print their parse
gpuaudit --version                               gpuaudit's and pyinfra's versions

``gpuaudit audit`` runs pyinfra in a process group of its own and stays its controller: when
pyinfra ends without a register (no host connected: pyinfra stops with "No hosts remaining!"
before any operation) or the audit is interrupted (SIGINT, SIGTERM, SIGHUP: pyinfra's whole
group is stopped), a second pyinfra process (gpuaudit.deploy.close_run_main) loads the same
inventory and writes the register of what the run has, every host of the run in it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from gpuaudit import __version__
from gpuaudit.collect import collector_script
from gpuaudit.policy import Policy
from gpuaudit.policy.check import add_policy_parser, load_for_cli
from gpuaudit.report.run import RunDir, RunEnd, check_run_id, new_run_dir, os_error_text

SEVERITIES = ("critical", "high", "medium", "low", "info")
# pyinfra's options that take a value (pyinfra_cli.cli): `gpuaudit audit` passes every option
# it does not know on to pyinfra, and must know these to tell their values from the inventory.
PYINFRA_VALUE_OPTIONS = frozenset(
    {
        "--chdir", "--config", "--data", "--dzdo-user", "--exclude", "--fail-percent",
        "--group-data", "--key", "--key-password", "--limit", "--parallel", "--password",
        "--port", "--retry", "--retry-delay", "--shell-executable", "--ssh-key",
        "--ssh-key-password", "--ssh-password", "--ssh-port", "--ssh-user", "--su-user",
        "--sudo-user", "--user",
    }
)  # fmt: skip
_NO_COLLECTION = "pyinfra would stop before the collection, and the audit would have no data"
_NO_TERMINAL = (
    "gpuaudit audit runs pyinfra without a terminal to ask on; give the password in the "
    "inventory (ssh_password, _sudo_password host data) or run plain pyinfra"
)
# pyinfra options an audit cannot honour, and why.
REFUSED_PYINFRA_OPTIONS = {
    "--dry": "an audit changes nothing on the hosts; under --dry " + _NO_COLLECTION,
    "--debug-facts": _NO_COLLECTION,
    "--debug-operations": _NO_COLLECTION,
    "--support": "pyinfra --support prints pyinfra's own report",
    "--version": "gpuaudit --version prints gpuaudit's and pyinfra's versions",
    "--ssh-password-prompt": _NO_TERMINAL,
    "--use-sudo-password": _NO_TERMINAL,
}
AUDIT_OPERATION = "gpuaudit.deploy.audit"
# The second pyinfra process: pyinfra_cli first, since importing it patches the interpreter
# for gevent, as the pyinfra command does before anything else.
_CLOSE_RUN = (
    "import pyinfra_cli, sys\n"
    "from gpuaudit.deploy import close_run_main\n"
    "sys.exit(close_run_main(sys.argv[1:]))\n"
)
# Seconds pyinfra gets to end after SIGTERM before its group is killed; and the second process
# for a run that was interrupted (it connects nothing) or ended (it connects once more).
_STOP_GRACE_S = 5
# pyinfra's exit status for a command line it does not take (click's usage error).
_PYINFRA_USAGE = 2
_CLOSE_TIMEOUT_S = {True: 120, False: 900}
_TOP_RISKS = 5


def _open_at_or_above(register: dict, threshold: str) -> int:
    # Open risks only: a waived risk is a decision already taken, not a reason to fail CI.
    from gpuaudit.report.register import open_risks_at_or_above

    return len(open_risks_at_or_above(register, threshold))


class _Stopped(Exception):
    """SIGINT, SIGTERM or SIGHUP reached `gpuaudit audit`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn the first SIGINT, SIGTERM or SIGHUP into :class:`_Stopped`; later ones are ignored
    while the audit stops pyinfra and writes what it has (that takes seconds, and is bounded).
    SIGHUP too: pyinfra has a session of its own, so a closed terminal reaches only this
    process, which must not leave pyinfra running without it."""
    caught: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if not caught:
            caught.append(signum)
            raise _Stopped(signum)

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, stop) for s in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run_pyinfra(command: list[str], env: Mapping[str, str], timeout: float | None = None) -> int:
    """Run a pyinfra process in a session (so a process group) of its own, with no terminal
    to prompt on; return its exit status. :class:`_Stopped` or a timeout stops its whole group
    first: SIGTERM, then SIGKILL for whatever is left after a grace period."""
    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return child.wait(timeout)
    except (_Stopped, subprocess.TimeoutExpired):
        with suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            child.wait(_STOP_GRACE_S)
        with suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # the leader's group outlives the leader
        child.wait()
        raise


@dataclass(frozen=True)
class AuditRun:
    """One `gpuaudit audit`: its run directory, pyinfra's command line, its environment."""

    run: RunDir
    pyinfra_argv: list[str]
    env: dict[str, str]

    def audit(self) -> RunEnd | None:
        """Run the audit; how it ended when pyinfra wrote no register (None: it did)."""
        status = _run_pyinfra([sys.executable, "-m", "pyinfra", *self.pyinfra_argv], self.env)
        return None if self.run.register_path.exists() else RunEnd(exit_status=status)

    def close(self, end: RunEnd) -> None:
        """Write the register of a run pyinfra ended early: the second pyinfra process, and
        where that fails, a register of the snapshots alone."""
        from gpuaudit.report.run import rebuild

        if end.exit_status == _PYINFRA_USAGE:
            return  # pyinfra said what it refused; the run never started
        command = [sys.executable, "-c", _CLOSE_RUN, end.to_arg(), *self.pyinfra_argv]
        with suppress(subprocess.TimeoutExpired):
            _run_pyinfra(command, self.env, _CLOSE_TIMEOUT_S[end.signal is not None])
        if not self.run.register_path.exists() and self.run.snapshot_files():
            with suppress(ValueError, OSError):  # said once, by the caller: no register
                rebuild(self.run, previous=self.env.get("GPUAUDIT_PREVIOUS"))


def _pyinfra_argv(args: argparse.Namespace) -> list[str]:
    limits = [f"--limit={pattern}" for pattern in args.limit or ()]
    return ["-y", *args.pyinfra, *limits, args.inventory, AUDIT_OPERATION]


def cmd_audit(args: argparse.Namespace) -> int:
    refused = [o.partition("=")[0] for o in args.pyinfra]
    refused = [name for name in refused if name in REFUSED_PYINFRA_OPTIONS]
    for name in refused:
        print(
            f"gpuaudit: {name} is not for an audit: {REFUSED_PYINFRA_OPTIONS[name]}",
            file=sys.stderr,
        )
    if refused:
        return 2
    if args.previous and not (Path(args.previous) / "hosts").is_dir():
        print(f"gpuaudit: --previous {args.previous} is not a gpuaudit run", file=sys.stderr)
        return 2
    policy = args.policy or os.environ.get("GPUAUDIT_POLICY")
    if policy and load_for_cli(policy) is None:
        return 2  # checked before any host is contacted; the deploy loads it again
    try:
        run = new_run_dir(args.reports_dir, args.run_id)
    except OSError as error:
        print(f"gpuaudit: cannot make a run directory: {os_error_text(error)}", file=sys.stderr)
        return 2
    env = dict(os.environ, GPUAUDIT_RUN_DIR=str(run.path.resolve()))
    if policy:
        env["GPUAUDIT_POLICY"] = str(Path(policy).resolve())
    # The deploy writes the register: it reads the trends baseline and junit threshold here.
    if args.previous:
        env["GPUAUDIT_PREVIOUS"] = str(Path(args.previous).resolve())
    if args.fail_on:
        env["GPUAUDIT_FAIL_ON"] = args.fail_on
    audit = AuditRun(run, _pyinfra_argv(args), env)
    with _stop_on_signals():
        try:
            end = audit.audit()
        except _Stopped as stop:
            end = RunEnd(signal=str(stop))
        if end is not None:
            audit.close(end)
    return _audit_result(run, end, args.fail_on)


def _audit_result(run: RunDir, end: RunEnd | None, fail_on: str | None) -> int:
    """Say how the audit went and give its exit status.

    pyinfra exits 1 whenever a host failed; for an audit that is a finding, so the status comes
    from the register: 0, or 1 where no host could be audited or --fail-on risks are open;
    2 when there is no register; 128 + the signal after an interruption.
    """
    from gpuaudit.model.snapshot import HostStatus
    from gpuaudit.rules.audit import NOT_COLLECTED

    interrupted = 128 + signal.Signals[end.signal] if end and end.signal else None
    if not run.register_path.exists():
        removed = run.discard_if_empty()
        said = f"{end}, " if end else ""
        where = (
            "nothing was collected, so the run directory was removed"
            if removed
            else f"what was collected is in {run.hosts_dir.resolve()}"
        )
        print(f"gpuaudit: no register was written ({said}see above); {where}", file=sys.stderr)
        return interrupted or 2
    register = json.loads(run.register_path.read_text(encoding="utf-8"))
    print_summary(register, run)
    hosts = register.get("hosts") or []
    if interrupted:
        not_audited = sum(1 for h in hosts if h.get("status") == HostStatus.NOT_AUDITED.value)
        print(
            f"gpuaudit: {end}: the register holds what was collected, {not_audited} of "
            f"{_count(len(hosts), 'host')} not audited; rebuild it with: "
            f"gpuaudit report {run.path.resolve()}",
            file=sys.stderr,
        )
        return interrupted
    if hosts and all(HostStatus(h["status"]) in NOT_COLLECTED for h in hosts):
        print(f"gpuaudit: no host could be audited ({_count(len(hosts), 'host')})", file=sys.stderr)
        return 1
    return _gate(register, fail_on)


def _gate(register: dict[str, Any], fail_on: str | None) -> int:
    """1 while open risks at ``fail_on`` or above remain (``--fail-on``), else 0."""
    count = _open_at_or_above(register, fail_on) if fail_on else 0
    if count:
        print(f"gpuaudit: {count} risks at {fail_on} or above", file=sys.stderr)
        return 1
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _printable(text: Any) -> str:
    """Text for the terminal: control characters (escape sequences from host names or host
    output) are shown as '?', never sent."""
    return "".join("?" if unicodedata.category(c).startswith("C") else c for c in str(text))


def print_summary(register: Mapping[str, Any], run: RunDir) -> None:
    """A few lines for the terminal: hosts by status, open risks by severity, the top risks,
    and where the page and the register are."""
    summary = register.get("summary") or {}
    statuses = [f"{n} {s}" for s, n in (summary.get("hosts_by_status") or {}).items() if n]
    hosts = _count(int(summary.get("host_count") or 0), "host")
    print(_printable(f"gpuaudit: {hosts}: {', '.join(statuses) or 'none'}"))
    risks = summary.get("risks_by_status") or {}
    line = f"gpuaudit: {_count(int(risks.get('open') or 0), 'open risk')}"
    severities = [f"{n} {s}" for s, n in (summary.get("open_risks_by_severity") or {}).items() if n]
    if severities:
        line += ": " + ", ".join(severities)
    if risks.get("waived"):
        line += f" ({risks['waived']} waived)"
    print(line)
    from gpuaudit.report.register import is_open_risk  # info risks inform: not listed here

    top = [r for r in register.get("risks") or () if is_open_risk(r)][:_TOP_RISKS]
    for risk in top:
        where = _count(len(risk.get("affected_hosts") or ()), "host")
        line = f"  {risk.get('severity', ''):<8}  {risk.get('id', '')}  {risk.get('title', '')}"
        print(_printable(f"{line} ({where})"))
    print(f"gpuaudit report: {run.html_path.resolve()}")
    print(f"gpuaudit register: {run.register_path.resolve()}")


def _report_from_bundles(args: argparse.Namespace, policy: Policy | None) -> Path:
    from gpuaudit.offline import snapshots_from_bundles
    from gpuaudit.report.provenance import bundle_scope, record_provenance
    from gpuaudit.report.run import new_run_dir

    snapshots = snapshots_from_bundles(Path(p) for p in args.bundle)
    run = new_run_dir(args.reports_dir, args.run_id)
    for snapshot in snapshots:
        run.write_snapshot(snapshot)
    if policy is not None:
        policy.copy_to(run.path)
    record_provenance(run.path, bundle_scope(args.bundle), policy)
    return run.write_report(
        run.load_snapshots(), previous=args.previous, policy=policy, fail_on=args.fail_on
    )


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
            index = rebuild(
                Path(args.run_dir), previous=args.previous, policy=policy, fail_on=args.fail_on
            )
    except FileNotFoundError as error:
        print(f"gpuaudit: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a read-only or full reports directory
        print(f"gpuaudit: cannot write the report: {os_error_text(error)}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"gpuaudit: {error}", file=sys.stderr)
        return 2
    run = RunDir(index.parent)
    register = json.loads(run.register_path.read_text(encoding="utf-8"))
    print_summary(register, run)
    return _gate(register, args.fail_on)


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
    """One rule in full, as `gpuaudit explain` prints it; None when no rule has the code.

    ``code`` is a rule code (GA301) or a risk id as the register and its page show it: the
    rule code, ':' and what tells that rule's risks apart (GA301:79, an XID code)."""
    from gpuaudit.rules import all_rules

    rule_code = code.strip().partition(":")[0].upper()
    found = next((r for r in all_rules() if r.code == rule_code), None)
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


_LISTED_FINDINGS = 20


def risk_text(register: Mapping[str, Any], code: str) -> str | None:
    """The risks of a register that ``code`` names (a risk id, or a rule code: all of that
    rule's risks), with their findings; None when the register has none of them."""
    rule_code, colon, key = code.strip().partition(":")
    wanted = rule_code.upper() + colon + key
    risks = [
        r
        for r in register.get("risks") or ()
        if (r.get("id") == wanted if colon else r.get("rule") == wanted)
    ]
    if not risks:
        return None
    findings = register.get("findings") or []
    lines = []
    for risk in risks:
        hosts = risk.get("affected_hosts") or []
        indices = risk.get("findings") or []
        lines += [
            "",
            f"risk {risk.get('id')} in run {register.get('run_id')}: {risk.get('status')}, "
            f"{risk.get('severity')}, score {risk.get('score')}, "
            f"{_count(len(indices), 'finding')} on {_count(len(hosts), 'host')}",
        ]
        waiver = risk.get("waiver")
        if isinstance(waiver, Mapping):
            lines.append(f"  waiver: {waiver.get('reason')} (expires {waiver.get('expires')})")
        for index in indices[:_LISTED_FINDINGS]:
            finding = findings[index] if 0 <= index < len(findings) else {}
            gpu = finding.get("gpu")
            where = f"{finding.get('host')}" + (f" GPU {gpu}" if gpu is not None else "")
            lines.append(f"  - {where}: {finding.get('message')}")
        if len(indices) > _LISTED_FINDINGS:
            lines.append(f"  … and {len(indices) - _LISTED_FINDINGS} more (register.json)")
    return "\n".join(_printable(line) for line in lines) + "\n"


def cmd_explain(args: argparse.Namespace) -> int:
    text = explain_text(args.code)
    if text is None:
        rule_code = args.code.partition(":")[0]
        print(f"gpuaudit: no rule {rule_code!r} (gpuaudit rules lists them)", file=sys.stderr)
        return 2
    register: dict[str, Any] | None = None
    if args.run_dir:
        try:
            register = json.loads(RunDir(args.run_dir).register_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            print(f"gpuaudit: {args.run_dir} has no readable register: {error}", file=sys.stderr)
            return 2
    sys.stdout.write(text)
    if register is None:
        return 0
    risks = risk_text(register, args.code)
    if risks is None:
        print(f"gpuaudit: no risk {args.code!r} in {args.run_dir}", file=sys.stderr)
        return 1
    sys.stdout.write(risks)
    return 0


def cmd_collect_script(args: argparse.Namespace) -> int:
    sys.stdout.write(collector_script())
    return 0


def _versions() -> str:
    try:
        pyinfra = metadata.version("pyinfra")  # from the installed metadata: no import
    except metadata.PackageNotFoundError:
        pyinfra = "not installed"
    return f"gpuaudit {__version__}\npyinfra {pyinfra}"


def _run_id(value: str) -> str:
    try:
        return check_run_id(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_run_options(parser: argparse.ArgumentParser, what: str) -> None:
    """--reports-dir and --run-id, whose defaults are GPUAUDIT_REPORTS_DIR and GPUAUDIT_RUN_ID
    (as for plain pyinfra)."""
    parser.add_argument(
        "--reports-dir",
        default=os.environ.get("GPUAUDIT_REPORTS_DIR") or "reports",
        help=f"where {what} go (default: $GPUAUDIT_REPORTS_DIR, else reports)",
    )
    parser.add_argument(
        "--run-id",
        type=_run_id,
        default=os.environ.get("GPUAUDIT_RUN_ID") or None,
        help="the run directory's name (default: $GPUAUDIT_RUN_ID, else the time)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuaudit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=_versions())
    sub = parser.add_subparsers(dest="command", required=True)

    audit = sub.add_parser(
        "audit",
        help="audit the hosts of a pyinfra inventory",
        description="Audit the hosts of a pyinfra inventory. Options gpuaudit does not know "
        "(--sudo, --parallel N, --ssh-user USER, --data KEY=VALUE …) are pyinfra's: they are "
        "passed on to it.",
        allow_abbrev=False,  # a prefix of one of pyinfra's options is pyinfra's
    )
    audit.add_argument("inventory", help="pyinfra inventory, e.g. inventory/prod.py")
    _add_run_options(audit, "runs")
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
    _add_run_options(report, "--bundle runs")
    report.add_argument("--previous", metavar="RUN_DIR", default=None,
                        help="run to compare with (default: the newest earlier run)")  # fmt: skip
    report.add_argument("--policy", metavar="FILE", default=None,
                        help="site policy (default: the run's policy.yaml, if any)")  # fmt: skip
    report.add_argument("--fail-on", choices=SEVERITIES, default=None,
                        help="exit 1 when risks at this severity or above are open")  # fmt: skip
    report.set_defaults(func=cmd_report)

    rules = sub.add_parser("rules", help="list the rule catalogue")
    rules.add_argument("--markdown", action="store_true", help="full catalogue as Markdown")
    rules.set_defaults(func=cmd_rules)

    explain = sub.add_parser("explain", help="print one rule in full (e.g. gpuaudit explain GA301)")
    explain.add_argument("code", help="rule code or risk id, e.g. GA301 or GA301:79")
    explain.add_argument("run_dir", nargs="?", metavar="RUN_DIR",
                         help="also show that risk (for a rule code: its risks) there")  # fmt: skip
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
    upgrade.add_argument(
        "--reports-dir", default=os.environ.get("GPUAUDIT_REPORTS_DIR") or "reports"
    )
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line as the commands read it. ``gpuaudit audit`` keeps the options it does
    not know, in their order, as ``pyinfra`` (each value joined to its option, ``--opt=value``,
    so that it is never taken for the inventory); any other command refuses them."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["audit"]:
        argv = _join_pyinfra_values(argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command != "audit":
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.pyinfra = unknown
    return args


def _join_pyinfra_values(argv: list[str]) -> list[str]:
    joined: list[str] = []
    values = iter(argv)
    for arg in values:
        value = next(values, None) if arg in PYINFRA_VALUE_OPTIONS else None
        joined.append(arg if value is None else f"{arg}={value}")
    return joined


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
