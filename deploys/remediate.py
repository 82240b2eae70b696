"""Fix what the audit reports and gpuaudit has an operation for.

    pyinfra -y inventory/prod.py deploys/remediate.py
    pyinfra --dry inventory/prod.py deploys/remediate.py        # list the changes, make none

Each operation reads the host first and changes only what differs, so a second run changes
nothing: persistence mode (GA401), driver package holds (GA106) and the DCGM units (GA403;
skipped where host data sets ``monitoring_required: False``).
"""

from pyinfra import host

from gpuaudit.operations import driver, persistence, services

persistence.enable(name="Enable GPU persistence mode")
driver.pin(name="Hold the NVIDIA driver packages")
if host.data.get("monitoring_required") is not False:
    services.enable(name="Run the DCGM monitoring units", names=["nvidia-dcgm", "dcgm-exporter"])
