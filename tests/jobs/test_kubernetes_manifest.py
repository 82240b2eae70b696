"""The Kubernetes collection manifest (gpuaudit.jobs.kubernetes): valid API objects, the real
collector in its ConfigMap, refused hostile options, and a container command that gives a bundle.

What stands in for a cluster in the last test: the init container's command and environment are
read from the rendered manifest and run here with /bin/sh; each volume mount becomes a local
directory (the ConfigMap's files written into one); the downward API's node name is a fixed
string; and ``chroot`` is a stand-in placed first in PATH that checks it was asked for the
manifest's host root, then runs its command with the simulated GPU host's tools on PATH (what
the host's /usr/bin holds after a real chroot) and its files under GPUAUDIT_ROOT. This machine's
tools (tee, cp, mv, cat) stand in for the image's busybox.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuaudit.collect import collector_script
from gpuaudit.jobs.kubernetes import (
    BUNDLE_MOUNT,
    COLLECT_CONTAINER,
    HOST_MOUNT,
    KubernetesJobOptions,
    ManifestOptionError,
    Toleration,
    add_arguments,
    options_from_args,
    render_manifest,
)
from gpuaudit.offline import snapshot_from_bundle
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.sim.host import materialize

REPO = Path(__file__).resolve().parents[2]
LATEST = kubernetes_validate.latest_version()
# recursiveReadOnly is an API field from 1.30: older servers are given a manifest without it.
VERSIONS_WITH_RRO = ("1.30.0", "1.33.0", LATEST)
VERSIONS_WITHOUT_RRO = ("1.27.0", "1.29.0")
VARIANTS = {
    "default": KubernetesJobOptions(),
    "every option": KubernetesJobOptions(
        namespace="gpu-audit-q3",
        create_namespace=False,
        run_id="2025q3-shard-07",
        image="registry.example.org/tools/busybox:1.36.1",
        node_selector=(("node.kubernetes.io/instance-type", "p4d.24xlarge"),),
        tolerations=(Toleration(), Toleration("dedicated", "Equal", "gpu", "NoExecute")),
        runtime_class=None,
        bundle_claim="gpuaudit-bundles",
        service_account="gpuaudit",
        priority_class="system-node-critical",
        collector_env=(("GPUAUDIT_TIMEOUT", "30"), ("GPUAUDIT_DCGM_DIAG", "1")),
    ),
    "privileged, hostPath bundles": KubernetesJobOptions(
        privileged=True, bundle_host_path="/var/lib/gpuaudit/bundles"
    ),
}


def _docs(options: KubernetesJobOptions) -> list[dict[str, Any]]:
    """The manifest as a cluster reads it: the YAML text, parsed."""
    return list(yaml.safe_load_all(render_manifest(options)))


def _by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_document_validates_against_the_kubernetes_api_schema(variant: str) -> None:
    options = VARIANTS[variant]
    for rro, versions in ((True, VERSIONS_WITH_RRO), (False, VERSIONS_WITHOUT_RRO)):
        docs = _docs(dataclasses.replace(options, recursive_read_only=rro))
        assert [d["kind"] for d in docs][-2:] == ["ConfigMap", "DaemonSet"]
        for version in versions:
            for doc in docs:
                kubernetes_validate.validate(doc, version, strict=True)


def test_the_schemas_do_refuse_what_a_version_lacks() -> None:
    """The validation is no formality: strict 1.29 refuses the 1.30 field, and a misspelt one."""
    daemonset = _by_kind(_docs(KubernetesJobOptions()), "DaemonSet")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, "1.29.0", strict=True)
    broken = json.loads(json.dumps(daemonset))
    broken["spec"]["template"]["spec"]["initContainers"][0]["securityContext"]["readOnly"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, LATEST, strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_decodes_every_object() -> None:
    """kubectl reads the manifest into its typed API objects. ``kubectl create --dry-run=client``
    asks an API server for its resource list, so with no cluster kubectl's offline verb
    ``annotate --local`` does the decoding; it prints each object back as it understood it."""
    text = render_manifest(VARIANTS["every option"])
    done = subprocess.run(
        ["kubectl", "annotate", "--local", "-f", "-", "-o", "json", "gpuaudit/checked=yes"],
        input=text,
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": os.devnull},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    decoded = list(yaml.safe_load_all(done.stdout.replace("}\n{", "}\n---\n{")))
    expected = _docs(VARIANTS["every option"])
    assert [d["kind"] for d in decoded] == [d["kind"] for d in expected]
    for got, want in zip(decoded, expected, strict=True):
        assert got["metadata"]["annotations"] == {"gpuaudit/checked": "yes"}
        del got["metadata"]["annotations"]
        assert got == want


def test_the_configmap_holds_the_collect_script_output() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", "collect-script"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    config = _by_kind(_docs(KubernetesJobOptions()), "ConfigMap")
    assert config["data"]["collector.sh"] == printed == collector_script()
    assert len(render_manifest().encode()) < 1024 * 1024  # a ConfigMap's limit: 1 MiB


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (KubernetesJobOptions(namespace="GPU Audit"), "namespace 'GPU Audit' is not a DNS-1123"),
        (KubernetesJobOptions(namespace="gpuaudit-"), "namespace 'gpuaudit-' is not a DNS-1123"),
        (KubernetesJobOptions(namespace="a" * 64), "not a DNS-1123 label: at most 63"),
        (KubernetesJobOptions(run_id="Q3/run"), "run id 'Q3/run' is not a DNS-1123"),
        (KubernetesJobOptions(image="busybox; rm -rf /"), "is not an image reference"),
        (KubernetesJobOptions(service_account="Admin"), "service account 'Admin' is not a DNS"),
        (KubernetesJobOptions(node_selector=(("gpu", "yes please"),)), "is not a label value"),
        (KubernetesJobOptions(node_selector=(("-gpu", "1"),)), "not a Kubernetes qualified"),
        (KubernetesJobOptions(tolerations=(Toleration("", "Equal", "x"),)), "needs operator"),
        (KubernetesJobOptions(tolerations=(Toleration("a", effect="Sometimes"),)), "effect"),
        (KubernetesJobOptions(bundle_host_path="/var/../etc"), "absolute plain path"),
        (KubernetesJobOptions(bundle_host_path="relative/dir"), "absolute plain path"),
        (
            KubernetesJobOptions(bundle_host_path="/srv/b", bundle_claim="b"),
            "not both",
        ),
        (KubernetesJobOptions(collector_env=(("GPUAUDIT_ROOT", "/x"),)), "not GPUAUDIT_ROOT"),
        (KubernetesJobOptions(collector_env=(("LD_PRELOAD", "/x.so"),)), "GPUAUDIT_* names"),
        (KubernetesJobOptions(collector_env=(("GPUAUDIT_TIMEOUT", "1\n2"),)), "control"),
        (
            KubernetesJobOptions(collector_env=(("GPUAUDIT_KERNEL_LOG_LINES", "10k"),)),
            "GPUAUDIT_KERNEL_LOG_LINES='10k': a plain number of at least 1",
        ),
        (
            KubernetesJobOptions(collector_env=(("GPUAUDIT_SECTION_BYTES", "4M"),)),
            "GPUAUDIT_SECTION_BYTES='4M': a plain number",
        ),
    ],
)
def test_hostile_options_are_refused(options: KubernetesJobOptions, message: str) -> None:
    with pytest.raises(ManifestOptionError, match=message.replace("*", r"\*")):
        render_manifest(options)


def test_the_pod_asks_for_no_more_than_it_needs() -> None:
    daemonset = _by_kind(_docs(KubernetesJobOptions()), "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert (pod["hostNetwork"], pod["hostPID"], pod["hostIPC"]) == (True, False, False)
    assert pod["automountServiceAccountToken"] is False
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    (collect,) = pod["initContainers"]
    context = collect["securityContext"]
    assert context["privileged"] is False and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["SYS_CHROOT", "SYSLOG"]}
    assert context["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m for m in collect["volumeMounts"]}
    assert mounts[HOST_MOUNT]["readOnly"] is True
    assert mounts[HOST_MOUNT]["recursiveReadOnly"] == "IfPossible"
    volumes = {v["name"]: v for v in pod["volumes"]}
    # The one writable place below /host is the pod's own volume, not the host's /tmp.
    assert "emptyDir" in volumes[mounts[f"{HOST_MOUNT}/tmp"]["name"]]
    assert all(m.get("readOnly") for p, m in mounts.items() if p != f"{HOST_MOUNT}/tmp")
    assert "resources" in collect and "nvidia.com/gpu" not in str(collect["resources"])
    (hold,) = pod["containers"]
    assert hold["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "env" not in hold  # no GPU, no host mount for the container that only waits
    assert [m["name"] for m in hold["volumeMounts"]] == ["work"]

    privileged = _by_kind(_docs(VARIANTS["privileged, hostPath bundles"]), "DaemonSet")
    context = privileged["spec"]["template"]["spec"]["initContainers"][0]["securityContext"]
    # The API refuses privileged with allowPrivilegeEscalation false: it is not set then.
    assert context["privileged"] is True and "allowPrivilegeEscalation" not in context


def _write_fake_chroot(directory: Path, host_env: dict[str, str]) -> None:
    """The stand-in for chroot(8): see the module docstring."""
    script = directory / "chroot"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "root, args = sys.argv[1], sys.argv[2:]\n"
        "if root != os.environ['EXPECTED_ROOT']:\n"
        "    sys.exit(f'chroot stand-in: asked for {root!r}')\n"
        "if os.environ.get('CHROOT_FAILS'):\n"
        "    sys.exit(\"chroot: failed to run command '/bin/sh': No such file or directory\")\n"
        "# A path inside the new root, where the root holds it (the script in its /tmp).\n"
        "args = [root + a if a.startswith('/') and os.path.exists(root + a) else a for a in args]\n"
        f"env = {{**os.environ, **{host_env!r}, 'TMPDIR': root + '/tmp'}}\n"
        "os.execvpe(args[0], args, env)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _run_pod(tmp_path: Path, options: KubernetesJobOptions, node: str, **extra: str):
    """Run the init container's command as the pod would; returns (process, mount map)."""
    docs = _docs(options)
    config = _by_kind(docs, "ConfigMap")
    pod = _by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    (collect,) = [c for c in pod["initContainers"] if c["name"] == COLLECT_CONTAINER]
    volumes = {v["name"]: v for v in pod["volumes"]}

    host = materialize("a100-hgx-01", "a100-hgx-01", tmp_path / "sim")
    mounts: dict[str, Path] = {}
    for mount in collect["volumeMounts"]:
        local = tmp_path / "pod" / mount["mountPath"].strip("/").replace("/", "_")
        local.mkdir(parents=True)
        if "configMap" in volumes[mount["name"]]:
            for key, text in config["data"].items():
                (local / key).write_text(text)
        mounts[mount["mountPath"]] = local
    host_root = mounts[HOST_MOUNT]
    # The emptyDir mounted over /host/tmp: that directory is the root's tmp.
    (host_root / "tmp").symlink_to(mounts[f"{HOST_MOUNT}/tmp"])

    def local_path(value: str) -> str:
        for path in sorted(mounts, key=len, reverse=True):
            if value == path or value.startswith(path + "/"):
                return str(mounts[path]) + value[len(path) :]
        return value

    env: dict[str, str] = {}
    for var in collect["env"]:
        if "valueFrom" in var:
            assert var["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            env[var["name"]] = node
        else:
            env[var["name"]] = local_path(var["value"]) if var["name"] != "TMPDIR" else "/tmp"
    fake = tmp_path / "standin-bin"
    fake.mkdir()
    _write_fake_chroot(fake, host.env())
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    env["EXPECTED_ROOT"] = str(host_root)
    env.update(extra)
    done = subprocess.run(
        collect["command"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one log, as kubectl logs prints both streams
        timeout=180,
        check=False,
    )
    return done, mounts, host


def test_the_container_command_gives_a_bundle_of_the_hosts_gpus(tmp_path: Path) -> None:
    options = KubernetesJobOptions(bundle_host_path="/var/lib/gpuaudit/bundles")
    done, mounts, host = _run_pod(tmp_path, options, node="gpu-node-07")
    assert done.returncode == 0, done.stdout[-2000:]

    # The log is the bundle (what `kubectl logs POD -c collect` prints).
    log = done.stdout.decode()
    bundle = parse_bundle_text(log)
    assert bundle.complete, bundle.problems
    assert bundle.problems == ()
    assert bundle.sections["meta"].stdout.startswith("hostname=")
    # The copies: on the bundle volume under the node's name, and in the pod's work volume.
    copy = mounts[BUNDLE_MOUNT] / "gpu-node-07.bundle"
    assert copy.read_bytes() == done.stdout
    assert (mounts[f"{HOST_MOUNT}/tmp"] / "bundle").read_bytes() == done.stdout
    assert not list(mounts[BUNDLE_MOUNT].glob(".*.part"))

    snapshot = snapshot_from_bundle(copy)
    assert snapshot.host == "gpu-node-07"
    # The simulated host holds 8 A100s; their UUIDs are the ones its state gives.
    simulated = host.state()["nvidia"]["gpus"]
    assert len(snapshot.gpus) == 8
    assert sorted(str(g.uuid) for g in snapshot.gpus) == sorted(g["uuid"] for g in simulated)
    assert all(g.name and "A100" in g.name for g in snapshot.gpus)


def test_a_failed_chroot_fails_the_init_container(tmp_path: Path) -> None:
    """Kubernetes then restarts it and the pod never becomes ready: the run does not pass."""
    done, _, _ = _run_pod(tmp_path, KubernetesJobOptions(), node="n1", CHROOT_FAILS="1")
    assert done.returncode != 0
    assert b"No such file or directory" in done.stdout
    assert not parse_bundle_text(done.stdout.decode()).complete


def test_the_command_line_options_give_the_options() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = (
        "--namespace audit --no-namespace --run-id q3 --node-selector gpu=a100"
        " --toleration dedicated=gpu:NoExecute --toleration maint --no-runtime-class"
        " --no-recursive-read-only --bundle-claim bundles --collector-env GPUAUDIT_TIMEOUT=30"
    )
    args = parser.parse_args(argv.split())
    options = options_from_args(args)
    assert options == KubernetesJobOptions(
        namespace="audit",
        create_namespace=False,
        run_id="q3",
        node_selector=(("gpu", "a100"),),
        tolerations=(
            Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),
            Toleration("dedicated", "Equal", "gpu", "NoExecute"),
            Toleration("maint", "Exists", "", ""),
        ),
        runtime_class=None,
        recursive_read_only=False,
        bundle_claim="bundles",
        collector_env=(("GPUAUDIT_TIMEOUT", "30"),),
    )
    defaults = options_from_args(parser.parse_args(["--tolerate-all"]))
    assert defaults.tolerations == (Toleration(),)
    assert defaults.node_selector == (("nvidia.com/gpu.present", "true"),)
    assert defaults.run_id.isalnum() and defaults.run_id == defaults.run_id.lower()
    with pytest.raises(ManifestOptionError, match="namespace 'GPU Audit'"):
        options_from_args(parser.parse_args(["--namespace", "GPU Audit"]))
    with pytest.raises(ManifestOptionError, match="expected NAME=VALUE"):
        options_from_args(parser.parse_args(["--node-selector", "gpu"]))


def test_gpuaudit_collect_job_kubernetes_prints_the_manifest(tmp_path: Path) -> None:
    out = tmp_path / "collect.yaml"
    argv = [sys.executable, "-m", "gpuaudit.cli", "collect-job", "kubernetes"]
    done = subprocess.run(
        [*argv, "--run-id", "q4-audit", "--namespace", "ops-audit", "-o", str(out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(out.read_text()) if d]
    assert [d["kind"] for d in docs] == ["Namespace", "ConfigMap", "DaemonSet"]
    assert {d["metadata"].get("namespace", d["metadata"]["name"]) for d in docs} == {"ops-audit"}
    for doc in docs:
        kubernetes_validate.validate(doc, LATEST, strict=True)
    refused = subprocess.run(
        [*argv, "--namespace", "Ops Audit"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert "is not a DNS-1123 label" in refused.stderr
