"""gpuaudit: readiness audits, risk registers and remediation for fleets of GPU hosts."""

__version__ = "0.1.0"
