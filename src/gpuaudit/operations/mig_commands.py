"""The shell commands of a :class:`gpuaudit.operations.mig_plan.MigPlan`, in the order they run.

Every command names its GPUs by PCI bus id (``-i 00000000:07:00.0``, the ``target`` the plan
read from nvidia-smi), never by index: ``BUS`` below. nvidia-smi's ``-i`` takes an index, a UUID
or a PCI bus id, and NVIDIA recommends the latter two because the enumeration order (the
index) is not guaranteed to stay the same.

1. ``systemctl stop`` the daemons that hold the GPUs (only with ``stop_services=True``, only
   when an Ampere GPU needs a reset), and ``nvidia-smi -i … -pm 0`` where persistence mode was
   set by hand;
2. ``nvidia-smi mig -dci -i BUS`` / ``-dgi -i BUS`` on GPUs whose instances go (each only where
   the GPU has such instances: both exit non-zero when there is nothing to destroy);
3. ``nvidia-smi -i <buses> -mig 0|1`` for the GPUs whose mode changes;
4. on Ampere, ``nvidia-smi -r -i BUS`` for a GPU whose mode change is still pending (the driver
   applies it with a reset of its own when it can; the mode is read back first);
5. ``nvidia-smi mig -i BUS -cgi <profiles> -C``;
6. persistence mode back on, the daemons started again (in reverse order);
7. a check that reads back every changed GPU's MIG mode (``--query-gpu=mig.mode.current``)
   and instances (``mig -lgi -i BUS``, ``mig -lci -i BUS``) and exits 1 naming what is
   missing: a layout is never reported applied without its partitions.

A step that fails stops the operation there (pyinfra stops a host's operation at its first
failing command). When step 1 stops daemons or turns persistence mode off, steps 1 to 6 run as
one command whose step 6 runs whatever happened before it: a refused step (a GPU "In use by
another client", a reset the hypervisor does not allow) never leaves the host's daemons stopped
or persistence mode off. That command exits with the failed step's status.
"""

from __future__ import annotations

import shlex

from gpuaudit.operations.mig_plan import DISABLED, ENABLED, GpuChange, MigPlan, format_gpus

# POSIX sh, run as one command. ga_check BUS MODE "PROFILES" INDEX: compare the current MIG mode
# of the GPU at PCI bus id BUS and its GPU instance profiles (sorted, space-separated) and count
# its compute instances; messages name it by INDEX, the number the plan knew it by.
_CHECK = r"""LANG=C; LC_ALL=C; export LANG LC_ALL; ga_failed=0
ga_check() {
  ga_mode=$(nvidia-smi -i "$1" --query-gpu=mig.mode.current --format=csv,noheader 2>&1)
  if [ "$ga_mode" != "$2" ]; then
    echo "GPU $4: MIG mode is ${ga_mode:-unreadable}, wanted $2" >&2; ga_failed=1; return
  fi
  [ "$2" = Enabled ] || return 0
  ga_gi=$(nvidia-smi mig -lgi -i "$1" 2>/dev/null \
    | awk '$1 == "|" && $2 ~ /^[0-9]+$/ { p = ($3 == "MIG") ? $4 : $3; if (p ~ /g\./) print p }' \
    | sort | paste -sd ' ' -)
  ga_ci=$(nvidia-smi mig -lci -i "$1" 2>/dev/null \
    | awk '$1 == "|" && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/' | wc -l | tr -d ' ')
  ga_want_ci=$(printf '%s' "$3" | wc -w | tr -d ' ')
  if [ "$ga_gi" != "$3" ] || [ "$ga_ci" != "$ga_want_ci" ]; then
    echo "GPU $4: GPU instances [${ga_gi:-none}] and $ga_ci compute instance(s)," \
      "wanted [${3:-none}] and $ga_want_ci" >&2
    ga_failed=1
  fi
}
"""


