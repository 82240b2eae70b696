"""The ``gpuaudit`` command.

gpuaudit audit INVENTORY [--fail-on SEVERITY] [--previous RUN_DIR] [PYINFRA OPTIONS]
               [--kube-nodes FILE | --kubeconfig PATH --kube-context NAME]
                                                 run the audit (pyinfra), write a register
gpuaudit report RUN_DIR [--previous RUN_DIR] [--fail-on SEVERITY] [--kube-nodes FILE]
                                                 rebuild register + page from snapshots
gpuaudit rules                                   list the rule catalogue
gpuaudit explain CODE [RUN_DIR]                  print one rule in full (CODE: GA301 or a
                                                 risk id, GA301:79), and that risk in a run
gpuaudit policy check FILE                       validate a site policy, show its settings
gpuaudit alerts [--policy FILE] [--format rules|prometheusrule]
                                                 Prometheus alert rules from the policy
gpuaudit collect-script                          print the collector for hosts audited offline
gpuaudit collect-job slurm --bundle-dir DIR      print an sbatch job: a collector per node
gpuaudit report --bundle-dir DIR                 build a run from a directory of bundles
gpuaudit inspect FILE...                         recognise captured outputs, print their parse
gpuaudit --version                               gpuaudit's and pyinfra's versions

``gpuaudit audit`` is run by :mod:`gpuaudit.audit_run`, which stays pyinfra's controller.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaudit import __version__
from gpuaudit.audit_run import PYINFRA_VALUE_OPTIONS, SEVERITIES, cmd_audit
from gpuaudit.collect import collector_script
from gpuaudit.policy.check import add_policy_parser, load_for_cli
from gpuaudit.report.alerts import add_alerts_parser
from gpuaudit.report.provenance import pyinfra_version
from gpuaudit.report.run import RunDir, check_run_id, new_run_dir, os_error_text
from gpuaudit.report.verdict import AuditVerdict, count_of, printable

if TYPE_CHECKING:
    from gpuaudit.policy import Policy
    from gpuaudit.report.register_types import Register

# The rules, the renderers and the parsers are imported by the commands that use them: `gpuaudit
# audit` only starts pyinfra and reads the register's summary, and starts in a fraction of the
# time.


def _report_from_bundles(
    args: argparse.Namespace, policy: Policy | None
) -> tuple[RunDir, Register]:
    from gpuaudit.kubeview import copy_into
    from gpuaudit.offline import BundleDir, check_unique_hosts, read_bundle_dir, store_snapshots
    from gpuaudit.pipeline import ReportRequest, write_request
    from gpuaudit.report.provenance import bundle_scope, record_provenance

    if args.bundle_dir:
        found = read_bundle_dir(args.bundle_dir)
        for note in found.notes():
            print(f"gpuaudit: {args.bundle_dir}: {note}", file=sys.stderr)
    else:
        found = BundleDir(tuple(map(Path, args.bundle)))
    paths = list(found.files)
    check_unique_hosts(paths)  # before the run directory exists
    run = new_run_dir(args.reports_dir, args.run_id)
    # One bundle at a time: each snapshot is on disk before the next bundle is read.
    store_snapshots(paths, run.write_snapshot, found.set_aside)
    if policy is not None:
        policy.copy_to(run.path)
    record_provenance(run.path, bundle_scope(paths, args.bundle_dir), policy)
    if args.kube_nodes:
        copy_into(run.path, args.kube_nodes)
    request = ReportRequest(
        run.load_snapshots(), previous=args.previous, policy=policy, fail_on=args.fail_on
    )
    return run, write_request(run, request)


def cmd_report(args: argparse.Namespace) -> int:
    from gpuaudit.kubeview import copy_into
    from gpuaudit.pipeline import rebuild_register

    if [bool(args.bundle), bool(args.bundle_dir), bool(args.run_dir)].count(True) != 1:
        print(
            "gpuaudit: give either a run directory or --bundle FILE... or --bundle-dir DIR",
            file=sys.stderr,
        )
        return 2
    policy = load_for_cli(args.policy) if args.policy else None
    if args.policy and policy is None:
        return 2
    try:
        if args.bundle or args.bundle_dir:
            run, register = _report_from_bundles(args, policy)
        else:
            # The run keeps the policy its register was judged by: a new one replaces the copy.
            if policy is not None and Path(args.run_dir, "hosts").is_dir():
                policy.copy_to(args.run_dir)
            if args.kube_nodes and Path(args.run_dir, "hosts").is_dir():
                copy_into(args.run_dir, args.kube_nodes)  # kept: later rebuilds use it too
            run = RunDir(args.run_dir)
            register = rebuild_register(
                run, previous=args.previous, policy=policy, fail_on=args.fail_on
            )
    except FileNotFoundError as error:
        print(f"gpuaudit: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a read-only or full reports directory
        print(f"gpuaudit: cannot write the report: {os_error_text(error)}", file=sys.stderr)
        return 2
    except ValueError as error:  # also a --kube-nodes file that holds no node list
        print(f"gpuaudit: {error}", file=sys.stderr)
        return 2
    # The register just written, not register.json read back: the same summary and gate.
    # Without --fail-on a report only writes the register; with it, a register in which no
    # host could be audited fails, as `gpuaudit audit` fails it.
    verdict = AuditVerdict.of(register)
    verdict.print_summary(run.html_path, run.register_path)
    return verdict.status(args.fail_on) if args.fail_on else 0


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


def risk_text(register: Register, code: str) -> str | None:
    """The risks of a register that ``code`` names (a risk id, or a rule code: all of that
    rule's risks), with their findings; None when the register has none of them."""
    rule_code, colon, key = code.strip().partition(":")
    wanted = rule_code.upper() + colon + key
    risks = [r for r in register.risks if (r.id == wanted if colon else r.rule == wanted)]
    if not risks:
        return None
    findings = register.findings
    lines = []
    for risk in risks:
        indices = risk.findings
        lines += [
            "",
            f"risk {risk.id} in run {register.run_id}: {risk.status}, "
            f"{risk.severity.value}, score {risk.score}, "
            f"{count_of(len(indices), 'finding')} on {count_of(len(risk.affected_hosts), 'host')}",
        ]
        if risk.waiver is not None:
            lines.append(f"  waiver: {risk.waiver.reason} (expires {risk.waiver.expires})")
        for index in indices[:_LISTED_FINDINGS]:
            if not 0 <= index < len(findings):
                continue
            finding = findings[index].finding
            gpu = finding.gpu
            where = finding.host + (f" GPU {gpu}" if gpu is not None else "")
            lines.append(f"  - {where}: {finding.message}")
        if len(indices) > _LISTED_FINDINGS:
            lines.append(f"  … and {len(indices) - _LISTED_FINDINGS} more (register.json)")
    return "\n".join(printable(line) for line in lines) + "\n"


def _shard_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= 256:
        raise argparse.ArgumentTypeError(f"--shards takes a number from 1 to 256, not {text!r}")
    return count


def cmd_explain(args: argparse.Namespace) -> int:
    text = explain_text(args.code)
    if text is None:
        rule_code = args.code.partition(":")[0]
        print(f"gpuaudit: no rule {rule_code!r} (gpuaudit rules lists them)", file=sys.stderr)
        return 2
    register: Register | None = None
    if args.run_dir:
        try:
            register = RunDir(args.run_dir).load_register()
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
    return f"gpuaudit {__version__}\npyinfra {pyinfra_version() or 'not installed'}"


class _VersionAction(argparse.Action):
    """argparse's "version" action, with the versions looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(_versions())
        parser.exit()


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
    parser.add_argument(
        "--version", action=_VersionAction, help="print gpuaudit's and pyinfra's versions"
    )
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
    audit.add_argument("--kube-nodes", metavar="FILE", default=None,
                       help="a saved `kubectl get nodes -o json` to check against")  # fmt: skip
    audit.add_argument("--kubeconfig", metavar="PATH", default=None,
                       help="read the nodes with kubectl and this kubeconfig")  # fmt: skip
    audit.add_argument("--kube-context", metavar="NAME", default=None,
                       help="… and this context (alone: kubectl's default kubeconfig)")  # fmt: skip
    audit.add_argument("--shards", type=_shard_count, default=1, metavar="N",
                       help="run N pyinfra processes over disjoint parts of the inventory, "
                       "into one run directory and one register")  # fmt: skip
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
    report.add_argument("--bundle-dir", metavar="DIR", default=None,
                        help="a directory of bundles (a collection job's), read one at a "
                        "time; HOST.failed markers are failed hosts")  # fmt: skip
    _add_run_options(report, "--bundle runs")
    report.add_argument("--previous", metavar="RUN_DIR", default=None,
                        help="run to compare with (default: the newest earlier run)")  # fmt: skip
    report.add_argument("--policy", metavar="FILE", default=None,
                        help="site policy (default: the run's policy.yaml, if any)")  # fmt: skip
    report.add_argument("--fail-on", choices=SEVERITIES, default=None,
                        help="exit 1 when risks at this severity or above are open")  # fmt: skip
    report.add_argument("--kube-nodes", metavar="FILE", default=None,
                        help="a saved `kubectl get nodes -o json` (kept in the run)")  # fmt: skip
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
    _add_collect_job(sub)

    add_policy_parser(sub)
    add_upgrade_parser(sub)
    add_alerts_parser(sub)

    inspect = sub.add_parser(
        "inspect", help="recognise captured tool outputs and print what gpuaudit reads in them"
    )
    inspect.add_argument("files", nargs="+", metavar="FILE")
    inspect.set_defaults(func=cmd_inspect)
    return parser


def _add_collect_job(sub: argparse._SubParsersAction) -> None:
    """``gpuaudit collect-job ENGINE``: the job that runs the collector on every node through
    the site's scheduler, one block per engine (each sets ``func``)."""
    job = sub.add_parser(
        "collect-job", help="print a scheduler job that collects every node into a shared dir"
    )
    engines = job.add_subparsers(dest="engine", required=True, metavar="ENGINE")

    slurm = engines.add_parser(
        "slurm",
        help="an sbatch script: one collector per node (srun), bundles into --bundle-dir",
        description="Print an sbatch script that runs the collector once on every node of "
        "the job and leaves NODE.bundle (or NODE.failed) in a directory all nodes share. "
        "Then: gpuaudit report --bundle-dir DIR. See docs/collect-with-slurm.md.",
    )
    slurm.add_argument("--bundle-dir", required=True, metavar="DIR",
                       help="shared directory the nodes write their bundles into")  # fmt: skip
    slurm.add_argument("-N", "--nodes", type=int, default=None,
                       help="number of nodes (sbatch --nodes)")  # fmt: skip
    slurm.add_argument("-w", "--nodelist", default=None,
                       help="these nodes, e.g. gpu[001-128] (sbatch --nodelist)")  # fmt: skip
    slurm.add_argument("-p", "--partition", default=None)
    slurm.add_argument("-A", "--account", default=None)
    slurm.add_argument("--reservation", default=None)
    slurm.add_argument("--qos", default=None)
    slurm.add_argument("--gres", default=None,
                       help="e.g. gpu:8, where cgroups hide unrequested GPUs")  # fmt: skip
    slurm.add_argument("-t", "--time", dest="time_limit", default=None,
                       help="job time limit (sbatch --time; default 00:15:00)")  # fmt: skip
    slurm.add_argument("-J", "--job-name", default=None)
    slurm.add_argument("--exclusive", action="store_true",
                       help="whole nodes, all their CPUs and GPUs (default: share)")  # fmt: skip
    slurm.add_argument("--collector-timeout", type=int, default=None, metavar="SECONDS",
                       help="bound on one node's collector run (default 600; 0: none)")  # fmt: skip
    slurm.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                       help="set for the collector, e.g. GPUAUDIT_TIMEOUT=30")  # fmt: skip
    slurm.add_argument("--sbatch", action="append", default=[], metavar="LINE",
                       help="an extra #SBATCH line: --sbatch=--mem=1G")  # fmt: skip
    slurm.add_argument("-o", "--output", default=None, metavar="FILE",
                       help="write the script here (default: stdout)")  # fmt: skip
    slurm.set_defaults(func=cmd_collect_job_slurm)

    from gpuaudit.jobs import kubernetes

    kube = engines.add_parser(
        "kubernetes",
        help="a DaemonSet manifest: the collector once on every GPU node, bundles in its log",
        description="Print a Kubernetes manifest (Namespace, ConfigMap, DaemonSet) that runs "
        "the collector once on every GPU node, read-only. Gather each pod's log into "
        "DIR/NODE.bundle, then: gpuaudit report --bundle-dir DIR. See "
        "docs/collect-with-kubernetes.md.",
    )
    kubernetes.add_arguments(kube)
    kube.add_argument("-o", "--output", default=None, metavar="FILE",
                      help="write the manifest here (default: stdout)")  # fmt: skip
    kube.set_defaults(func=cmd_collect_job_kubernetes)


