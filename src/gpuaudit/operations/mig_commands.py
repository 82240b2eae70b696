"""The shell commands of a :class:`gpuaudit.operations.mig_plan.MigPlan`, in the order they run.

1. ``systemctl stop`` the daemons that hold the GPUs (only with ``stop_services=True``, only
   when an Ampere GPU needs a reset), and ``nvidia-smi -i … -pm 0`` where persistence mode was
   set by hand;
2. ``nvidia-smi mig -dci -i N`` / ``-dgi -i N`` on GPUs whose instances go (each only where
   the GPU has such instances: both exit non-zero when there is nothing to destroy);
3. ``nvidia-smi -i <gpus> -mig 0|1`` for the GPUs whose mode changes;
4. on Ampere, ``nvidia-smi -r -i N`` for a GPU whose mode change is still pending (the driver
   applies it with a reset of its own when it can; the mode is read back first);
5. ``nvidia-smi mig -i N -cgi <profiles> -C``;
6. persistence mode back on, the daemons started again (in reverse order);
7. a check that reads back every changed GPU's MIG mode (``--query-gpu=mig.mode.current``)
   and instances (``mig -lgi -i N``, ``mig -lci -i N``) and exits 1 naming what is missing:
   a layout is never reported applied without its partitions.

A step that fails stops the operation there (pyinfra stops a host's operation at its first
failing command); daemons stopped in step 1 then stay stopped until it is run again.
"""

from __future__ import annotations

import shlex

from gpuaudit.operations.mig_plan import DISABLED, ENABLED, GpuChange, MigPlan

# POSIX sh, run as one command. ga_check GPU MODE "PROFILES": compare the GPU's current MIG mode
# and its GPU instance profiles (sorted, space-separated) and count its compute instances.
_CHECK = r"""LANG=C; LC_ALL=C; export LANG LC_ALL; ga_failed=0
ga_check() {
  ga_mode=$(nvidia-smi -i "$1" --query-gpu=mig.mode.current --format=csv,noheader 2>&1)
  if [ "$ga_mode" != "$2" ]; then
    echo "GPU $1: MIG mode is ${ga_mode:-unreadable}, wanted $2" >&2; ga_failed=1; return
  fi
  [ "$2" = Enabled ] || return 0
  ga_gi=$(nvidia-smi mig -lgi -i "$1" 2>/dev/null \
    | awk '$1 == "|" && $2 ~ /^[0-9]+$/ { p = ($3 == "MIG") ? $4 : $3; if (p ~ /g\./) print p }' \
    | sort | paste -sd ' ' -)
  ga_ci=$(nvidia-smi mig -lci -i "$1" 2>/dev/null \
    | awk '$1 == "|" && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/' | wc -l | tr -d ' ')
  ga_want_ci=$(printf '%s' "$3" | wc -w | tr -d ' ')
  if [ "$ga_gi" != "$3" ] || [ "$ga_ci" != "$ga_want_ci" ]; then
    echo "GPU $1: GPU instances [${ga_gi:-none}] and $ga_ci compute instance(s)," \
      "wanted [${3:-none}] and $ga_want_ci" >&2
    ga_failed=1
  fi
}
"""


def plan_commands(plan: MigPlan) -> list[str]:
    changes = plan.changes
    commands: list[str] = []
    if plan.stop_units:
        commands.append(_systemctl("stop", plan.stop_units))
    if plan.persistence_off:
        commands.append(f"nvidia-smi -i {_ids(plan.persistence_off)} -pm 0")
    for change in changes:
        if change.destroy_compute:
            commands.append(f"nvidia-smi mig -dci -i {change.index}")
        if change.destroy_gpu:
            commands.append(f"nvidia-smi mig -dgi -i {change.index}")
    for mode, flag in ((DISABLED, "0"), (ENABLED, "1")):
        gpus = [c.index for c in changes if c.set_mode and c.wanted_mode == mode]
        if gpus:
            commands.append(f"nvidia-smi -i {_ids(gpus)} -mig {flag}")
    for change in changes:
        if change.reset:
            commands.append(_reset_if_pending(change))
    for change in changes:
        if change.create:
            commands.append(f"nvidia-smi mig -i {change.index} -cgi {','.join(change.create)} -C")
    if plan.persistence_off:
        commands.append(f"nvidia-smi -i {_ids(plan.persistence_off)} -pm 1")
    if plan.stop_units:
        commands.append(_systemctl("start", tuple(reversed(plan.stop_units))))
    commands.append(verify_command(plan))
    return commands


def verify_command(plan: MigPlan) -> str:
    checks = [
        f"ga_check {c.index} {c.wanted_mode} {shlex.quote(' '.join(c.wanted_instances))}"
        for c in plan.changes
    ]
    failed = shlex.quote(f"MIG config {plan.config} is not in place on the GPUs above")
    verdict = f'[ "$ga_failed" = 0 ] || {{ echo {failed} >&2; exit 1; }}'
    return _CHECK + "\n".join([*checks, verdict])


def _reset_if_pending(change: GpuChange) -> str:
    query = f"nvidia-smi -i {change.index} --query-gpu=mig.mode.current --format=csv,noheader"
    return f"{query} | grep -qx {change.wanted_mode} || nvidia-smi -r -i {change.index}"


def _systemctl(verb: str, units: tuple[str, ...]) -> str:
    return " ".join(["systemctl", verb, *(shlex.quote(u) for u in units)])


def _ids(indexes: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(i) for i in indexes)
