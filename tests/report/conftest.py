"""Fixtures for the report tests: a small fleet and findings built by hand."""

from __future__ import annotations

import pytest
from report_factories import finding, healthy_host, unreachable_host

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.rules.base import Finding, Owner, Severity


@pytest.fixture
def fleet() -> list[HostSnapshot]:
    return [healthy_host("gpu-b01"), healthy_host("gpu-a01", gpus=8), unreachable_host()]


@pytest.fixture
def fleet_findings() -> list[Finding]:
    return [
        finding("GA501", Severity.MEDIUM, "gpu-a01", category="topology", gpu_index=None),
        finding("GA301", Severity.HIGH, "gpu-b01"),
        finding(
            "GA001",
            Severity.CRITICAL,
            "gpu-z99",
            category="collection",
            gpu_index=None,
            message="host unreachable",
        ),
        finding("GA101", Severity.LOW, "gpu-a01", category="driver", owner=Owner.ML_ENGINEERING),
    ]
