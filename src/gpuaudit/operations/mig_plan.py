"""What :func:`gpuaudit.operations.mig.apply` does to a host, decided without touching it.

``HostMig.from_facts`` reads the facts (:class:`gpuaudit.facts.mig.MigState` and
:class:`gpuaudit.facts.remediation.SystemdUnits`) into typed values; :func:`plan_mig` compares
them with a mig-parted config (entries read by :mod:`gpuaudit.model.mig_spec`) and returns a
:class:`MigPlan`: per GPU that differs, what differs and what to run, plus what blocks the
change. :mod:`gpuaudit.operations.mig_commands` turns the plan into shell commands. Nothing
here imports pyinfra, so the decisions are tested on plain values.

How a GPU is judged, as ``nvidia-mig-parted apply`` does: the last entry of the config that
matches it (``devices``: all or indexes, ``device-filter``: PCI ids) gives its MIG mode and its
GPU instances per profile, each with one compute instance spanning it (``-cgi … -C``). A GPU no
entry matches is left alone. Only GPUs whose mode or instances differ are touched.

Where mig-parted resets every GPU, this resets only a GPU whose MIG mode change has not taken
effect, and only on Ampere (A100, A30), the generation that applies a mode change through a
GPU reset (the driver tries it itself; it fails while anything holds the GPU). Hopper and later
apply it without a reset (NVIDIA MIG user guide, "GPU Reset on Hopper+ GPUs"). So what holds a
GPU (``nvidia_drm``, nvidia-persistenced, DCGM, nvsm, persistence mode set by hand) blocks only
an Ampere mode change; compute processes block any change of their GPU.

A GPU is judged by its index (mig-parted's ``devices`` are NVML indexes, and ``mig -lgi`` /
``-lci`` number GPUs the same way, read in the same moment), but every command that changes it
names it by the PCI bus id nvidia-smi gave for it (``GpuChange.target``): the index is NVML's
enumeration order, which NVIDIA does not promise to keep (a GPU that fails to come up after a
driver reload or reboot moves the ones after it up), so a command aimed by index could give one
GPU another's layout. A GPU to change whose bus id is unreadable, or shared with another GPU of
the listing, refuses the plan: nothing is aimed at it by a guess.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaudit.model.mig_spec import MigEntry
from gpuaudit.model.snapshot import bus_key
from gpuaudit.operations.mig_models import PROFILE, family_of, resets_to_change_mode
from gpuaudit.operations.unit_state import RUNNING, is_masked

PERSISTENCED = "nvidia-persistenced.service"
# Daemons that keep every GPU open, in the order they are stopped (consumers first); started
# again in reverse. As mig-parted's hooks stop them (nvsm, nvidia-dcgm, dcgm-exporter).
HOLDER_UNITS = (
    "dcgm-exporter.service", "nvsm.service", "nvidia-dcgm.service", "dcgm.service", PERSISTENCED,
)  # fmt: skip
# Read but never stopped: on NVSwitch systems the fabric manager must run for a reset GPU to
# rejoin the NVLink fabric, and stopping it takes the fabric down for every GPU.
FABRIC_MANAGER = "nvidia-fabricmanager.service"
UNITS = (*HOLDER_UNITS, FABRIC_MANAGER)

ENABLED, DISABLED = "Enabled", "Disabled"
# A PCI bus id as nvidia-smi prints it (00000000:07:00.0) or shortened (0000:07:00.0): what its
# -i accepts besides an index or a UUID.
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str


@dataclass(frozen=True)
class GpuMig:
    index: int
    name: str
    bus_id: str
    pci_id: str | None  # "0x20B210DE", as mig-parted's device-filter spells it
    mig_current: str | None  # None: the GPU has no MIG
    mig_pending: str | None
    persistence_mode: str | None
    gpu_instances: tuple[tuple[int, str], ...] = ()  # (GPU instance id, profile)
    compute_instances: tuple[tuple[int, int], ...] = ()  # (GPU instance id, compute instance id)
    processes: tuple[GpuProcess, ...] = ()

    @property
    def supports_mig(self) -> bool:
        return _mode(self.mig_current) in (ENABLED, DISABLED)

    @property
    def target(self) -> str | None:
        """What commands name this GPU by (``nvidia-smi -i``): its PCI bus id, as nvidia-smi
        printed it; None where that is not a bus id (``[N/A]``, an error, nothing)."""
        bus_id = self.bus_id.strip()
        return bus_id if _BUS_ID.match(bus_id) else None

    def layout(self) -> dict[str, int]:
        return dict(Counter(profile.lower() for _, profile in self.gpu_instances))

    def instances_without_one_ci(self) -> int:
        per_gi = Counter(gi for gi, _ in self.compute_instances)
        return sum(1 for gi, _ in self.gpu_instances if per_gi.get(gi, 0) != 1)


@dataclass(frozen=True)
class HostMig:
    gpus: tuple[GpuMig, ...]
    instances_known: bool = True
    processes_known: bool = True
    nvidia_drm: bool | None = False
    active_units: tuple[str, ...] = ()  # the HOLDER_UNITS that run, in HOLDER_UNITS order
    # HOLDER_UNITS that run although masked (masking stops nothing): they hold the GPUs, and
    # once stopped they could not be started again until someone unmasks them.
    masked_running: tuple[str, ...] = ()
    fabric_manager_active: bool = False
    problems: tuple[str, ...] = ()

    @classmethod
    def from_facts(cls, mig: Mapping[str, Any], units: Mapping[str, Mapping[str, str]]) -> HostMig:
        gpus = tuple(
            GpuMig(
                index=int(gpu["index"]),
                name=str(gpu["name"]),
                bus_id=str(gpu["bus_id"]),
                pci_id=gpu.get("pci_id"),
                mig_current=gpu.get("mig_current"),
                mig_pending=gpu.get("mig_pending"),
                persistence_mode=gpu.get("persistence_mode"),
                gpu_instances=tuple(
                    (int(gi["id"]), str(gi["profile"])) for gi in gpu.get("gpu_instances", [])
                ),
                compute_instances=tuple(
                    (int(ci["gpu_instance"]), int(ci["id"]))
                    for ci in gpu.get("compute_instances", [])
                ),
                processes=tuple(
                    GpuProcess(int(p["pid"]), str(p["name"])) for p in gpu.get("processes", [])
                ),
            )
            for gpu in mig.get("gpus", [])
        )
        running = [u for u in HOLDER_UNITS if units.get(u, {}).get("active") in RUNNING]
        masked = {u for u in running if is_masked(units[u])}
        return cls(
            gpus=gpus,
            instances_known=bool(mig.get("instances_known")),
            processes_known=bool(mig.get("processes_known")),
            nvidia_drm=mig.get("nvidia_drm"),
            active_units=tuple(u for u in running if u not in masked),
            masked_running=tuple(u for u in running if u in masked),
            fabric_manager_active=units.get(FABRIC_MANAGER, {}).get("active") == "active",
            problems=tuple(mig.get("problems", [])),
        )


@dataclass(frozen=True)
class GpuChange:
    """One GPU to bring to its config entry."""

    index: int
    name: str
    differences: tuple[str, ...]
    target: str | None  # the PCI bus id commands name the GPU by (GpuMig.target)
    wanted_mode: str  # ENABLED or DISABLED
    wanted_instances: tuple[str, ...]  # GPU instance profiles, sorted (what -lgi must show)
    set_mode: bool  # issue nvidia-smi -mig
    reset: bool  # Ampere: reset the GPU if the mode change has not taken effect
    destroy_compute: bool
    destroy_gpu: bool
    create: tuple[str, ...]  # GPU instance profiles to create, largest first

    @property
    def changes_mode(self) -> bool:
        return self.set_mode or self.reset


@dataclass(frozen=True)
class MigPlan:
    config: str
    matched: tuple[int, ...]  # the GPUs the config has an entry for
    changes: tuple[GpuChange, ...] = ()
    unknown: tuple[str, ...] = ()  # what could not be read: nothing can be judged or changed
    impossible: tuple[str, ...] = ()  # what the config wants that a GPU cannot be
    refusals: tuple[str, ...] = ()  # why the changes must not be made now
    stop_units: tuple[str, ...] = ()  # stopped before, started after (stop_services=True)
    persistence_off: tuple[int, ...] = ()  # GPUs whose -pm 1 is turned off around the reset

    @property
    def in_sync(self) -> bool:
        return not self.changes and not self.unknown and not self.impossible


def plan_mig(
    host: HostMig, config: str, entries: Sequence[MigEntry], stop_services: bool = False
) -> MigPlan:
    wanted = {g.index: e for g in host.gpus if (e := _entry_for(g, entries)) is not None}
    matched = tuple(sorted(wanted))
    unknown: list[str] = []
    impossible: list[str] = []
    refusals: list[str] = []
    changes: list[GpuChange] = []
    for gpu in host.gpus:
        entry = wanted.get(gpu.index)
        if entry is None:
            continue
        if entry.mig_enabled and not gpu.supports_mig:
            impossible.append(f"{_label(gpu)} does not support MIG, the config wants it enabled")
            continue
        if _mode(gpu.mig_current) == ENABLED and not host.instances_known:
            unknown.append(f"{_label(gpu)}: its MIG instances could not be read")
            continue
        change = _change_for(gpu, entry)
        if change is not None:
            changes.append(change)
            refusals += _profile_problems(gpu, entry)
    if host.instances_known is False and unknown:
        unknown += [p for p in host.problems if "mig -l" in p]
    resetting = [c for c in changes if c.reset]
    refusals += _target_refusals(host, changes)
    refusals += _process_refusals(host, changes)
    stop_units: tuple[str, ...] = ()
    persistence_off: tuple[int, ...] = ()
    if resetting:
        held, stop_units, persistence_off = _holders(host, resetting, stop_services)
        refusals += held
    return MigPlan(
        config=config,
        matched=matched,
        changes=tuple(changes),
        unknown=tuple(unknown),
        impossible=tuple(impossible),
        refusals=tuple(refusals),
        stop_units=stop_units,
        persistence_off=persistence_off,
    )


def _entry_for(gpu: GpuMig, entries: Sequence[MigEntry]) -> MigEntry | None:
    # The last matching entry wins, as when mig-parted applies the entries in order.
    return next((e for e in reversed(entries) if e.matches(gpu.index, gpu.pci_id)), None)


def _change_for(gpu: GpuMig, entry: MigEntry) -> GpuChange | None:
    current, pending = _mode(gpu.mig_current), _mode(gpu.mig_pending)
    mode = ENABLED if entry.mig_enabled else DISABLED
    if not gpu.supports_mig:
        return None  # wants MIG disabled on a GPU without MIG: nothing to do
    differences: list[str] = []
    if current != mode:
        note = f" ({pending} pending a GPU reset)" if pending == mode else ""
        differences.append(f"MIG mode {current}{note}, wanted {mode}")
    elif pending != mode:
        differences.append(f"MIG mode change to {pending} pending, wanted {mode}")
    # Counted by GPU instance, as the audit (GA203) counts them: "1c.3g.40gb" is a 3g.40gb.
    wanted = dict(sorted(entry.gpu_instances().items())) if entry.mig_enabled else {}
    have = gpu.layout() if current == ENABLED else {}
    incomplete = gpu.instances_without_one_ci() if current == ENABLED else 0
    relayout = current == ENABLED and (have != wanted or bool(incomplete))
    if current == ENABLED and mode == ENABLED:
        if have != wanted:
            differences.append(f"GPU instances {_counts(have)}, wanted {_counts(wanted)}")
        elif incomplete:
            differences.append(f"{incomplete} GPU instance(s) without exactly one compute instance")
    if not differences:
        return None
    destroy = relayout or (current == ENABLED and mode == DISABLED)
    create = _largest_first(wanted) if (current != ENABLED or relayout) and mode == ENABLED else ()
    return GpuChange(
        index=gpu.index,
        name=gpu.name,
        differences=tuple(differences),
        target=gpu.target,
        wanted_mode=mode,
        wanted_instances=tuple(sorted(_expand(wanted))),
        set_mode=current != mode or pending != mode,
        reset=current != mode and resets_to_change_mode(gpu.name),
        destroy_compute=destroy and bool(gpu.compute_instances),
        destroy_gpu=destroy and bool(gpu.gpu_instances),
        create=create,
    )


def _profile_problems(gpu: GpuMig, entry: MigEntry) -> list[str]:
    if not entry.mig_enabled:
        return []
    problems = []
    profiles = [p for p, n in entry.mig_devices.items() if n]
    compute = [p for p in profiles if not PROFILE.match(p)]
    if compute:
        problems.append(
            f"{_label(gpu)}: compute-instance profiles ({', '.join(compute)}) are not applied "
            "by this operation; use nvidia-mig-parted for them"
        )
    family = family_of(gpu.name)
    if family is None or compute:
        return problems  # a model missing from the table: the driver and the check decide
    missing = [p for p in profiles if p not in family.profiles]
    if missing:
        problems.append(
            f"{_label(gpu)} offers no MIG profile {', '.join(missing)} "
            f"(it offers {', '.join(sorted(family.profiles))})"
        )
        return problems
    counts = {p: n for p, n in entry.mig_devices.items() if n}
    compute_slices = sum(int(p.split("g.", 1)[0]) * n for p, n in counts.items())
    memory_slices = sum(family.memory_slices_of(p) * n for p, n in counts.items())
    if compute_slices > family.compute_slices or memory_slices > family.memory_slices:
        problems.append(
            f"{_label(gpu)}: {_counts(counts)} does not fit "
            f"({compute_slices}/{family.compute_slices} compute and "
            f"{memory_slices}/{family.memory_slices} memory slices)"
        )
    return problems


def _target_refusals(host: HostMig, changes: list[GpuChange]) -> list[str]:
    """A GPU to change that commands could not name by a bus id of its own."""
    by_index = {gpu.index: gpu for gpu in host.gpus}
    listed = Counter(bus_key(g.target) for g in host.gpus if g.target)
    refusals = []
    for change in changes:
        gpu = by_index[change.index]
        if change.target is None:
            refusals.append(
                f"{_label(gpu)}: nvidia-smi gave no PCI bus id for it ({gpu.bus_id.strip()!r}), "
                "so no command can be aimed at this GPU alone (its index may name another GPU "
                "by the time the command runs)"
            )
        elif listed[bus_key(change.target)] > 1:
            refusals.append(
                f"{_label(gpu)}: its PCI bus id {change.target} is listed for more than one GPU, "
                "so a command aimed at it could change another"
            )
    return refusals


def _process_refusals(host: HostMig, changes: list[GpuChange]) -> list[str]:
    if changes and not host.processes_known:
        reasons = [p for p in host.problems if "compute processes" in p]
        return ["cannot tell which GPUs run compute processes" + _why(reasons)]
    by_index = {gpu.index: gpu for gpu in host.gpus}
    refusals = []
    for change in changes:
        gpu = by_index[change.index]
        if gpu.processes:
            running = ", ".join(f"pid {p.pid} {p.name}" for p in gpu.processes)
            refusals.append(f"{_label(gpu)} runs compute processes ({running}): drain it first")
    return refusals


def _holders(
    host: HostMig, resetting: list[GpuChange], stop_services: bool
) -> tuple[list[str], tuple[str, ...], tuple[int, ...]]:
    """What would make the reset of an Ampere GPU fail, and what stop_services stops."""
    gpus = "GPU " + ", ".join(str(c.index) for c in resetting)
    fails = f"so the GPU reset that the MIG mode change of {gpus} needs would fail"
    refusals = []
    if host.nvidia_drm:
        refusals.append(
            f"nvidia_drm is loaded and holds the GPUs, {fails} "
            "(unload it with modprobe -r nvidia_drm, or reboot)"
        )
    elif host.nvidia_drm is None:
        reasons = [p for p in host.problems if "modules" in p]
        refusals.append(
            f"cannot tell whether nvidia_drm is loaded{_why(reasons)}, which would make the "
            f"GPU reset that the MIG mode change of {gpus} needs fail"
        )
    if host.masked_running:
        names = " ".join(host.masked_running)
        verbs = ("is", "holds") if len(host.masked_running) == 1 else ("are", "hold")
        refusals.append(
            f"{', '.join(host.masked_running)} {verbs[0]} masked but running and {verbs[1]} the "
            f"GPUs, {fails}; a masked unit stopped here could "
            f"not be started again, so stop_services leaves it alone: stop it by hand "
            f"(systemctl stop {names}) or unmask it (systemctl unmask {names})"
        )
    by_index = {gpu.index: gpu for gpu in host.gpus}
    daemon = (*host.active_units, *host.masked_running)
    by_hand = tuple(
        c.index
        for c in resetting
        if PERSISTENCED not in daemon and _mode(by_index[c.index].persistence_mode) == ENABLED
    )
    if stop_services:
        return refusals, host.active_units, by_hand
    if host.active_units:
        refusals.append(
            f"{', '.join(host.active_units)} hold the GPUs, {fails}; stop them or pass "
            "stop_services=True"
        )
    if by_hand:
        refusals.append(
            f"persistence mode is on for GPU {', '.join(map(str, by_hand))} (nvidia-smi -pm 1) "
            f"and holds it, {fails}; pass stop_services=True to turn it off around the reset"
        )
    return refusals, (), ()


def _mode(value: str | None) -> str | None:
    text = (value or "").strip().lower()
    return {"enabled": ENABLED, "disabled": DISABLED}.get(text)


def _label(gpu: GpuMig) -> str:
    return f"GPU {gpu.index} ({gpu.name})"


def _why(reasons: list[str]) -> str:
    return f" ({'; '.join(reasons)})" if reasons else ""


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n}× {p}" for p, n in sorted(counts.items())) or "none"


def _expand(counts: Mapping[str, int]) -> list[str]:
    return [profile for profile, n in counts.items() for _ in range(n)]


def _largest_first(counts: Mapping[str, int]) -> tuple[str, ...]:
    """Creation order: larger instances first, so that the driver's placement (lowest free
    start) leaves room for the small ones; the MIG user guide shows a 3g profile refused when
    created after 1g and 2g ones."""

    def size(profile: str) -> tuple[int, int]:
        match = PROFILE.match(profile)
        return (-int(match["g"]), -int(match["gb"])) if match else (0, 0)

    return tuple(sorted(_expand(counts), key=lambda p: (size(p), p)))


def format_gpus(indexes: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``0-2, 5``."""
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
