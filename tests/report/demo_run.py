"""The committed demo run's snapshots (reports/example/hosts), reported again by the real
pipeline: rules evaluated with a policy, register and views written by RunDir.write_report."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from gpuaudit.pipeline import write_report
from gpuaudit.policy import Policy, load_policy
from gpuaudit.report.run import RunDir

REPO = Path(__file__).resolve().parents[2]
DEMO_SNAPSHOTS = REPO / "reports" / "example"
DEMO_POLICY = REPO / "policies" / "demo.yaml"
GENERATED_AT = "2026-12-01T12:00:00Z"


def demo_report(run_dir: Path, policy: Policy | None = None) -> RunDir:
    """Write the demo fleet's register and views into ``run_dir`` (the demo policy by default);
    give it a directory of its own, so that no earlier run sits beside it."""
    run = RunDir(run_dir)
    snapshots = RunDir(DEMO_SNAPSHOTS).load_snapshots()
    assert len(snapshots) == 17, "the committed demo run lost snapshots"
    write_report(
        run,
        snapshots,
        policy=policy if policy is not None else load_policy(DEMO_POLICY),
        generated_at=GENERATED_AT,
    )
    return run


def register_of(run: RunDir) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(run.register_path.read_text(encoding="utf-8"))
    return data


def junit_cases(run: RunDir) -> dict[str, dict[str, ET.Element]]:
    """host -> rule code -> its testcase in junit.xml."""
    root = ET.parse(run.path / "junit.xml").getroot()
    return {
        str(suite.get("name")): {
            str(case.get("name", "")).split()[0]: case for case in suite.findall("testcase")
        }
        for suite in root.findall("testsuite")
    }
