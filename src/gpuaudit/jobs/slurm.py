"""Collection as a Slurm job: one collector per node, each node's bundle in a shared directory.

``gpuaudit collect-job slurm --bundle-dir DIR`` prints a batch script (:func:`render_sbatch`)
for ``sbatch``. The job writes the collector (the text of ``gpuaudit collect-script``) into a
hidden work directory inside DIR, then runs one task per node (``srun --ntasks-per-node=1``)
that runs it and leaves exactly one file per node in DIR:

    DIR/<node>.bundle    the collector's output, written to a temporary name and renamed
    DIR/<node>.failed    the collector did not finish (exit status, timeout, no output) or the
                         node never ran its task: the reason on the first line, the end of the
                         collector's stderr below

``<node>`` is the Slurm node name (``SLURMD_NODENAME``, the short host name where it is
unset), so that the batch step can tell which nodes of the allocation left nothing and write
their ``.failed`` marker itself: a node is never silently missing. ``gpuaudit report
--bundle-dir DIR`` then builds the register from DIR (offline.py), a ``.failed`` marker
becoming a host whose collection failed, with the reason.

The job is read-only and short: by default it does not ask for whole nodes (``--exclusive``)
and so runs beside other jobs where the node has a free CPU. Where cgroup.conf constrains
devices (``ConstrainDevices=yes``) a job sees only the GPUs it was given: ask for them
(``gres="gpu:8"``) or for whole nodes (``exclusive=True``, which the sbatch manual says
allocates "all CPUs and GRES on all nodes in the allocation"), or the audit sees no GPU.
See https://slurm.schedmd.com/sbatch.html and https://slurm.schedmd.com/srun.html.

Every value is quoted for what reads it: shell words with :func:`shlex.quote`, ``#SBATCH``
option values for sbatch's own parser of those lines (:func:`sbatch_quote`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from gpuaudit.collect import check_collector_setting, collector_script
from gpuaudit.offline import FAILED_SUFFIX

# The job's work directory in the bundle directory: hidden, so never read as a bundle.
WORK_PREFIX = ".gpuaudit-job."
BUNDLE_SUFFIX = ".bundle"
DEFAULT_JOB_NAME = "gpuaudit-collect"
DEFAULT_TIME = "00:15:00"
DEFAULT_COLLECTOR_TIMEOUT_S = 600
LOG_NAME = "gpuaudit-slurm-%j.log"  # .log: never taken for a bundle

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or unlimited.
_TIME = re.compile(
    r"^(\d+|\d+:\d\d|\d+:\d\d:\d\d|\d+-\d+(:\d\d(:\d\d)?)?|UNLIMITED|INFINITE)$", re.IGNORECASE
)
_COLLECTOR_END = "GPUAUDIT_COLLECTOR_END"
_STEP_END = "GPUAUDIT_NODE_STEP_END"


@dataclass(frozen=True)
class SlurmJobOptions:
    """What the collection job asks Slurm for, and how each node runs the collector.

    ``bundle_dir`` must be on a filesystem every node and the reader of the bundles share.
    ``nodes`` (a count) and ``nodelist`` (Slurm's host list syntax, ``gpu[001-128]``) choose
    the nodes; with neither, sbatch's default (one node) applies. ``collector_timeout_s``
    bounds one node's whole collector run (0: no bound beyond the job's time limit);
    ``collector_env`` is set for the collector only (``GPUAUDIT_TIMEOUT=30``, ...).
    ``extra_sbatch`` lines are the site's own options, written as given after ``#SBATCH``.
    """

    bundle_dir: str
    nodes: int | None = None
    nodelist: str | None = None
    partition: str | None = None
    account: str | None = None
    reservation: str | None = None
    qos: str | None = None
    gres: str | None = None
    time_limit: str = DEFAULT_TIME
    job_name: str = DEFAULT_JOB_NAME
    exclusive: bool = False
    collector_timeout_s: int = DEFAULT_COLLECTOR_TIMEOUT_S
    collector_env: tuple[tuple[str, str], ...] = ()
    extra_sbatch: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.bundle_dir:
            raise ValueError("the bundle directory must be given")
        for name in ("bundle_dir", "nodelist", "partition", "account", "reservation", "qos",
                     "gres", "job_name", "time_limit"):  # fmt: skip
            value = getattr(self, name)
            if value is not None and _unwritable(value):
                raise ValueError(f"{name} may not hold a newline, a NUL or a backslash")
        if "\\" in self.bundle_dir:
            raise ValueError("the bundle directory may not hold a backslash")
        if self.nodes is not None and self.nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {self.nodes}")
        if not _TIME.match(self.time_limit):
            raise ValueError(f"time limit {self.time_limit!r} is not one sbatch --time takes")
        if self.collector_timeout_s < 0:
            raise ValueError("the collector timeout cannot be negative")
        for key, value in self.collector_env:
            if not _ENV_NAME.match(key):
                raise ValueError(f"environment variable name {key!r} is not a valid name")
            if "\0" in value:
                raise ValueError(f"environment variable {key} may not hold a NUL")
            check_collector_setting(key, value)
        for line in self.extra_sbatch:
            if "\n" in line or "\r" in line or "\0" in line:
                raise ValueError("an extra #SBATCH line may not hold a newline or a NUL")


def _unwritable(value: str) -> bool:
    return any(c in value for c in "\n\r\0")


def sbatch_quote(value: str) -> str:
    """``value`` as one argument of an ``#SBATCH`` line.

    sbatch reads those lines with its own parser (src/sbatch/opt.c ``_get_argument``), not
    with a shell: a backslash escapes the next character anywhere, double (and in newer
    releases single) quotes hold spaces, and an unquoted ``#`` starts a comment. A double-
    quoted value with ``\\``, ``"`` and ``#`` escaped reads back as itself in all of them.
    """
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("#", "\\#")
    return f'"{escaped}"'


def _log_path(bundle_dir: str) -> str:
    # sbatch expands %-patterns in --output: a literal % is %%.
    return bundle_dir.rstrip("/").replace("%", "%%") + "/" + LOG_NAME


def sbatch_lines(options: SlurmJobOptions) -> list[str]:
    """The job's ``#SBATCH`` lines, in sbatch's documented option spelling."""
    lines = [f"--job-name={sbatch_quote(options.job_name)}"]
    if options.nodes is not None:
        lines.append(f"--nodes={options.nodes}")
    if options.nodelist:
        lines.append(f"--nodelist={sbatch_quote(options.nodelist)}")
    lines.append("--ntasks-per-node=1")
    for option, value in (
        ("partition", options.partition),
        ("account", options.account),
        ("reservation", options.reservation),
        ("qos", options.qos),
        ("gres", options.gres),
    ):
        if value:
            lines.append(f"--{option}={sbatch_quote(value)}")
    lines.append(f"--time={options.time_limit}")
    lines.append(f"--output={sbatch_quote(_log_path(options.bundle_dir))}")
    if options.exclusive:
        lines.append("--exclusive")
    lines += list(options.extra_sbatch)
    return [f"#SBATCH {line}" for line in lines]


def _heredoc(text: str, terminator: str) -> str:
    """``text`` as the body of a quoted here-document (the shell expands nothing in it)."""
    body = text if text.endswith("\n") else text + "\n"
    if terminator in body.splitlines():
        raise ValueError(f"the embedded text holds the line {terminator}")
    return body


def render_sbatch(options: SlurmJobOptions, collector: str | None = None) -> str:
    """The batch script for ``sbatch``: its #SBATCH lines, the collector and each node's
    step embedded (quoted here-documents, written into DIR/.gpuaudit-job.<job id>/), one
    ``srun`` task per node, and the markers of the nodes that left nothing."""
    collector_text = _heredoc(collector if collector is not None else collector_script(),
                              _COLLECTOR_END)  # fmt: skip
    env_words = " ".join(shlex.quote(f"{k}={v}") for k, v in options.collector_env)
    header = "\n".join(sbatch_lines(options))
    quoted_dir = shlex.quote(options.bundle_dir)
    return f"""#!/bin/bash
