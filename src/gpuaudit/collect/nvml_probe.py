"""gpuaudit device probe: reads the GPUs through the vendor's library, prints one JSON document.

This file runs ON the audited host: the collector's ``nvml`` section feeds it to ``python3 -B -``.
It must therefore stay self-contained (standard library plus the vendor binding), parse under
python3.6 and import nothing from gpuaudit. Libraries, in order: ``pynvml`` (nvidia-ml-py),
then ``amdsmi``; the first that initialises answers.

It reports what the library returned, in the library's own units, and the units are in the
field names (``memory_total_bytes``, ``power_draw_mw``); turning that into snapshot fields
happens in ``gpuaudit.parsers.nvml`` on the controller, where the code is typed and tested.

Every call is guarded on its own: a call that fails leaves its field out and records why under
the GPU's ``errors`` (``not_supported``, ``no_permission: …``, ``gpu_lost: …``,
``unreadable: …``, ``not_in_library: …``). A GPU that cannot be opened is recorded with its
``handle_error`` and the others are still read. A library that does not initialise gives
``init_error`` and exit status 0; no library at all gives exit status 127.
"""

import contextlib
import json
import os
import sys

PROBE_FORMAT = 1
NOT_INSTALLED = 127

# nvml.h enum values: part of the library's ABI, and older bindings lack some of the names.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_GPU_IS_LOST = 15
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_ECC_COUNTERS = (("volatile", 0), ("aggregate", 1))  # nvmlEccCounterType_t
NVML_MEMORY_ERROR_TYPES = (("corrected", 0), ("uncorrected", 1))
NVML_MEMORY_LOCATIONS = (("sram", 7), ("dram", 2))
NVML_PAGE_RETIREMENT_CAUSES = (("retired_pages_sbe", 0), ("retired_pages_dbe", 1))
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NO_PERM = 10


class GpuLost(Exception):
    """A call said the GPU is lost: further calls on it would only wait for the same answer."""


def describe(exc):
    try:
        message = " ".join(str(exc).split())
    except Exception:
        message = ""
    return message or type(exc).__name__


