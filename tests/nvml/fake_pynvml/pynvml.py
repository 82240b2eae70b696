"""A stand-in for nvidia-ml-py's ``pynvml`` that serves one host's devices from a JSON file.

Function names, signatures, return shapes, constants and the NVMLError class hierarchy follow
nvidia-ml-py 13.x (pynvml.py); values come in NVML's own units (bytes, milliwatts, bitmasks,
NVML_FEATURE_* numbers). ``FAKE_PYNVML_DATA`` names the file (see tests/nvml/nvml_fakes.py):
``init_error`` (an NVML_ERROR_* code nvmlInit raises), ``driver_version``,
``cuda_driver_version``, ``event_reasons`` (false: the binding predates
nvmlDeviceGetCurrentClocksEventReasons) and ``devices``, one object per GPU whose ``null``
values raise NVMLError_NotSupported, as NVML does for what the board cannot report. A device's
``raise`` maps a function name to the NVML_ERROR_* code it raises; ``lost`` makes
nvmlDeviceGetHandleByIndex raise NVMLError_GpuIsLost. Runs under python3.6 like the probe.
"""

import json
import os
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_MEMORY_LOCATION_DRAM = 2
NVML_MEMORY_LOCATION_SRAM = 7
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
nvmlMemory_v2 = 0x02000028

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    def __init__(self, value):
        Exception.__init__(self, value)
        self.value = value

    def __str__(self):
        return _MESSAGES.get(self.value, "NVML Error with code " + str(self.value))


class NVMLError_NotSupported(NVMLError):
    def __init__(self):
        NVMLError.__init__(self, NVML_ERROR_NOT_SUPPORTED)


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self):
        NVMLError.__init__(self, NVML_ERROR_GPU_IS_LOST)


def _error(code):
    return {
        NVML_ERROR_NOT_SUPPORTED: NVMLError_NotSupported,
        NVML_ERROR_GPU_IS_LOST: NVMLError_GpuIsLost,
    }.get(code, lambda: NVMLError(code))()


with open(os.environ["FAKE_PYNVML_DATA"]) as _file:
    _HOST = json.load(_file)
_DEVICES = _HOST["devices"]
_state = {"initialised": False}


def _device(handle, function):
    if not _state["initialised"]:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    device = _DEVICES[handle.index]
    code = (device.get("raise") or {}).get(function)
    if code is not None:
        raise _error(code)
    return device


def _value(handle, function, key):
    value = _device(handle, function).get(key)
    if value is None:
        raise NVMLError_NotSupported()
    return value


def nvmlInit():
    if _HOST.get("init_error"):
        raise _error(_HOST["init_error"])
    _state["initialised"] = True


def nvmlShutdown():
    _state["initialised"] = False


def nvmlSystemGetDriverVersion():
    return _HOST["driver_version"]


def nvmlSystemGetCudaDriverVersion():
    return _HOST["cuda_driver_version"]


def nvmlSystemGetNVMLVersion():
    return "12." + _HOST["driver_version"]


def nvmlDeviceGetCount():
    return len(_DEVICES)


def nvmlDeviceGetHandleByIndex(index):
    if _DEVICES[index].get("lost"):
        raise NVMLError_GpuIsLost()
    return SimpleNamespace(index=index)


def nvmlDeviceGetName(handle):
    return _value(handle, "nvmlDeviceGetName", "name")


def nvmlDeviceGetUUID(handle):
    return _value(handle, "nvmlDeviceGetUUID", "uuid")


def nvmlDeviceGetSerial(handle):
    return _value(handle, "nvmlDeviceGetSerial", "serial")


def nvmlDeviceGetArchitecture(device):
    return _value(device, "nvmlDeviceGetArchitecture", "architecture")


def nvmlDeviceGetVbiosVersion(handle):
    return _value(handle, "nvmlDeviceGetVbiosVersion", "vbios_version")


def nvmlDeviceGetInforomImageVersion(handle):
    return _value(handle, "nvmlDeviceGetInforomImageVersion", "inforom_image")


def nvmlDeviceGetPciInfo(handle):
    # Bindings before 11.515 hand the bus id back as bytes.
    bus_id = _value(handle, "nvmlDeviceGetPciInfo", "pci_bus_id")
    return SimpleNamespace(busId=bus_id.encode(), busIdLegacy=bus_id.encode())