# gpuaudit collection job: one collector per node; each node leaves <node>{BUNDLE_SUFFIX}
# (or <node>{FAILED_SUFFIX} saying why not) in the shared bundle directory.
# Printed by `gpuaudit collect-job slurm`. Submit: sbatch THIS_FILE. Then, where the bundle
# directory is mounted: gpuaudit report --bundle-dir DIR
{header}

set -u
GA_DIR={quoted_dir}
GA_TIMEOUT={int(options.collector_timeout_s)}
GA_JOB="$GA_DIR/{WORK_PREFIX}${{SLURM_JOB_ID:-$$}}"
mkdir -p "$GA_JOB" || {{ echo "gpuaudit: cannot create $GA_JOB" >&2; exit 1; }}
cat >"$GA_JOB/collect.sh" <<'{_COLLECTOR_END}'
{collector_text}{_COLLECTOR_END}
cat >"$GA_JOB/node.sh" <<'{_STEP_END}'
{_NODE_STEP}{_STEP_END}

# One task on every node of the allocation; a task that fails does not stop the others.
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\
  --kill-on-bad-exit=0 bash "$GA_JOB/node.sh" "$GA_DIR" "$GA_JOB" "$GA_TIMEOUT" {env_words}
GA_SRUN=$?

# A node whose task never ran (or died before it could say so) still gets its marker.
GA_NODES=$(scontrol show hostnames "${{SLURM_JOB_NODELIST:-}}" 2>/dev/null) || GA_NODES=
for ga_node in $GA_NODES; do
  [ -e "$GA_JOB/$ga_node.done" ] && continue
  {{
    echo "gpuaudit collection failed on node $ga_node (Slurm job ${{SLURM_JOB_ID:-?}}):" \\
      "its task left no output (srun exited with status $GA_SRUN)"
  }} >"$GA_DIR/.$ga_node{FAILED_SUFFIX}.tmp" \\
    && mv -f "$GA_DIR/.$ga_node{FAILED_SUFFIX}.tmp" "$GA_DIR/$ga_node{FAILED_SUFFIX}" \\
    && rm -f "$GA_DIR/$ga_node{BUNDLE_SUFFIX}"
  echo failed >"$GA_JOB/$ga_node.done"
