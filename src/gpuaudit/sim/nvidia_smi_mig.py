"""``nvidia-smi mig …`` on a simulated host: list, create and destroy GPU / compute instances.

Only whole-GPU-instance compute instances are simulated (``-C``, or ``-cci`` with the full
profile), which is what ``mig -cgi <profiles> -C`` and mig-parted layouts create.

A compute process in a GPU instance (a GPU's ``processes`` entry with that ``gpu_instance``; one
without it counts for every instance of its GPU) makes ``-dci`` / ``-dgi`` of that instance fail
with "In use by another client". Creating instances beside it is allowed: MIG reconfigures a
GPU's free slices while other instances run work.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuaudit.sim import mig as mig_model
from gpuaudit.sim.nvidia_smi import IN_USE, RC_NOT_FOUND, RC_UNKNOWN, Usage, mig_gpus
from gpuaudit.sim.state import edit_state, record_event

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuaudit.sim.state import State

NO_MIG = "No MIG-enabled devices found."
NO_GI = "No GPU instances found: Not Found"
NO_CI = "No compute instances found: Not Found"


def run_mig(opts: dict[str, Any], state: State, state_path: Path) -> int:
    names = ("lgi", "lci", "lgipp", "cgi", "cci", "dci", "dgi")
    actions = [key for key in names if key in opts]
    extra = set(opts) - {*names, "id", "gi", "ci", "default_ci"}
    if len(actions) != 1 or extra:
        raise Usage("nvidia-smi (gpuaudit simulator): this mig invocation is not simulated")
    action = actions[0]
    if action in ("lgi", "lci"):
        return _list(action, opts, state)
    if action == "lgipp":
        gpus = mig_gpus(state, opts.get("id"))
        if not gpus:
            print(NO_MIG)
            return RC_NOT_FOUND
        product = state["nvidia"]["product"]
        sys.stdout.write(mig_model.render_lgipp([gpu["index"] for gpu in gpus], product))
        return 0
    with edit_state(state_path) as current:
        gpus = mig_gpus(current, opts.get("id"))
        if not gpus:
            print(NO_MIG)
            return RC_NOT_FOUND
        product = current["nvidia"]["product"]
        handler = {"cgi": _create_gi, "cci": _create_ci, "dci": _destroy_ci, "dgi": _destroy_gi}
        rc = handler[action](product, gpus, opts)
        record_event(current, f"nvidia-smi mig -{action} (rc {rc})")
        return rc


def _ids(value: str | None) -> set[int] | None:
    if value is None:
        return None
    try:
        return {int(part) for part in value.split(",") if part.strip()}
    except ValueError as exc:
        raise Usage() from exc


def _instances(gpu: dict[str, Any], gi_filter: set[int] | None) -> list[dict[str, Any]]:
    return [gi for gi in gpu["mig"]["gpu_instances"] if gi_filter is None or gi["id"] in gi_filter]


def _list(action: str, opts: dict[str, Any], state: State) -> int:
    gpus = mig_gpus(state, opts.get("id"))
    if not gpus:
        print(NO_MIG)
        return RC_NOT_FOUND
    product = state["nvidia"]["product"]
    gi_filter = _ids(opts.get("gi"))
    gi_rows = [
        (gpu["index"], gi, mig_model.find_profile(product, gi["profile"]))
        for gpu in gpus
        for gi in _instances(gpu, gi_filter)
    ]
    if not gi_rows:
        print(NO_GI)
        return RC_NOT_FOUND
    if action == "lgi":
        sys.stdout.write(mig_model.render_lgi(gi_rows))
        return 0
    ci_filter = _ids(opts.get("ci"))
    ci_rows = [
        (index, gi, ci, profile)
        for index, gi, profile in gi_rows
        for ci in gi["compute_instances"]
        if ci_filter is None or ci["id"] in ci_filter
    ]
    if not ci_rows:
        print(NO_CI)
        return RC_NOT_FOUND
    sys.stdout.write(mig_model.render_lci(ci_rows))
    return 0


def _create_gi(product: str, gpus: list[dict[str, Any]], opts: dict[str, Any]) -> int:
    wanted = [part.strip() for part in opts["cgi"].split(",") if part.strip()]
    failure = None
    for gpu in gpus:
        for name in wanted:
            try:
                gi = mig_model.create_gpu_instance(product, gpu["mig"], name)
            except mig_model.MigError as exc:
                where = f"GPU {gpu['index']:>2} using profile {name}"
                print(f"Unable to create a GPU instance on {where}: {exc}")
                failure = str(exc)
                continue
            profile = mig_model.find_profile(product, gi["profile"])
            print(
                f"Successfully created GPU instance ID {gi['id']:>2} on GPU {gpu['index']:>2} "
                f"using profile MIG {profile.name} (ID {profile.profile_id:>2})"
            )
            if opts.get("default_ci"):
                _print_ci_created(product, gpu, gi, mig_model.create_full_compute_instance(gi))
    if failure is not None:
        print(f"Failed to create GPU instances: {failure}")
        return RC_UNKNOWN
    return 0


def _print_ci_created(
    product: str, gpu: dict[str, Any], gi: dict[str, Any], ci: dict[str, Any]
) -> None:
    profile_id = mig_model.full_ci_profile_id(product, gi)
    print(
        f"Successfully created compute instance ID {ci['id']:>2} on GPU {gpu['index']:>2} "
        f"GPU instance ID {gi['id']:>2} using profile MIG {gi['profile']} (ID {profile_id:>2})"
    )


def _create_ci(product: str, gpus: list[dict[str, Any]], opts: dict[str, Any]) -> int:
    gi_filter = _ids(opts.get("gi"))
    for gpu in gpus:
        for gi in _instances(gpu, gi_filter):
            full = mig_model.full_ci_profile_id(product, gi)
            if opts["cci"].strip() not in (str(full), gi["profile"], f"MIG {gi['profile']}"):
                raise Usage(
                    "nvidia-smi (gpuaudit simulator): partial compute instances are not simulated"
                )
            if gi["compute_instances"]:
                print(
                    f"Unable to create a compute instance on GPU {gpu['index']:>2} GPU instance "
                    f"ID {gi['id']:>2} using profile {full}: Insufficient Resources"
                )
                return RC_UNKNOWN
            _print_ci_created(product, gpu, gi, mig_model.create_full_compute_instance(gi))
    return 0


def _in_use(gpu: dict[str, Any], gi: dict[str, Any]) -> bool:
    return any(
        process.get("gpu_instance") in (None, gi["id"]) for process in gpu.get("processes") or []
    )


def _destroy_ci(product: str, gpus: list[dict[str, Any]], opts: dict[str, Any]) -> int:
    gi_filter, ci_filter = _ids(opts.get("gi")), _ids(opts.get("ci"))
    instances = [(gpu, gi) for gpu in gpus for gi in _instances(gpu, gi_filter)]
    if not instances:
        print(NO_GI)
        return RC_NOT_FOUND
    destroyed = 0
    for gpu, gi in instances:
        for ci in list(gi["compute_instances"]):
            if ci_filter is not None and ci["id"] not in ci_filter:
                continue
            if _in_use(gpu, gi):
                print(
                    f"Unable to destroy compute instance ID {ci['id']:>2} from GPU "
                    f"{gpu['index']:>2} GPU instance ID {gi['id']:>2}: {IN_USE}"
                )
                print(f"Failed to destroy compute instances: {IN_USE}")
                return RC_UNKNOWN
            gi["compute_instances"].remove(ci)
            destroyed += 1
            print(
                f"Successfully destroyed compute instance ID {ci['id']:>2} from GPU "
                f"{gpu['index']:>2} GPU instance ID {gi['id']:>2}"
            )
    if not destroyed:
        print(NO_CI)
        return RC_NOT_FOUND
    return 0


def _destroy_gi(product: str, gpus: list[dict[str, Any]], opts: dict[str, Any]) -> int:
    gi_filter = _ids(opts.get("gi"))
    instances = [(gpu, gi) for gpu in gpus for gi in _instances(gpu, gi_filter)]
    if not instances:
        print(NO_GI)
        return RC_NOT_FOUND
    for gpu, gi in instances:
        if gi["compute_instances"] or _in_use(gpu, gi):
            print(
                f"Unable to destroy GPU instance ID {gi['id']:>2} from GPU {gpu['index']:>2}: "
                f"{IN_USE}"
            )
            print(f"Failed to destroy GPU instances: {IN_USE}")
            return RC_UNKNOWN
        gpu["mig"]["gpu_instances"].remove(gi)
        print(f"Successfully destroyed GPU instance ID {gi['id']:>2} from GPU {gpu['index']:>2}")
    return 0
