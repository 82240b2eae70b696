"""The mutable state of one simulated GPU host, kept in a JSON file between tool calls.

Every simulated tool (``nvidia-smi``, ``systemctl``, ``dmesg`` …) is a short-lived process: it
reads this file, answers, and writes it back when the invocation changes something
(``nvidia-smi -pm 1``, ``-mig 1``, ``systemctl stop``). The file is the host: what the real
tools would ask the kernel, NVML or systemd, the simulator reads here.

Shape (``build.build_state`` writes it from a profile; unknown profile keys are refused there):

- ``name`` / ``hostname`` / ``vendor`` (``nvidia`` | ``amd``) / ``kernel_release`` / ``os``
- ``nvidia``: ``xml`` (packaged base fixture), ``driver`` {``loaded``, ``installed``, ``cuda``},
  ``product`` / ``architecture`` (``Ampere``, ``Hopper`` …, from the XML's
  ``product_architecture``), ``gpus`` (one dict per GPU: index, bus_id, uuid, serial, minor,
  persistence_mode, lost, unknown_error, mig, processes [{pid, name, gpu_instance}: compute
  processes, shown by ``--query-compute-apps``; ``gpu_instance`` places one in a MIG GPU
  instance], reset_unsupported [a GPU reset is refused, as under GPU passthrough], overrides),
  ``topology`` {fixture, replace}, ``nvswitches``, ``lspci`` {``drop``: GPU indices the bus
  listing lacks, ``add``: bus ids of GPUs only it shows}
- ``amd``: ``rocm_json`` (packaged rocm-smi fixture), ``bus_ids``
- ``kernel_log``: the kernel ring buffer, oldest line first
- ``previous_kernel_log``: the kernel log of the boot before this one, as a persistent journal
  keeps it (``journalctl -k -b -1``), and ``previous_boot_time`` when that boot began; absent
  where the journal holds no earlier boot (fault ``journal_volatile``). ``earlier_boots``: the
  boots before that one, newest first (``-b -2``, ``-b -3``, …), each ``kernel_log`` and
  ``boot_time``; at most :data:`KEPT_BOOTS`, as journald rotates the oldest away
- ``services``: unit → {active, enabled}; a unit absent here is not installed
- ``packages``: [{name, version, arch}], ``holds``: [name]
- ``sysctls``: key → value, ``device_nodes``: node name → {mode, owner, group}
- ``faults``: name → parameters (see ``FAULTS``)
- ``events``: the state-changing commands the host has seen, newest last (bounded)
- rehearsals (see ``rehearsal.py``): ``upgrade_faults`` name → parameters (see
  ``UPGRADE_FAULTS``; from the inventory's ``sim_upgrade_faults``) and ``upgrade_faults_fired``
  (the one-shot ones already spent), ``reboot_seconds`` (how long a reboot keeps the host
  down; the inventory's ``sim_reboot_seconds``), ``down_until`` (wall-clock time the host
  answers again after its last reboot), ``stays_down`` (it never came back), ``boot_id`` and
  ``boot_time`` (of the current boot); ``nvidia.driver.last_loaded``: the version loaded before
  the modules were unloaded

Imports stay light (json, os, fcntl; typing only for the type checker): each tool call is a
fresh Python process and the collector makes some thirty of them per host.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any

    State = dict[str, Any]

SCHEMA_VERSION = 1
# The boots before the previous one a simulated journal keeps (earlier_boots).
KEPT_BOOTS = 8
STATE_ENV = "GPUAUDIT_SIM_STATE"
MAX_EVENTS = 200

# Host-level faults a profile may inject. Per-GPU failures (a GPU fallen off the bus, a pending
# row remap, a degraded link) are GPU overrides instead, because they name a GPU.
FAULTS: dict[str, str] = {
    "driver_not_loaded": "the kernel module is not loaded: nvidia-smi exits 9 with the real "
    "message, /proc/driver/nvidia and /dev/nvidia* are absent",
    "unreachable": "the connector refuses to connect (the host is down or firewalled)",
    "auth_refused": "the connector refuses the login with the error pyinfra's SSH connector "
    "raises for a key the server does not accept (Authentication failed.)",
    "nvidia_smi_missing": "the driver is loaded but nvidia-smi is not installed",
    "hang": "a tool sleeps as on a wedged host (param tool: nvidia-smi, the default, as with a "
    "hung driver; lspci, stuck reading a dead device's config space, which the collector does "
    "not bound; param seconds, default 3600)",
    "xid_storm": "the kernel log is flooded with XID lines (a real 629-line XID 13 flood)",
    "huge_kernel_log": "dmesg streams about 200 MiB (param mib) made up on the fly, the host's "
    "own kernel-log lines (XIDs) sprinkled in every so many lines (param every, default 200), "
    "and one runaway 1 MiB NVRM line",
    "truncated_xml": "nvidia-smi -q -x stops part way (param fraction, default 0.5; param rc)",
    "xml_entities": "nvidia-smi -q -x carries a DOCTYPE internal subset declaring nested "
    "entities (billion laughs) and uses the largest in GPU 0's product name",
    "non_utf8": "bytes that are not UTF-8: a Latin-1 byte in one GPU's product name in "
    "nvidia-smi -q -x (param gpu, default 0) and in the process name of XID lines in dmesg",
    "ring_wrapped": "the kernel ring buffer has wrapped: dmesg no longer prints the boot's "
    "first line ([    0.000000] Linux version ...), only the host's kernel-log lines",
    "dmesg_restricted": "kernel.dmesg_restrict=1: dmesg is refused, journalctl -k still works",
    "journal_unreadable": "the audit user may open no journal file (in neither adm nor "
    "systemd-journal): journalctl prints '-- No entries --', its hint on stderr, and exits 0",
    "journal_volatile": "the journal is kept in memory only (journald Storage=volatile): "
    "journalctl -k -b -1 finds no earlier boot, and a reboot loses the kernel log",
    "nvidia_drm_loaded": "the nvidia_drm kernel module is loaded: it holds every GPU, so a GPU "
    'reset fails with "In use by another client" and an Ampere MIG mode change (which needs '
    "a reset) stays pending; /proc/modules lists the module, and the display stack holds it, so "
    "modprobe -r refuses to unload it (only a reboot replaces the driver)",
}
# Faults a staged-upgrade rehearsal injects through the inventory (host data
# ``sim_upgrade_faults: {name: {params}}``, see rehearsal.py); each waits for the upgrade step
# that sets it off. "Newer" compares driver versions number by number.
UPGRADE_FAULTS: dict[str, str] = {
    "install_fails": "apt-get install that moves a driver package to a newer driver (or to param "
    "version) exits 100 with dpkg's post-installation error for the package (param package, "
    "default nvidia-dkms-<branch>) and changes no package",
    "xid_after_upgrade": "when a newer driver (or param version) is loaded, by modprobe or a "
    "reboot, the kernel log gets a real XID line for GPU param gpu (default 0): param xid 119 "
    "(the default: GSP RPC timeout) or 79 (fallen off the bus, which also loses the GPU)",
    "gpu_missing_after_reboot": "the next reboot loses GPU param gpu (default 0): the driver "
    "does not list it (a reboot after that brings it back)",
    "never_comes_back": "the next reboot leaves the host down: the connector refuses it until "
    "the fault is removed from the inventory or the host is reset",
}
# The tools the ``hang`` fault can stop.
HANGING_TOOLS = ("nvidia-smi", "lspci")


class SimStateError(RuntimeError):
    """The state file is missing, unreadable, or from another schema."""


def state_path_from_env() -> Path:
    value = os.environ.get(STATE_ENV)
    if not value:
        raise SimStateError(f"{STATE_ENV} is not set: run the tool through a simulated host")
    return Path(value)


def load_state(path: Path) -> State:
    try:
        state: State = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SimStateError(f"no simulated host state at {path}") from exc
    except (OSError, ValueError) as exc:
        raise SimStateError(f"unreadable simulated host state {path}: {exc}") from exc
    if state.get("schema") != SCHEMA_VERSION:
        raise SimStateError(f"{path}: state schema {state.get('schema')!r}, want {SCHEMA_VERSION}")
    return state


def save_state(path: Path, state: State) -> None:
    # Write-then-rename: a reader never sees half a file, even if the writer is killed (a
    # `timeout` around a hung nvidia-smi).
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(state, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


class edit_state:
    """Read-modify-write under an exclusive lock, so two tools changing one host at once
    (pyinfra runs operations of one host in order, but a test may not) lose no update. The
    state is written back only when the block ends without an exception."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: Any = None

    def __enter__(self) -> State:
        self._lock = open(self.path.with_name(self.path.name + ".lock"), "a", encoding="utf-8")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        try:
            self.state = load_state(self.path)
        except BaseException:
            self._lock.close()
            raise
        return self.state

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                save_state(self.path, self.state)
        finally:
            self._lock.close()


