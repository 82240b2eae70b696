"""pyinfra config file used by ``gpuaudit audit`` (pyinfra runs it before connecting)."""

from gpuaudit.deploy import record_connect_errors

record_connect_errors()