def nvmlDeviceGetMemoryInfo(handle, version=None):
    device = _device(handle, "nvmlDeviceGetMemoryInfo")
    if device.get("memory_total") is None:
        raise NVMLError_NotSupported()
    total, used = device["memory_total"], device.get("memory_used") or 0
    return SimpleNamespace(total=total, used=used, free=total - used, reserved=0)


def nvmlDeviceGetTemperature(handle, sensor):
    assert sensor == NVML_TEMPERATURE_GPU
    return _value(handle, "nvmlDeviceGetTemperature", "temperature")


def nvmlDeviceGetTemperatureThreshold(handle, threshold):
    assert threshold == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    return _value(handle, "nvmlDeviceGetTemperatureThreshold", "temperature_slowdown")


def nvmlDeviceGetPowerUsage(handle):
    return _value(handle, "nvmlDeviceGetPowerUsage", "power_usage_mw")


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return _value(handle, "nvmlDeviceGetEnforcedPowerLimit", "power_limit_mw")


def nvmlDeviceGetPowerManagementLimit(handle):
    return _value(handle, "nvmlDeviceGetPowerManagementLimit", "power_limit_mw")


def nvmlDeviceGetUtilizationRates(handle):
    gpu = _value(handle, "nvmlDeviceGetUtilizationRates", "utilization_gpu")
    return SimpleNamespace(gpu=gpu, memory=0)


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return _value(handle, "nvmlDeviceGetCurrentClocksThrottleReasons", "clocks_event_reasons")


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _value(handle, "nvmlDeviceGetCurrentClocksEventReasons", "clocks_event_reasons")


if not _HOST.get("event_reasons", True):
    del nvmlDeviceGetCurrentClocksEventReasons


def nvmlDeviceGetCurrPcieLinkGeneration(handle):
    return _value(handle, "nvmlDeviceGetCurrPcieLinkGeneration", "pcie_gen_current")


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _value(handle, "nvmlDeviceGetMaxPcieLinkGeneration", "pcie_gen_max")


def nvmlDeviceGetCurrPcieLinkWidth(handle):
    return _value(handle, "nvmlDeviceGetCurrPcieLinkWidth", "pcie_width_current")


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _value(handle, "nvmlDeviceGetMaxPcieLinkWidth", "pcie_width_max")


def nvmlDeviceGetPcieReplayCounter(handle):
    return _value(handle, "nvmlDeviceGetPcieReplayCounter", "pcie_replay_count")


def nvmlDeviceGetPersistenceMode(handle):
    return _value(handle, "nvmlDeviceGetPersistenceMode", "persistence_mode")


def nvmlDeviceGetMigMode(device):
    return list(_value(device, "nvmlDeviceGetMigMode", "mig_mode"))


def nvmlDeviceGetEccMode(handle):
    return list(_value(handle, "nvmlDeviceGetEccMode", "ecc_mode"))


_COUNTERS = {NVML_VOLATILE_ECC: "volatile", NVML_AGGREGATE_ECC: "aggregate"}
_ERRORS = {
    NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected",
}
_LOCATIONS = {NVML_MEMORY_LOCATION_SRAM: "sram", NVML_MEMORY_LOCATION_DRAM: "dram"}


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    counts = _value(handle, "nvmlDeviceGetTotalEccErrors", "ecc_" + _COUNTERS[counterType])
    if counts.get(_ERRORS[errorType]) is None:
        raise NVMLError_NotSupported()
    return counts[_ERRORS[errorType]]


def nvmlDeviceGetMemoryErrorCounter(handle, errorType, counterType, locationType):
    counts = _value(handle, "nvmlDeviceGetMemoryErrorCounter", "ecc_" + _COUNTERS[counterType])
    key = _LOCATIONS[locationType] + "_" + _ERRORS[errorType]
    if counts.get(key) is None:
        raise NVMLError_NotSupported()
    return counts[key]


def nvmlDeviceGetRetiredPages(device, sourceFilter):
    key = "retired_pages_sbe" if sourceFilter == 0 else "retired_pages_dbe"
    count = _value(device, "nvmlDeviceGetRetiredPages", key)
    return [0x1000 * (page + 1) for page in range(count)]


def nvmlDeviceGetRetiredPagesPendingStatus(device):
    return _value(device, "nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages_pending")


def nvmlDeviceGetRemappedRows(device):
    return tuple(_value(device, "nvmlDeviceGetRemappedRows", "remapped_rows"))
