"""Drain hooks: take a host out of the scheduler before its upgrade, and give it back after.

``upgrade.drain.kind`` in the site policy:

- ``none``: no drain (hosts no scheduler uses, or a site that drains by other means);
- ``kubectl``: ``kubectl cordon`` then ``kubectl drain --ignore-daemonsets
  --delete-emptydir-data --timeout=…``; undrain is ``kubectl uncordon``;
- ``slurm``: ``scontrol update nodename=… state=drain reason="gpuaudit: …"``, then waiting
  until the node runs no job; undrain resumes the node only when its drain reason is still
  gpuaudit's, so a node a person drained for another reason stays drained;
- ``command``: the site's own ``command`` / ``undrain_command``, with ``{host}`` and
  ``{version}`` replaced by the shell-quoted values.

The node name is the host's short name (``@sim/gpu-01`` and ``gpu-01.example.com`` are
``gpu-01``). Commands run on the controller, where kubectl / scontrol reach the cluster.
"""

from __future__ import annotations

import shlex

from gpuaudit.policy.upgrade import DrainSettings

REASON_PREFIX = "gpuaudit:"


def node_name(host: str) -> str:
    """The scheduler's name of an inventory host: no connector prefix, no domain."""
    if host.startswith("@") and "/" in host:
        host = host.split("/", 1)[1]
    return host.split(".", 1)[0]


def drain_commands(settings: DrainSettings, host: str, version: str, undrain: bool) -> list[str]:
    """The shell commands that drain (or undrain) ``host``; none for ``kind: none``."""
    node = shlex.quote(node_name(host))
    if settings.kind == "kubectl":
        kubectl = "kubectl" + (
            f" --context {shlex.quote(settings.kubectl_context)}"
            if settings.kubectl_context
            else ""
        )
        if undrain:
            return [f"{kubectl} uncordon {node}"]
        return [
            f"{kubectl} cordon {node}",
            f"{kubectl} drain {node} --ignore-daemonsets --delete-emptydir-data "
            f"--timeout={int(settings.timeout_seconds)}s",
        ]
    if settings.kind == "slurm":
        # Each command fails when Slurm cannot be asked: a squeue that errs says nothing
        # of the node's jobs, and a resume that errs leaves the node drained.
        if undrain:
            return [
                f"node=$(scontrol show node -o {node}) || exit 1; "
                f'case "$node" in *"Reason={REASON_PREFIX}"*) '
                f"scontrol update nodename={node} state=resume ;; "
                f"*) echo {node}' is not drained by gpuaudit: left as it is' ;; esac"
            ]
        reason = shlex.quote(f"{REASON_PREFIX} driver upgrade to {version}")
        wait = int(settings.timeout_seconds)
        return [
            f"scontrol update nodename={node} state=drain reason={reason}",
            f"i=0; while jobs=$(squeue -h -w {node} -o %i) || "
            f"{{ echo 'squeue failed: the jobs on '{node}' are unknown' >&2; exit 1; }}; "
            f'[ -n "$jobs" ]; do i=$((i+1)); [ $i -le {wait} ] || '
            f"{{ echo {node}' still runs jobs:' $jobs >&2; exit 1; }}; sleep 1; done",
        ]
    if settings.kind == "command":
        template = settings.undrain_command if undrain else settings.command
        if not template:
            return []
        return [template.replace("{host}", node).replace("{version}", shlex.quote(version))]
    return []
