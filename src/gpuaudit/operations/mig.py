"""Apply the site's MIG layout (NVIDIA mig-parted ``mig-configs``) to a host, safely (GA203)."""

from __future__ import annotations

from collections.abc import Generator

from pyinfra import host
from pyinfra.api import StringCommand, operation

from gpuaudit.facts.mig import MigState
from gpuaudit.facts.remediation import SystemdUnits
from gpuaudit.model.mig_spec import MigSpecError, read_mig_configs
from gpuaudit.operations.mig_commands import plan_commands
from gpuaudit.operations.mig_plan import UNITS, HostMig, MigPlan, format_gpus, plan_mig
from gpuaudit.operations.plan import refusal
from gpuaudit.operations.settings import host_settings


@operation()
def apply(
    config: str | None = None, assert_only: bool = False, stop_services: bool | None = None
) -> Generator[str | StringCommand, None, None]:
    """
    Bring the host's GPUs to a MIG layout of the site's mig-parted configs, touching only the
    GPUs that differ.

    + config: the layout's name in ``mig_configs`` (default: the host's ``mig_config_name``)
    + assert_only: change nothing; fail, naming each difference, when the host differs
      (``nvidia-mig-parted assert``)
    + stop_services: stop the daemons that hold the GPUs (nvidia-persistenced, DCGM, nvsm,
      dcgm-exporter) around a mode change that needs a GPU reset, and start them again after

    The layouts come from the host's settings: the site policy's ``mig-configs`` (mig-parted's
    format) or host data ``mig_configs``; ``stop_services`` defaults to the policy's
    ``mig_stop_services``. Before any change it refuses, naming the GPUs and why,
    when a GPU to change runs compute processes, when a profile is not one the GPU offers or
    the layout does not fit, and, for an Ampere GPU whose mode change needs a reset, when
    ``nvidia_drm`` is loaded or a daemon or persistence mode holds the GPUs (unless
    ``stop_services``). Its last command reads the layout back and fails when the partitions
    are not there. See docs/remediation-mig.md.

    .. code:: python

        mig.apply(name="Apply the MIG layout", stop_services=True)
    """
    settings = host_settings()
    name = config or settings.mig_config_name
    if stop_services is None:
        stop_services = bool(settings.get("mig_stop_services"))
    if not name:
        host.noop("no MIG config is named for this host (mig_config_name); nothing to apply")
        return
    name = str(name)
    try:
        configs = read_mig_configs(dict(settings.mig_configs))
    except MigSpecError as exc:
        yield refusal(f"mig_configs: {exc}")
        return
    if name not in configs:
        known = ", ".join(sorted(configs)) or "none"
        yield refusal(f"MIG config {name!r} is not in mig_configs (known: {known})")
        return
    facts = host.get_fact(MigState)
    if not facts.get("answered"):
        problem = facts.get("problem")
        host.noop(f"nvidia-smi did not answer ({problem}); MIG config {name} not applied")
        return
    # A masked daemon that runs still holds the GPUs; the plan refuses to stop it, since it
    # could not be started again.
    units = host.get_fact(SystemdUnits, units=list(UNITS))
    plan = plan_mig(HostMig.from_facts(facts, units), name, configs[name], stop_services)
    if plan.unknown:
        yield refusal(_refusal(plan, "cannot be judged", plan.unknown))
        return
    if plan.impossible:
        yield refusal(_refusal(plan, "cannot be applied", plan.impossible))
        return
    if not plan.matched:
        host.noop(f"MIG config {name} has no entry for any GPU of this host")
        return
    if plan.in_sync:
        gpus = "GPUs" if len(plan.matched) > 1 else "GPU"
        host.noop(f"MIG layout {name} already applied on {gpus} {format_gpus(plan.matched)}")
        return
    differences = [f"GPU {c.index}: {'; '.join(c.differences)}" for c in plan.changes]
    if assert_only:
        yield refusal(_refusal(plan, "is not applied", differences))
        return
    if plan.refusals:
        yield refusal(_refusal(plan, "not applied, nothing changed", plan.refusals))
        return
    yield from plan_commands(plan)


def _refusal(plan: MigPlan, verdict: str, reasons: tuple[str, ...] | list[str]) -> str:
    return f"MIG config {plan.config} {verdict}: " + "; ".join(reasons)
