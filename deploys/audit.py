"""Quarterly readiness audit of GPU hosts.

    pyinfra -y inventory/prod.py deploys/audit.py     # → reports/<run-id>/index.html

One remote command per host collects every section; each host's snapshot is written to
reports/<run-id>/hosts/ as soon as it arrives, then the risk register (register.json,
index.html) is written for the whole run, unreachable hosts included.
"""

from gpuaudit.deploy import audit

audit()
