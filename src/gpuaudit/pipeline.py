"""The audit's stages, and the typed value each hands the next.

    stage     module                          input → output
    collect   deploy.py (pyinfra), offline.py  a host → parsers.bundle.Bundle (its sections)
    snapshot  assemble.build                   Bundle → model.snapshot.HostSnapshot
    evaluate  rules.assess                     [HostSnapshot] + Policy → rules.base.Evaluation
                                               (findings, and every rule's RuleOutcome per host)
    register  report.register                  snapshots + Evaluation → register_types.Register
    render    report.renderers                 RenderInput → one file's text per Renderer
    store     report.run.RunDir                {file: text} → the run directory

Each stage only does its part: the run directory stores and never evaluates, the renderers
format one register and never run rules. This module joins the last four for what the audit,
``gpuaudit report`` and the tests write: :func:`write_report` and :func:`rebuild`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaudit.kubeview import load_cluster_view
from gpuaudit.model.cluster import ClusterView
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.report.cycles import cycle_collection_paused
from gpuaudit.report.layout import REGISTER_FILE, utc_now_iso
from gpuaudit.report.provenance import register_provenance
from gpuaudit.report.register import build_register
from gpuaudit.report.register_types import Register
from gpuaudit.report.renderers import FileText, render_all, render_files
from gpuaudit.report.rollouts import open_rollouts
from gpuaudit.report.run import HOSTS_DIR, RunDir
from gpuaudit.report.trend_basis import BASIS_FILE, TextDigest, basis_chunks
from gpuaudit.report.trends import find_previous, load_previous
from gpuaudit.rules.base import Evaluation, Finding

if TYPE_CHECKING:
    from gpuaudit.policy import Policy


def evaluate(
    snapshots: Sequence[HostSnapshot],
    policy: Policy | Mapping[str, Any] | None = None,
    cluster: ClusterView | None = None,
) -> Evaluation:
    """The rules over the fleet: findings and every rule's outcome on every host; ``cluster``
    is the Kubernetes view the scheduler rules compare the hosts with (None: none given)."""
    from gpuaudit.rules import assess  # type: ignore[attr-defined,unused-ignore]

    result: Evaluation = assess(snapshots, policy=policy, cluster=cluster)
    return result


@dataclass(frozen=True)
class ReportRequest:
    """What a report of one run is built from: the run's snapshots, the findings when the
    caller has judged them already (None: the rules are evaluated, with every rule's outcome),
    the policy (settings and waivers), the time it is generated, the run to compare with
    (None: the newest earlier comparable run) and junit.xml's failure threshold."""

    snapshots: Sequence[HostSnapshot]
    findings: Sequence[Finding] | None = None
    policy: Policy | Mapping[str, Any] | None = None
    generated_at: str | None = None
    previous: str | os.PathLike[str] | None = None
    fail_on: str | None = None


def assemble_register(run: RunDir, request: ReportRequest) -> Register:
    """The register of the run in ``run`` (register.py), with the open rollouts beside it.

    Without findings the rules are evaluated (:func:`evaluate`, with the policy, which also
    supplies waivers), and the register records every rule's outcome on every host; findings
    given by the caller come without outcomes. Trends compare with the request's previous run
    (PreviousRunError when that is this run), by default with the newest earlier comparable run next
    to this one (trends.find_previous).
    The register's provenance is the one the run recorded (provenance.json). The Kubernetes
    view the run keeps (kubeview.py: cluster/kubernetes-nodes.json) is read here, so the
    audit's register and a rebuilt one judge the hosts against the same view.
    """
    snapshots, policy = request.snapshots, request.policy
    if request.findings is None:
        evaluation = evaluate(snapshots, policy, load_cluster_view(run.path))
    else:
        evaluation = Evaluation(findings=tuple(request.findings))
    provenance = register_provenance(run.path, policy)
    previous = request.previous
    if previous is None:
        previous = find_previous(run.path, [s.host for s in snapshots], provenance.scope)
    elif _same_directory(previous, run.path):
        raise PreviousRunError(
            f"the previous run given, {previous}, is the run being reported: a run is not "
            "compared with itself"
        )
    register = build_register(
        snapshots,
        list(evaluation.findings),
        generated_at=request.generated_at or utc_now_iso(),
        run_id=run.run_id,
        policy=policy,
        previous=load_previous(previous) if previous is not None else None,
        provenance=provenance,
        outcomes=evaluation.outcomes if request.findings is None else None,
    )
    return register.with_rollouts(open_rollouts(run.path.parent))


class PreviousRunError(ValueError):
    """The run to compare with cannot be this run's previous one (it is this run)."""


def _same_directory(path: str | os.PathLike[str], other: Path) -> bool:
    """Whether ``path`` is ``other`` by any name (a symlink, ``..``, another mount of it)."""
    try:
        return os.path.samefile(path, other)
    except OSError:  # one of them is missing: load_previous says so
        return False


def render_report(run: RunDir, request: ReportRequest) -> dict[str, str]:
    """Every file of the run's report, in memory: its path in the run directory → its text,
    register.json last (:func:`assemble_register`, then every renderer)."""
    register = assemble_register(run, request)
    return render_all(register, request.snapshots, fail_on=request.fail_on)


def write_report(
    run: RunDir,
    snapshots: Sequence[HostSnapshot],
    findings: Sequence[Finding] | None = None,
    *,
    policy: Policy | Mapping[str, Any] | None = None,
    generated_at: str | None = None,
    previous: str | os.PathLike[str] | None = None,
    fail_on: str | None = None,
) -> Path:
    """Write register.json, index.html, the other views and the docs pages the register cites
    into ``run`` (the arguments are those of a :class:`ReportRequest`); return index.html.

    Every file is written to a temporary name before any is renamed into place, and all are
    renamed together at the end, register.json last: a renderer that fails or a disk that fills
    leaves the previous report whole, never a new register beside a stale page. The files are
    made one at a time, each written as it is made (renderers.render_files), so a large fleet's
    report never holds all its outputs in memory at once.
    """
    request = ReportRequest(snapshots, findings, policy, generated_at, previous, fail_on)
    write_request(run, request)
    return run.html_path


def write_request(run: RunDir, request: ReportRequest) -> Register:
    """:func:`write_report` for a request; the register written, for what reads it next in the
    same process (the terminal summary, the ``--fail-on`` gate) without reading register.json
    back."""
    with cycle_collection_paused():
        register = assemble_register(run, request)
        # One file at a time: each is written to its temporary name before the next is made.
        files = render_files(register, request.snapshots, fail_on=request.fail_on)
        run.store_files(_with_trend_basis(run, request.snapshots, register, files))
    return register


def _with_trend_basis(
    run: RunDir, snapshots: Sequence[HostSnapshot], register: Register, files: Iterable[FileText]
) -> Iterator[FileText]:
    """The report's files with trend-basis.json (what the next run's trends compare, read
    without loading these snapshots or this register again: trend_basis.py) after them all,
    sealed with the register.json made before it; none when the snapshots are not the run's
    snapshot files. The run's store still renames register.json last."""
    digest = TextDigest()
    # The snapshot files' stamps are taken now, as close to their loading as can be; the
    # register's part is asked for when the basis is written, after register.json.
    basis = basis_chunks(run.path, snapshots, lambda: digest.seal(register))
    for name, pieces in files:
        yield name, digest.track(pieces) if name == REGISTER_FILE else pieces
    if basis is not None:
        yield BASIS_FILE, basis


def rebuild(
    run_dir: RunDir | str | os.PathLike[str],
    *,
    policy: Policy | Mapping[str, Any] | None = None,
    previous: str | os.PathLike[str] | None = None,
    fail_on: str | None = None,
) -> Path:
    """Rebuild register.json and index.html from the run's snapshots (``gpuaudit report``);
    return index.html.

    Without ``policy`` the run's own copy (policy.yaml, written by the audit) is used, so a
    rebuilt register judges the hosts as the audit did; a copy that no longer loads raises
    PolicyError (a ValueError).
    """
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    rebuild_register(run, policy=policy, previous=previous, fail_on=fail_on)
    return run.html_path


def rebuild_register(
    run: RunDir,
    *,
    policy: Policy | Mapping[str, Any] | None = None,
    previous: str | os.PathLike[str] | None = None,
    fail_on: str | None = None,
) -> Register:
    """:func:`rebuild`; the register written (:func:`write_request`)."""
    if not run.path.is_dir():
        raise FileNotFoundError(f"run directory {run.path} does not exist")
    if not run.hosts_dir.is_dir():
        raise FileNotFoundError(f"{run.path} holds no {HOSTS_DIR}/ directory: not a gpuaudit run")
    if policy is None:
        from gpuaudit.policy import POLICY_FILE, load_policy

        if (run.path / POLICY_FILE).is_file():
            policy = load_policy(run.path / POLICY_FILE)
    # One pause for loading and building: resumed between them, the collector's next pass
    # would walk every object the load made.
    with cycle_collection_paused():
        snapshots = run.load_snapshots()
        request = ReportRequest(snapshots, policy=policy, previous=previous, fail_on=fail_on)
        return write_request(run, request)
