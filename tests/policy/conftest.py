"""Fixtures for the policy tests: healthy hosts and GPUs from the rule tests' factories."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from policy_helpers import FACTORIES

from gpuaudit.model.snapshot import HostSnapshot


@pytest.fixture
def make_host() -> Callable[..., HostSnapshot]:
    """``make_host(name, gpus=2, groups=(...), **changes)``: a healthy host in those groups."""

    def build(name: str = "gpu-01", gpus: Any = 2, groups: Any = (), **changes: Any):
        host = FACTORIES._host(name, gpus, **changes)
        if groups:
            data = dict(host.host_data, groups=list(groups))
            host = FACTORIES._host(name, gpus, **{**changes, "host_data": data})
        return host

    return build


@pytest.fixture
def make_gpu() -> Callable[..., Any]:
    return FACTORIES._gpu
