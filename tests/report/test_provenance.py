"""Provenance: the register and the page say what a run covered, how it was judged and by whom."""

from __future__ import annotations

import getpass
import hashlib
import json
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from report_factories import EVIL, finding, healthy_host

import gpuaudit
from gpuaudit.pipeline import rebuild, write_report
from gpuaudit.policy import load_policy
from gpuaudit.report.provenance import (
    BUNDLE,
    INVENTORY,
    PROVENANCE_FILE,
    REDACTED,
    Scope,
    bundle_scope,
    pyinfra_scope,
    read_provenance,
    record_provenance,
    redact_command,
)
from gpuaudit.report.run import new_run_dir

POLICY = "version: 1\ndefaults:\n  sysctl_baseline:\n    net.core.rmem_max: 134217728\n"


_SCOPE_IN_PYINFRA = """
import dataclasses, json, sys
import pyinfra_cli.cli  # loaded, as it is when pyinfra runs the audit deploy
from gpuaudit.report.provenance import pyinfra_scope
print(json.dumps(dataclasses.asdict(pyinfra_scope(json.loads(sys.argv[1])))))
"""


def scope_under_pyinfra(argv: list[str], cwd: Path) -> Scope:
    """pyinfra_scope(argv) in a process that has pyinfra's command-line parser loaded. Never
    in the test process: loading pyinfra's CLI patches the interpreter for gevent."""
    done = subprocess.run(
        [sys.executable, "-c", _SCOPE_IN_PYINFRA, json.dumps(argv)],
        cwd=cwd, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    fields = json.loads(done.stdout)
    return Scope(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def about(page: str) -> str:
    return page.split('id="about-run"', 1)[1].split("</section>", 1)[0]


def test_pyinfra_scope_is_read_with_pyinfra_own_parser(tmp_path: Path) -> None:
    (tmp_path / "prod.py").write_text("hosts = ['gpu-a01']\n")
    argv = ["/venv/bin/pyinfra", "-y", "--limit", "gpu-a*", "prod.py", "--ssh-user", "audit",
            "--limit", "rack7", "--exclude", "gpu-a09", "deploys/audit.py"]  # fmt: skip
    assert scope_under_pyinfra(argv, tmp_path) == Scope(
        INVENTORY,
        inventory=str(tmp_path / "prod.py"),  # absolute: runs from elsewhere compare equal
        limit=("gpu-a*", "rack7"),
        exclude=("gpu-a09",),
    )
    # An inventory that is not a file (a host list) is kept as given.
    hosts = ["pyinfra", "@sim/t4-01,@sim/t4-02", "x.py"]
    assert scope_under_pyinfra(hosts, tmp_path).inventory == "@sim/t4-01,@sim/t4-02"
    # Without pyinfra's parser (pyinfra driven from Python) the inventory is not known.
    assert "pyinfra_cli.cli" not in sys.modules
    assert pyinfra_scope(argv) == Scope(INVENTORY)


def test_secrets_on_the_command_line_are_redacted() -> None:
    argv = ["pyinfra", "inv.py", "--password", "s3cret", "--key-password=k3y", "--data",
            "ssh_password=p4ss", "--data=api_token=t0k", "--data", "site=lab", "x.py"]  # fmt: skip
    redacted = redact_command(argv)
    assert not {"s3cret", "k3y", "p4ss", "t0k"} & {part.split("=")[-1] for part in redacted}
    assert redacted == (
        "pyinfra", "inv.py", "--password", REDACTED, f"--key-password={REDACTED}", "--data",
        f"ssh_password={REDACTED}", f"--data=api_token={REDACTED}", "--data", "site=lab", "x.py",
    )  # fmt: skip


def test_register_and_page_say_where_the_run_came_from(tmp_path: Path) -> None:
    inventory = tmp_path / "prod.py"
    inventory.write_text("hosts = ['gpu-b01']\n")
    policy_path = tmp_path / "site.yaml"
    policy_path.write_text(POLICY)
    policy = load_policy(policy_path)
    argv = ["/venv/lib/python3.11/site-packages/pyinfra/__main__.py", "-y", str(inventory),
            "--limit", "gpu-b*", "--password", "s3cret", "gpuaudit.deploy.audit"]  # fmt: skip
    run = new_run_dir(tmp_path / "reports", "20261201T000000Z")
    record_provenance(run.path, scope_under_pyinfra(argv, tmp_path), policy, argv=argv)
    write_report(run, [healthy_host("gpu-b01")], [finding()], policy=policy)

    register = json.loads(run.register_path.read_text())
    assert register["provenance"] == {
        "scope": {
            "source": "inventory",
            "inventory": str(inventory),
            "limit": ["gpu-b*"],
            "exclude": [],
            "bundles": [],
        },
        "policy": {
            "path": str(policy_path),
            "sha256": hashlib.sha256(policy_path.read_bytes()).hexdigest(),
        },
        "gpuaudit_version": gpuaudit.__version__,
        "pyinfra_version": metadata.version("pyinfra"),
        "operator": f"{getpass.getuser()}@{socket.gethostname()}",
        "command": [
            "pyinfra",
            "-y",
            str(inventory),
            "--limit",
            "gpu-b*",
            "--password",
            REDACTED,
            "gpuaudit.deploy.audit",
        ],
    }
    block = about(run.html_path.read_text())
    assert "About this run" in block
    for text in (str(inventory), "--limit gpu-b*", str(policy_path), getpass.getuser()):
        assert text in block
    assert register["provenance"]["policy"]["sha256"] in block
    assert f"pyinfra {metadata.version('pyinfra')}" in block
    assert "s3cret" not in run.html_path.read_text()


def test_rebuild_keeps_the_audit_provenance_and_names_a_new_policy(tmp_path: Path) -> None:
    from gpuaudit.cli import main

    original = tmp_path / "site.yaml"
    original.write_text(POLICY)
    policy = load_policy(original)
    run = new_run_dir(tmp_path / "reports", "20261201T000000Z")
    run.write_snapshot(healthy_host("gpu-b01"))
    policy.copy_to(run.path)
    recorded = record_provenance(run.path, bundle_scope(["gpu-b01.bundle"]), policy, argv=["x"])

    rebuild(run)  # judged by the run's copy of the policy: the same text, the original path
    provenance = json.loads(run.register_path.read_text())["provenance"]
    assert provenance == recorded.to_dict()
    assert provenance["policy"]["path"] == str(original)
    assert provenance["scope"]["source"] == BUNDLE

    changed = tmp_path / "stricter.yaml"
    changed.write_text(POLICY.replace("134217728", "268435456"))
    assert main(["report", str(run.path), "--policy", str(changed)]) == 0
    provenance = json.loads(run.register_path.read_text())["provenance"]
    assert provenance["policy"] == {
        "path": str(changed),
        "sha256": hashlib.sha256(changed.read_bytes()).hexdigest(),
    }
    assert provenance["operator"] == recorded.operator  # who ran the audit is kept


def test_provenance_on_the_page_is_escaped(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, "run")
    record_provenance(run.path, Scope(INVENTORY, inventory=EVIL, limit=(EVIL,)), argv=[EVIL])
    write_report(run, [healthy_host()], [])
    block = about(run.html_path.read_text())
    assert EVIL not in block
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in block


def test_a_damaged_provenance_file_loses_nothing(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, "run")
    (run.path / PROVENANCE_FILE).write_text('{"scope": {"source": "carrier pigeon"}}')
    assert read_provenance(run.path) is None
    write_report(run, [healthy_host()], [])
    register = json.loads(run.register_path.read_text())
    assert register["provenance"]["scope"] is None  # the register is written all the same
    assert register["provenance"]["gpuaudit_version"] == gpuaudit.__version__
    assert "not recorded" in about(run.html_path.read_text())
    # The damaged file stays as it was, for whoever looks into it.
    assert "carrier pigeon" in (run.path / PROVENANCE_FILE).read_text()