def has_fault(state: State, name: str) -> bool:
    return name in state.get("faults", {})


def fault_param(state: State, name: str, key: str, default: Any) -> Any:
    params = state.get("faults", {}).get(name) or {}
    return params.get(key, default)


def hang_if_wedged(state: State, tool: str) -> None:
    """Sleep as ``tool`` does on a wedged host, when the ``hang`` fault names it."""
    if has_fault(state, "hang") and fault_param(state, "hang", "tool", "nvidia-smi") == tool:
        import time

        time.sleep(float(fault_param(state, "hang", "seconds", 3600)))


def record_event(state: State, text: str) -> None:
    events: list[str] = state.setdefault("events", [])
    events.append(text)
    del events[:-MAX_EVENTS]


def gpus(state: State) -> list[dict[str, Any]]:
    return list(state.get("nvidia", {}).get("gpus", []))


def visible_gpus(state: State) -> list[dict[str, Any]]:
    """GPUs NVML can still reach (a GPU fallen off the bus is gone until a reboot)."""
    return [gpu for gpu in gpus(state) if not gpu.get("lost")]


def select_gpus(state: State, selector: str | None) -> list[dict[str, Any]]:
    """GPUs named by nvidia-smi's ``-i``: comma-separated indices, bus ids or UUIDs."""
    all_gpus = gpus(state)
    if selector is None:
        return all_gpus
    chosen: list[dict[str, Any]] = []
    for item in (part.strip() for part in selector.split(",")):
        match = [gpu for gpu in all_gpus if _gpu_matches(gpu, item)]
        if not match:
            raise LookupError(item)
        chosen.extend(gpu for gpu in match if gpu not in chosen)
    return chosen