def plain(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


class Calls:
    """Runs library calls one at a time and records why each failed instead of raising."""

    def __init__(self, module, classify, stop_on_lost):
        self.module = module
        self.classify = classify
        self.stop_on_lost = stop_on_lost
        self.errors = {}

    def call(self, field, name, *args, **kwargs):
        return self.first(field, [(name, args, kwargs)])

    def first(self, field, attempts):
        """The first attempt (function name, args, kwargs) that answers; the last error if none."""
        for name, args, kwargs in attempts:
            try:
                value = getattr(self.module, name)(*args, **kwargs)
            except AttributeError as exc:
                kind = "not_in_library: " + describe(exc)
            except Exception as exc:
                kind = self.classify(exc)
            else:
                self.errors.pop(field, None)
                return plain(value)
            self.errors[field] = kind
            if kind.startswith("gpu_lost") and self.stop_on_lost:
                raise GpuLost(kind)
        return None


def constant(module, name, default):
    return getattr(module, name, default)


def error_kind(error_class, code_of, kinds):
    """A classifier of a binding's exceptions: its error code mapped through ``kinds``
    ({code: "not_supported" | "no_permission" | "gpu_lost"}), anything else unreadable."""

    def classify(exc):
        code = code_of(exc) if isinstance(exc, error_class) else None
        kind = kinds.get(code)
        if kind == "not_supported":
            return kind
        if kind:
            return kind + ": " + describe(exc)
        if code is None:
            return "unreadable: " + type(exc).__name__ + ": " + describe(exc)
        return "unreadable: " + describe(exc)

    return classify


def start(module, library, init):
    """The document's head, and whether the library started (init_error when it did not)."""
    doc = {"library": library, "library_version": constant(module, "__version__", None)}
    try:
        getattr(module, init)()
    except Exception as exc:
        doc["init_error"] = describe(exc)
        return doc, False
    return doc, True


# --- NVIDIA: pynvml (nvidia-ml-py) ----------------------------------------------------------


def nvml_error_kind(pynvml):
    return error_kind(
        constant(pynvml, "NVMLError", ()),
        lambda exc: getattr(exc, "value", None),
        {
            NVML_ERROR_NOT_SUPPORTED: "not_supported",
            NVML_ERROR_NO_PERMISSION: "no_permission",
            NVML_ERROR_GPU_IS_LOST: "gpu_lost",
        },
    )


def read_nvidia(pynvml):
    doc, started = start(pynvml, "pynvml", "nvmlInit")
    if not started:
        return doc
    classify = nvml_error_kind(pynvml)
    try:
        system = Calls(pynvml, classify, False)
        doc["driver_version"] = system.call("driver_version", "nvmlSystemGetDriverVersion")
        doc["cuda_driver_version"] = system.call(
            "cuda_driver_version", "nvmlSystemGetCudaDriverVersion"
        )
        doc["nvml_version"] = system.call("nvml_version", "nvmlSystemGetNVMLVersion")
        count = system.call("device_count", "nvmlDeviceGetCount")
        doc["device_count"] = count
        doc["gpus"] = [read_nvidia_gpu(pynvml, classify, index) for index in range(count or 0)]
        doc["errors"] = system.errors
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return doc


def read_nvidia_gpu(pynvml, classify, index):
    gpu = {"index": index, "vendor": "nvidia"}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:
        gpu["handle_error"] = classify(exc)
        return gpu
    calls = Calls(pynvml, classify, True)
    with contextlib.suppress(GpuLost):
        read_nvidia_fields(pynvml, calls, handle, gpu)
    gpu["errors"] = calls.errors
    return gpu


# Per-GPU values read with the handle alone: field, then the functions to try in turn (the
# first that answers wins: newer names first, with the older name the binding may only know).
NVIDIA_HANDLE_CALLS = (
    ("name", ("nvmlDeviceGetName",)),
    ("uuid", ("nvmlDeviceGetUUID",)),
    ("serial", ("nvmlDeviceGetSerial",)),
    ("architecture_nvml", ("nvmlDeviceGetArchitecture",)),
    ("vbios_version", ("nvmlDeviceGetVbiosVersion",)),
    ("inforom_image", ("nvmlDeviceGetInforomImageVersion",)),
    ("power_draw_mw", ("nvmlDeviceGetPowerUsage",)),
    ("power_limit_mw", ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit")),
    (
        "clocks_event_reasons",  # "throttle" reasons until CUDA 12.2
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
    ),
    ("pcie_gen_current", ("nvmlDeviceGetCurrPcieLinkGeneration",)),
    ("pcie_gen_max", ("nvmlDeviceGetMaxPcieLinkGeneration",)),
    ("pcie_width_current", ("nvmlDeviceGetCurrPcieLinkWidth",)),
    ("pcie_width_max", ("nvmlDeviceGetMaxPcieLinkWidth",)),
    ("pcie_replay_count", ("nvmlDeviceGetPcieReplayCounter",)),
    ("persistence_mode", ("nvmlDeviceGetPersistenceMode",)),
    ("retired_pages_pending", ("nvmlDeviceGetRetiredPagesPendingStatus",)),
)


def read_nvidia_fields(nv, calls, h, gpu):
    for field, names in NVIDIA_HANDLE_CALLS:
        gpu[field] = calls.first(field, [(name, (h,), {}) for name in names])
    pci = calls.call("pci_bus_id", "nvmlDeviceGetPciInfo", h)
    gpu["pci_bus_id"] = plain(pci.busId) if pci is not None else None
    # nvidia-smi shows the v2 figures (reserved memory apart from used) where the driver has them.
    attempts = [("nvmlDeviceGetMemoryInfo", (h,), {})]  # type: list
    if constant(nv, "nvmlMemory_v2", None) is not None:
        attempts.insert(0, ("nvmlDeviceGetMemoryInfo", (h,), {"version": nv.nvmlMemory_v2}))
    memory = calls.first("memory", attempts)
    if memory is not None:
        gpu["memory_total_bytes"], gpu["memory_used_bytes"] = memory.total, memory.used
    sensor = NVML_TEMPERATURE_GPU
    gpu["temperature_c"] = calls.first(
        "temperature_c",
        [
            (name, (h, sensor), {})
            for name in ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV")
        ],
    )
    gpu["temperature_slowdown_c"] = calls.call(
        "temperature_slowdown_c",
        "nvmlDeviceGetTemperatureThreshold",
        h,
        NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
    )
    utilization = calls.call("utilization", "nvmlDeviceGetUtilizationRates", h)
    if utilization is not None:
        gpu["utilization_gpu_pct"] = utilization.gpu
        gpu["utilization_memory_pct"] = utilization.memory
    for prefix, name in (
        ("mig_mode", "nvmlDeviceGetMigMode"),
        ("ecc_mode", "nvmlDeviceGetEccMode"),
    ):
        modes = calls.call(prefix, name, h)
        if modes is not None:
            gpu[prefix + "_current"], gpu[prefix + "_pending"] = modes[0], modes[1]
    # Boards without ECC answer "not supported" to every counter: spare the calls.
    if calls.errors.get("ecc_mode") != "not_supported":
        read_nvidia_ecc(calls, h, gpu)
    read_nvidia_retirement(calls, h, gpu)


def read_nvidia_ecc(calls, h, gpu):
    for counter, counter_type in NVML_ECC_COUNTERS:
        counts = {}
        for error, error_type in NVML_MEMORY_ERROR_TYPES:
            name = "ecc_" + counter + "_" + error
            args = (h, error_type, counter_type)
            counts[error] = calls.call(name, "nvmlDeviceGetTotalEccErrors", *args)
            for location, location_type in NVML_MEMORY_LOCATIONS:
                counts[location + "_" + error] = calls.call(
                    name + "_" + location, "nvmlDeviceGetMemoryErrorCounter", *args, location_type
                )
        gpu["ecc_" + counter] = counts


def read_nvidia_retirement(calls, h, gpu):
    for field, cause in NVML_PAGE_RETIREMENT_CAUSES:
        pages = calls.call(field, "nvmlDeviceGetRetiredPages", h, cause)
        gpu[field] = len(pages) if pages is not None else None
    rows = calls.call("remapped_rows", "nvmlDeviceGetRemappedRows", h)
    if rows is not None:
        for offset, field in enumerate(("correctable", "uncorrectable", "pending", "failure")):
            gpu["remapped_rows_" + field] = rows[offset]


# --- AMD: amdsmi -----------------------------------------------------------------------------


def amd_error_kind(amdsmi):
    return error_kind(
        constant(amdsmi, "AmdSmiLibraryException", ()),
        lambda exc: exc.get_error_code(),
        {AMDSMI_STATUS_NOT_SUPPORTED: "not_supported", AMDSMI_STATUS_NO_PERM: "no_permission"},
    )


def read_amd(amdsmi):
    doc, started = start(amdsmi, "amdsmi", "amdsmi_init")
    if not started:
        return doc
    classify = amd_error_kind(amdsmi)
    try:
        system = Calls(amdsmi, classify, False)
        handles = system.call("processor_handles", "amdsmi_get_processor_handles") or []
        doc["device_count"] = len(handles)
        doc["gpus"] = [read_amd_gpu(amdsmi, classify, i, h) for i, h in enumerate(handles)]
        drivers = [g.get("driver_version") for g in doc["gpus"] if g.get("driver_version")]
        doc["driver_version"] = drivers[0] if drivers else None
        doc["errors"] = system.errors
    finally:
        with contextlib.suppress(Exception):
            amdsmi.amdsmi_shut_down()
    return doc


def read_amd_gpu(amd, classify, index, h):
    gpu = {"index": index, "vendor": "amd"}
    calls = Calls(amd, classify, False)
    call = calls.call

    def item(field, name, key, *args):
        found = call(field, name, h, *args)
        return found.get(key) if isinstance(found, dict) else None

    asic = call("asic_info", "amdsmi_get_gpu_asic_info", h) or {}
    gpu["name"] = asic.get("market_name")
    gpu["architecture"] = asic.get("target_graphics_version")
    gpu["uuid"] = call("uuid", "amdsmi_get_gpu_device_uuid", h)
    gpu["serial"] = item("serial", "amdsmi_get_gpu_board_info", "product_serial")
    gpu["pci_bus_id"] = call("pci_bus_id", "amdsmi_get_gpu_device_bdf", h)
    # rocm-smi's "VBIOS version" is the part number: keep the two paths comparable.
    gpu["vbios_version"] = item("vbios_version", "amdsmi_get_gpu_vbios_info", "part_number")
    gpu["driver_version"] = item("driver_version", "amdsmi_get_gpu_driver_info", "driver_version")
    vram = call("memory", "amdsmi_get_gpu_vram_usage", h) or {}
    gpu["memory_total_mb"] = vram.get("vram_total")
    gpu["memory_used_mb"] = vram.get("vram_used")
    sensors = constant(amd, "AmdSmiTemperatureType", None)
    metrics = constant(amd, "AmdSmiTemperatureMetric", None)
    if sensors is not None and metrics is not None:
        gpu["temperature_c"] = calls.first(
            "temperature_c",
            [
                ("amdsmi_get_temp_metric", (h, sensor, metrics.CURRENT), {})
                for sensor in (sensors.EDGE, sensors.JUNCTION)
            ],
        )
    power = call("power_draw_w", "amdsmi_get_power_info", h) or {}
    gpu["power_draw_w"] = power.get("average_socket_power")
    if gpu["power_draw_w"] in (None, "N/A"):
        gpu["power_draw_w"] = power.get("current_socket_power")
    gpu["power_limit_uw"] = item("power_limit_uw", "amdsmi_get_power_cap_info", "power_cap")
    gpu["utilization_gpu_pct"] = item("utilization", "amdsmi_get_gpu_activity", "gfx_activity")
    ecc = call("ecc_volatile", "amdsmi_get_gpu_total_ecc_count", h)
    if isinstance(ecc, dict):
        corrected, uncorrected = ecc.get("correctable_count"), ecc.get("uncorrectable_count")
        gpu["ecc_volatile"] = {"corrected": corrected, "uncorrected": uncorrected}
    pcie = call("pcie", "amdsmi_get_pcie_info", h) or {}
    static, metric = pcie.get("pcie_static") or {}, pcie.get("pcie_metric") or {}
    gpu["pcie_width_current"] = metric.get("pcie_width")
    gpu["pcie_speed_current_mts"] = metric.get("pcie_speed")
    gpu["pcie_replay_count"] = metric.get("pcie_replay_count")
    gpu["pcie_width_max"] = static.get("max_pcie_width")
    gpu["pcie_gen_max"] = static.get("pcie_interface_version")
    gpu["errors"] = calls.errors
    return gpu


# --- the document ----------------------------------------------------------------------------

READERS = (("pynvml", read_nvidia), ("amdsmi", read_amd))


def probe():
    """The probe document, or None when no library is installed."""
    tried = []
    for name, reader in READERS:
        try:
            module = __import__(name)
        except ImportError:
            continue
        except Exception as exc:  # installed but broken (its shared library missing, say)
            tried.append({"library": name, "init_error": "import failed: " + describe(exc)})
            continue
        try:
            tried.append(reader(module))
        except Exception as exc:  # a binding older or newer than this probe knows
            tried.append({"library": name, "init_error": "probe failed: " + describe(exc)})
        if "init_error" not in tried[-1]:
            break
    if not tried:
        return None
    # The library that answered, else the first one that failed to.
    chosen = tried[-1] if "init_error" not in tried[-1] else tried[0]
    doc = {"probe": PROBE_FORMAT}  # type: dict
    doc.update(chosen)
    if len(tried) > 1:
        doc["also_tried"] = [t for t in tried if t is not chosen]
    return doc


def main():
    # Bindings print their own complaints to stdout (amdsmi does when its library is missing),
    # from Python or from C: point file descriptor 1 at stderr while they run, so that stdout
    # carries nothing but the document.
    sys.stdout.flush()
    document_fd = os.dup(1)
    os.dup2(2, 1)
    try:
        doc = probe()
    finally:
        sys.stdout.flush()
    if doc is None:
        sys.stderr.write("pynvml not installed (nor amdsmi)\n")
        return NOT_INSTALLED
    with os.fdopen(document_fd, "w") as out:
        out.write(json.dumps(doc, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
