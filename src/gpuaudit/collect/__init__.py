"""The collector: one POSIX-sh script that gathers every audit section of a host at once."""

from __future__ import annotations

import re
import secrets
from importlib.resources import files

from gpuaudit.parsers.limits import DEFAULT_LIMITS, OutputLimits

_NONCE_RE = re.compile(r"^[A-Za-z0-9]{4,64}$")
_PROBE_PLACEHOLDER = "@NVML_PROBE@"
# The probe travels as a quoted here-document: the shell expands nothing inside it, so the only
# text it must not hold is a line equal to the terminator.
_PROBE_TERMINATOR = "GA_NVML_PROBE_END"


def new_nonce() -> str:
    return secrets.token_hex(8)


def nvml_probe_source() -> str:
    """The device probe the ``nvml`` section runs with the host's python3 (nvml_probe.py)."""
    return files("gpuaudit.collect").joinpath("nvml_probe.py").read_text(encoding="utf-8")


def collector_script(nonce: str | None = None, limits: OutputLimits = DEFAULT_LIMITS) -> str:
    """The collector script text. With no nonce the script makes its own when it runs
    (``gpuaudit collect-script`` for hosts audited offline). ``limits`` are the bounds on what
    the host sends (the environment of the host's shell can lower or raise them)."""
    text = files("gpuaudit.collect").joinpath("collector.sh").read_text(encoding="utf-8")
    text = text.replace("@SECTION_BYTES@", str(int(limits.section_bytes)), 1)
    text = text.replace("@OUTPUT_BYTES@", str(int(limits.output_bytes)), 1)
    text = text.replace("@FLOOR_BYTES@", str(int(limits.floor_bytes)), 1)
    text = text.replace(_PROBE_PLACEHOLDER, _probe_for_heredoc(), 1)
    if nonce is None:
        return text.replace("@NONCE@", "$(date +%s)x$$")
    if not _NONCE_RE.match(nonce):
        raise ValueError(f"collector nonce must be 4-64 letters or digits, got {nonce!r}")
    return text.replace("@NONCE@", nonce)


def _probe_for_heredoc() -> str:
    probe = nvml_probe_source().rstrip("\n")
    if _PROBE_TERMINATOR in probe.splitlines() or "@NONCE@" in probe:
        raise ValueError("nvml_probe.py holds text that would break the collector script")
    return probe
