"""``/proc/modules`` of a simulated host: the NVIDIA kernel modules its state has loaded.

``proc_modules(state)`` is the file's text, for the host's root directory (``GPUAUDIT_ROOT``):
``nvidia``, ``nvidia_modeset`` and ``nvidia_uvm`` while the driver is loaded, ``nvidia_drm``
too with the ``nvidia_drm_loaded`` fault. The line layout is the kernel's (name, size, use
count, users, state, address); sizes and addresses are not modelled and read 0.
"""

from __future__ import annotations

from gpuaudit.sim.state import driver_answers, has_fault

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpuaudit.sim.state import State

PROC_MODULES = "proc/modules"


def loaded_modules(state: State) -> list[tuple[str, list[str]]]:
    """(module, modules using it), in the order the kernel lists them (newest first)."""
    if "nvidia" not in state or not driver_answers(state):
        return []
    drm = has_fault(state, "nvidia_drm_loaded")
    modules: list[tuple[str, list[str]]] = []
    if drm:
        modules.append(("nvidia_drm", []))
    modules += [
        ("nvidia_modeset", ["nvidia_drm"] if drm else []),
        ("nvidia_uvm", []),
        ("nvidia", ["nvidia_uvm", "nvidia_modeset"]),
    ]
    return modules


def proc_modules(state: State) -> str:
    lines = []
    for name, users in loaded_modules(state):
        used_by = "".join(f"{user}," for user in users) or "-"
        lines.append(f"{name} 0 {len(users)} {used_by} Live 0x0000000000000000")
    return "".join(f"{line}\n" for line in lines)
