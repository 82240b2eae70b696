"""Remediation operations: pyinfra operations that fix what the audit's rules report.

Each one follows pyinfra's own (``server.modprobe``): read facts, yield only the commands that
make the difference, otherwise ``host.noop(why)``. A second run therefore changes nothing, and
``pyinfra --dry`` shows the commands without running them.

- :func:`gpuaudit.operations.persistence.enable` (GA401)
- :func:`gpuaudit.operations.driver.pin` (GA106)
- :func:`gpuaudit.operations.services.enable` (GA403, and any unit that must run)
- :func:`gpuaudit.operations.mig.apply` (GA203, GA201: the site's mig-parted MIG layout;
  planned in ``mig_plan`` / ``mig_commands``, which import no pyinfra)
- :mod:`gpuaudit.operations.upgrade`: one host's driver-upgrade steps (stop / start the GPU
  services, install a driver version, reload the driver, reboot and wait), run one step at a
  time by ``deploys/driver_upgrade.py``
"""