def _write_job(text: str, output: str | None) -> int:
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"gpuaudit: cannot write {output}: {os_error_text(error)}", file=sys.stderr)
        return 2
    return 0


def cmd_collect_job_kubernetes(args: argparse.Namespace) -> int:
    from gpuaudit.jobs import kubernetes

    try:
        text = kubernetes.render_manifest(kubernetes.options_from_args(args))
    except kubernetes.ManifestOptionError as error:
        print(f"gpuaudit collect-job kubernetes: {error}", file=sys.stderr)
        return 2
    return _write_job(text, args.output)


def cmd_collect_job_slurm(args: argparse.Namespace) -> int:
    from gpuaudit.jobs import slurm

    try:
        env = tuple(_key_value(item) for item in args.env)
        given = {
            "nodes": args.nodes, "nodelist": args.nodelist, "partition": args.partition,
            "account": args.account, "reservation": args.reservation, "qos": args.qos,
            "gres": args.gres, "time_limit": args.time_limit, "job_name": args.job_name,
            "collector_timeout_s": args.collector_timeout,
        }  # fmt: skip
        options = slurm.SlurmJobOptions(
            bundle_dir=os.path.abspath(args.bundle_dir),  # the same path on every node
            exclusive=args.exclusive,
            collector_env=env,
            extra_sbatch=tuple(args.sbatch),
            **{k: v for k, v in given.items() if v is not None},
        )
        text = slurm.render_sbatch(options)
    except ValueError as error:
        print(f"gpuaudit: {error}", file=sys.stderr)
        return 2
    return _write_job(text, args.output)


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep:
        raise ValueError(f"--env {item!r} is not KEY=VALUE")
    return key, value


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