def plan_commands(plan: MigPlan) -> list[str]:
    changes = plan.changes
    held: list[str] = []  # what lets go of the GPUs (step 1) ...
    restore: list[str] = []  # ... and what gives them back (step 6), in that order
    if plan.stop_units:
        held.append(_systemctl("stop", plan.stop_units))
    if plan.persistence_off:
        by_hand = [c for c in changes if c.index in plan.persistence_off]
        held.append(f"nvidia-smi -i {_targets(by_hand)} -pm 0")
        restore.append(f"nvidia-smi -i {_targets(by_hand)} -pm 1")
    if plan.stop_units:
        restore.append(_systemctl("start", tuple(reversed(plan.stop_units))))
    steps: list[str] = []
    for change in changes:
        if change.destroy_compute:
            steps.append(f"nvidia-smi mig -dci -i {_targets([change])}")
        if change.destroy_gpu:
            steps.append(f"nvidia-smi mig -dgi -i {_targets([change])}")
    for mode, flag in ((DISABLED, "0"), (ENABLED, "1")):
        gpus = [c for c in changes if c.set_mode and c.wanted_mode == mode]
        if gpus:
            steps.append(f"nvidia-smi -i {_targets(gpus)} -mig {flag}")
    for change in changes:
        if change.reset:
            steps.append(_reset_if_pending(change))
    for change in changes:
        if change.create:
            profiles = shlex.quote(",".join(change.create))
            steps.append(f"nvidia-smi mig -i {_targets([change])} -cgi {profiles} -C")
    if not restore:
        return [*held, *steps, verify_command(plan)]
    return [_held_around([*held, *steps], restore), verify_command(plan)]


def _held_around(steps: list[str], restore: list[str]) -> str:
    """One command: ``steps`` until one fails, then ``restore`` in any case. Its status is the
    failed step's, or 1 when only the restore failed."""
    body = "\n".join(steps)
    undo = "\n".join(f"{command} || ga_undo=1" for command in restore)
    gave_back = shlex.quote(
        "a MIG step failed (status $ga_rc); the daemons and persistence mode it had stopped were "
        "started again"
    ).replace("$ga_rc", "'\"$ga_rc\"'")
    not_back = shlex.quote("could not start again what the MIG change had stopped (above)")
    return (
        f"(\nset -e\n{body}\n)\nga_rc=$?\nga_undo=0\n{undo}\n"
        f'if [ "$ga_undo" != 0 ]; then echo {not_back} >&2; [ "$ga_rc" != 0 ] || ga_rc=1; '
        'exit "$ga_rc"; fi\n'
        f'if [ "$ga_rc" != 0 ]; then echo {gave_back} >&2; exit "$ga_rc"; fi'
    )


def verify_command(plan: MigPlan) -> str:
    checks = [
        f"ga_check {_targets([c])} {c.wanted_mode} {shlex.quote(' '.join(c.wanted_instances))} "
        f"{c.index}"
        for c in plan.changes
    ]
    failed = shlex.quote(f"MIG config {plan.config} is not in place on the GPUs above")
    verdict = f'[ "$ga_failed" = 0 ] || {{ echo {failed} >&2; exit 1; }}'
    return _CHECK + "\n".join([*checks, verdict])


def _reset_if_pending(change: GpuChange) -> str:
    gpu = _targets([change])
    query = f"nvidia-smi -i {gpu} --query-gpu=mig.mode.current --format=csv,noheader"
    return f"{query} | grep -qx {change.wanted_mode} || nvidia-smi -r -i {gpu}"


def _systemctl(verb: str, units: tuple[str, ...]) -> str:
    return " ".join(["systemctl", verb, *(shlex.quote(u) for u in units)])


def _targets(changes: list[GpuChange]) -> str:
    """The ``-i`` value naming these GPUs: their bus ids, comma-separated, quoted for sh."""
    missing = [c.index for c in changes if c.target is None]
    if missing:
        # plan_mig refuses such a GPU; a plan that reached here without a bus id is a bug.
        raise ValueError(f"GPU {format_gpus(missing)}: no PCI bus id to aim a command at")
    return shlex.quote(",".join(str(c.target) for c in changes))