def _gpu_matches(gpu: dict[str, Any], item: str) -> bool:
    if item.isdigit():
        return int(item) == gpu["index"]
    if item.lower().startswith("gpu-"):
        return item.lower() == gpu["uuid"].lower()
    return ":" in item and bus_key(item) == bus_key(gpu["bus_id"])


def bus_key(bus_id: str) -> str:
    """One spelling for every form of a PCI address: ``3b:00.0``, ``0000:3B:00``,
    ``00000000:3B:00.0`` all become ``0000:3b:00.0``."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0000")
    domain, bus, devfn = parts[-3], parts[-2], parts[-1]
    if "." not in devfn:
        devfn += ".0"
    return f"{domain[-4:].zfill(4)}:{bus.zfill(2)}:{devfn}"


def driver_answers(state: State) -> bool:
    driver = state.get("nvidia", {}).get("driver", {})
    return bool(driver.get("loaded")) and not has_fault(state, "driver_not_loaded")


def mig_mode_needs_reset(state: State) -> bool:
    """Whether this host's GPUs apply a MIG mode change through a GPU reset: Ampere (A100, A30)
    does, and the driver tries that reset itself; Hopper and later apply it without one."""
    nvidia = state.get("nvidia") or {}
    architecture = nvidia.get("architecture")
    if architecture is None:  # a state written before the architecture was recorded
        product = str(nvidia.get("product", ""))
        return any(model in product for model in ("A100", "A30", "A800"))
    return architecture == "Ampere"


def gpu_reset(gpu: dict[str, Any]) -> None:
    """What a GPU reset applies: a pending MIG mode, pending row remaps, volatile ECC counts."""
    mig = gpu.get("mig")
    if mig is not None and mig["current"] != mig["pending"]:
        mig["current"] = mig["pending"]
        mig["gpu_instances"] = []
    # A reset is NVIDIA's remedy for a GPU whose queries fail with "Unknown Error".
    gpu["unknown_error"] = False
    overrides = gpu.setdefault("overrides", {})
    remap = overrides.get("remapped_rows")
    if remap and remap.get("pending"):
        remap["pending"] = False
    ecc = overrides.get("ecc")
    if ecc:
        ecc.pop("volatile", None)


def reboot(state: State) -> None:
    """What a reboot changes on a real host: the installed driver becomes the loaded one, every
    GPU is reset (a GPU fallen off the bus usually comes back: NVIDIA's XID 79 action is a
    reboot), every process ends, enabled services start, disabled ones stay down, and the
    kernel log starts empty (a persistent journal keeps the old one as the previous boot's). An
    Ampere GPU keeps its MIG mode (a status bit in the InfoROM, so a pending change takes
    effect); later generations keep it only while the driver is loaded, and come back with MIG
    disabled (NVIDIA MIG user guide, "GPU Reset on Hopper+ GPUs")."""
    nvidia = state.get("nvidia")
    if nvidia:
        driver = nvidia["driver"]
        driver["loaded"] = driver.get("installed")
        keeps_mig_mode = mig_mode_needs_reset(state)
        for gpu in nvidia["gpus"]:
            gpu["lost"] = False
            gpu.pop("persistence_pinned", None)
            gpu["processes"] = []
            gpu_reset(gpu)
            mig = gpu.get("mig")
            if mig is not None and not keeps_mig_mode:
                mig.update(current="Disabled", pending="Disabled", gpu_instances=[])
    for unit in state.get("services", {}).values():
        unit["active"] = "active" if unit.get("enabled") == "enabled" else "inactive"
    sync_persistence(state)
    if "journal_volatile" not in state.get("faults", {}):
        if "previous_kernel_log" in state:
            kept = {
                "kernel_log": state["previous_kernel_log"],
                "boot_time": state.get("previous_boot_time"),
            }
            earlier = [kept, *state.get("earlier_boots", [])]
            state["earlier_boots"] = earlier[:KEPT_BOOTS]
        state["previous_kernel_log"] = state.get("kernel_log", [])
        state["previous_boot_time"] = state.get("boot_time")
    state["kernel_log"] = []
    record_event(state, "reboot")


def sync_persistence(state: State) -> None:
    """nvidia-persistenced turns persistence mode on for every GPU while it runs and off when
    it stops; a GPU set by hand (``nvidia-smi -pm``) keeps its own value until then."""
    unit = state.get("services", {}).get("nvidia-persistenced")
    running = bool(unit) and unit.get("active") == "active"
    for gpu in state.get("nvidia", {}).get("gpus", []):
        if running:
            gpu["persistence_mode"] = "Enabled"
        elif not gpu.get("persistence_pinned"):
            gpu["persistence_mode"] = "Disabled"