done

ga_ok=$(grep -lx ok "$GA_JOB"/*.done 2>/dev/null | wc -l)
ga_failed=$(grep -lx failed "$GA_JOB"/*.done 2>/dev/null | wc -l)
rm -rf "$GA_JOB"
echo "gpuaudit: $ga_ok bundle(s), $ga_failed failed node(s) in $GA_DIR"
echo "gpuaudit: next: gpuaudit report --bundle-dir $GA_DIR"
[ "$ga_failed" = 0 ] && [ "$ga_ok" -gt 0 ]
"""


# Each node's task: run the collector bounded, rename its output into place, or say why not.
# Arguments: the bundle directory, the job's work directory, the timeout, then K=V pairs.
_NODE_STEP = f"""ga_dir=$1 ga_job=$2 ga_limit=$3
shift 3
ga_node=${{SLURMD_NODENAME:-$(hostname -s 2>/dev/null || hostname)}}
ga_node=${{ga_node//\\//_}}
case $ga_node in ''|.*) ga_node="node_$ga_node" ;; esac
ga_tmp="$ga_dir/.$ga_node{BUNDLE_SUFFIX}.${{SLURM_JOB_ID:-0}}.tmp"
ga_err="$ga_job/$ga_node.stderr"
ga_sh=$(command -v sh)
if [ "$ga_limit" -gt 0 ] && command -v timeout >/dev/null 2>&1; then
  timeout -k 10 "$ga_limit" env GPUAUDIT_SLURM_NODE="$ga_node" "$@" "$ga_sh" "$ga_job/collect.sh" \\
    >"$ga_tmp" 2>"$ga_err"
else
  env GPUAUDIT_SLURM_NODE="$ga_node" "$@" "$ga_sh" "$ga_job/collect.sh" >"$ga_tmp" 2>"$ga_err"
fi
ga_rc=$?
if [ "$ga_rc" = 0 ] && [ -s "$ga_tmp" ]; then
  if mv -f "$ga_tmp" "$ga_dir/$ga_node{BUNDLE_SUFFIX}"; then
    rm -f "$ga_dir/$ga_node{FAILED_SUFFIX}"
    echo ok >"$ga_job/$ga_node.done"
    exit 0
  fi
  ga_reason="its bundle could not be renamed into $ga_dir"
elif [ "$ga_rc" = 124 ] || [ "$ga_rc" = 137 ]; then
  ga_reason="the collector did not finish within ${{ga_limit}}s (exit status $ga_rc)"
elif [ "$ga_rc" = 0 ]; then
  ga_reason="the collector printed nothing"
else
  ga_reason="the collector exited with status $ga_rc"
fi
{{
  echo "gpuaudit collection failed on node $ga_node (Slurm job ${{SLURM_JOB_ID:-?}}): $ga_reason"
  echo "--- the end of the collector's stderr ---"
  tail -c 4096 "$ga_err" 2>/dev/null
}} >"$ga_dir/.$ga_node{FAILED_SUFFIX}.tmp"
mv -f "$ga_dir/.$ga_node{FAILED_SUFFIX}.tmp" "$ga_dir/$ga_node{FAILED_SUFFIX}"
rm -f "$ga_tmp" "$ga_dir/$ga_node{BUNDLE_SUFFIX}"
echo failed >"$ga_job/$ga_node.done"
exit 0
"""
