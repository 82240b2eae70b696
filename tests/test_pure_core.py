"""The core (parsers, model, rules, policy, report, the upgrade planner and gates) works
without pyinfra: it is what `gpuaudit report` runs on saved snapshots, on machines that never
talk to a host, and what plans and judges a staged upgrade before any host is touched."""

from __future__ import annotations

import subprocess
import sys

CORE = (
    "gpuaudit.parsers.bundle",
    "gpuaudit.assemble.build",
    "gpuaudit.rules",
    "gpuaudit.policy",
    "gpuaudit.report.run",
    "gpuaudit.report.renderers",
    "gpuaudit.pipeline",
    "gpuaudit.offline",
    "gpuaudit.inspect",
    "gpuaudit.upgrade",
    "gpuaudit.policy.upgrade",
    "gpuaudit.upgrade.plan",
    "gpuaudit.upgrade.gates",
    "gpuaudit.upgrade.journal",
    "gpuaudit.upgrade.lease",
    "gpuaudit.upgrade.report",
    "gpuaudit.upgrade.drain",
    "gpuaudit.upgrade.runner",
)


def test_core_modules_do_not_import_pyinfra() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {module}\n" for module in CORE)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyinfra', 'gevent')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
