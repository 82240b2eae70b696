"""pyinfra facts of gpuaudit.

``GpuAuditSections`` is the audit's single remote command: the collector script gathers every
section (nvidia-smi XML, topology, MIG, kernel log, driver packages, sysctls, services, device
nodes, rocm-smi ...) in one round trip, and ``process`` is pure: it only unframes the sections.
Parsing them into a snapshot happens in :mod:`gpuaudit.assemble.build`, away from pyinfra.
"""

from __future__ import annotations

from typing import Any

from pyinfra.api import FactBase

from gpuaudit.collect import UNPACK_UNAVAILABLE, collector_script, new_nonce, packed_collector
from gpuaudit.parsers.bundle import parse_bundle

# The fact's one problem when the host could not unpack a packed command: send it plain.
NOT_UNPACKED = "the host could not unpack the packed collector (it has no base64 or gzip)"


class GpuAuditSections(FactBase[dict[str, Any]]):
    """
    Every gpuaudit section of a host, collected by one shell script.

    .. code:: python

        sections = host.get_fact(GpuAuditSections)
        sections["sections"]["nvidia_smi_xml"]["stdout"]

    Returns ``{"complete": bool, "problems": [...], "sections": {name: {"rc", "stdout",
    "stderr", "truncated"}}}``. A missing tool or a driver that does not answer shows as that
    section's ``rc`` and ``stderr``; the script itself always exits 0. Output is bounded on the
    host and again here (:mod:`gpuaudit.parsers.limits`): a cut section is ``truncated``, its
    stderr ends with where it was cut, and ``problems`` lists it.

    ``packed=True`` sends the script gzipped (:func:`gpuaudit.collect.packed_command`), for
    hosts across a network; a host that cannot unpack it gives ``problems ==
    [NOT_UNPACKED]`` and no sections, and is asked again with the plain script.
    """

    @staticmethod
    def default() -> dict[str, Any]:
        # Not collectable: the command did not run to completion (connection lost, killed).
        return {"complete": False, "problems": ["collector produced no output"], "sections": {}}

    def command(
        self,
        nonce: str | None = None,
        command_timeout: int | None = None,
        dcgm_diag_level: int | None = None,
        dcgm_diag_timeout: int | None = None,
        packed: bool = False,
    ) -> str:
        # A nonce in the section markers, new for each collection, keeps host output (kernel
        # log lines, GPU names) from ever being read as framing.
        nonce = nonce or new_nonce()
        settings = ""
        if command_timeout is not None:
            # Set here, not read from the host's environment: the bound on each GPU tool call
            # must fit inside the time the audit gives the whole collection.
            settings += f"GPUAUDIT_TIMEOUT={int(command_timeout)}\n"
        if dcgm_diag_level is not None:
            # The policy's dcgmi diag level (0: none), set even when 0 so that the host's own
            # environment cannot start a diagnostic the site did not ask for.
            settings += f"GPUAUDIT_DCGM_DIAG={int(dcgm_diag_level)}\n"
            if dcgm_diag_timeout is not None:
                settings += f"GPUAUDIT_DCGM_DIAG_TIMEOUT={int(dcgm_diag_timeout)}\n"
        if packed:
            return packed_collector(nonce, settings)
        return settings + collector_script(nonce, comments=False)

    def process(self, output: list[str]) -> dict[str, Any]:
        bundle = parse_bundle(output)
        if not bundle.sections and any(line.strip() == UNPACK_UNAVAILABLE for line in output):
            return {"complete": False, "problems": [NOT_UNPACKED], "sections": {}}
        return bundle.to_dict()
