"""Collection as a Kubernetes workload: a DaemonSet that runs the collector once on every GPU node.

``render_manifest(options)`` returns the manifest as YAML text (``kubectl apply -f``): a
Namespace (optional), a ConfigMap holding the collector script (``gpuaudit collect-script``),
and a DaemonSet whose init container ``collect`` runs that script in the node's own root and
whose container ``hold`` only keeps the pod (and so the init container's log) alive. Each node's
bundle is the ``collect`` log, byte for byte, or the copy kept in the pod's volume (and, when
asked, on a hostPath or a PersistentVolumeClaim). docs/collect-with-kubernetes.md says how to
apply it, gather the bundles and read them with ``gpuaudit report --bundle-dir``.

Why a DaemonSet, not an indexed Job: a DaemonSet places exactly one pod on each node its
selector and tolerations admit, new GPU nodes included, with no count to keep in step with the
cluster; an indexed Job needs ``completions`` equal to the node count and anti-affinity to
spread them, and a node that joins or leaves mid-run breaks the count. The price is a pod that
stays running after the work is done (``hold``, a sleeping shell): the run is over when
``kubectl rollout status`` returns, and the DaemonSet is deleted after the bundles are read.

The collector runs as ``chroot /host /bin/sh /tmp/collector.sh``, the host's root mounted
read-only at /host: it then runs the host's own nvidia-smi, dmesg, dpkg-query and systemctl
against its own libraries and files, with no change to the script (the way NVIDIA's GPU
Operator validator and DRA driver run ``chroot /driver-root nvidia-smi``). The pod shares the
host's network namespace (net.* sysctls are per network namespace, and the host name comes
with it), not its PID namespace (the host's /proc is seen at /host/proc already). An emptyDir
over /host/tmp gives the script the only place it writes.
"""

from __future__ import annotations

import argparse
import functools
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

from gpuaudit.collect import check_collector_setting, collector_script

DEFAULT_IMAGE = "docker.io/library/busybox:1.36.1"
NAME_PREFIX = "gpuaudit-collect-"
COLLECT_CONTAINER = "collect"
HOLD_CONTAINER = "hold"
HOST_MOUNT = "/host"
SCRIPT_DIR = "/etc/gpuaudit"
SCRIPT_KEY = "collector.sh"
WORK_DIR = "/gpuaudit"  # where ``hold`` sees the bundle the init container kept
BUNDLE_MOUNT = "/bundles"
# The host's PATH inside the chroot: where distributions put nvidia-smi, dmesg and the rest.
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The init container's command. Paths come from its environment (set by the manifest): the
# host's root, the script, and where a copy of the bundle goes. The script is copied into the
# pod's volume that is /tmp inside the chroot and run from there with stdin from /dev/null (no
# tool it runs can read the script's own text). The collector's stdout is the bundle (the
# container log, and $t/bundle for ``kubectl exec ... cat``); its stderr is held back and
# printed after it, past the end marker, so that nothing is interleaved with the framing in the
# log. The exit status is chroot's: 0 when the script ran (the script always exits 0).
COLLECT_SH = """\
set -u
t="$HOST_ROOT/tmp"
cp "$COLLECTOR" "$t/collector.sh"
{ chroot "$HOST_ROOT" /bin/sh /tmp/collector.sh </dev/null 2>"$t/collector.err"
  echo $? >"$t/collector.rc"; } | tee "$t/bundle"
if [ -n "${BUNDLE_DIR:-}" ]; then
  cp "$t/bundle" "$BUNDLE_DIR/.$NODE_NAME.bundle.part" \\
    && mv -f "$BUNDLE_DIR/.$NODE_NAME.bundle.part" "$BUNDLE_DIR/$NODE_NAME.bundle"
fi
cat "$t/collector.err" >&2
exit "$(cat "$t/collector.rc")"
"""
HOLD_SH = "trap 'exit 0' TERM INT\nwhile :; do sleep 3600 & wait $!; done\n"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
_ENV_NAME = re.compile(r"^GPUAUDIT_[A-Z0-9_]+$")
_HOST_PATH = re.compile(r"^(/[A-Za-z0-9._+@-]+)+/?$")
_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
# Variables the collector reads that would break it here (it runs in the chroot, at its root).
_RESERVED_ENV = ("GPUAUDIT_ROOT",)


class ManifestOptionError(ValueError):
    """An option that would give an invalid or unsafe manifest."""


@dataclass(frozen=True)
class Toleration:
    key: str = ""  # empty with operator Exists: every taint
    operator: str = "Exists"  # "Exists" | "Equal"
    value: str = ""
    effect: str = ""  # empty: every effect


# GPU nodes are often tainted so that only GPU workloads land there (GKE, AKS and many sites).
GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
# The label NVIDIA GPU Feature Discovery (and so the GPU Operator) puts on GPU nodes.
GPU_NODE_SELECTOR = (("nvidia.com/gpu.present", "true"),)


@dataclass(frozen=True)
class KubernetesJobOptions:
    namespace: str = "gpuaudit"
    create_namespace: bool = True  # a Namespace document, labelled for Pod Security "privileged"
    run_id: str = "run"  # in the object names and the app.kubernetes.io/instance label
    image: str = DEFAULT_IMAGE  # needs sh, chroot, tee, cp, mv, cat, sleep (busybox has them)
    node_selector: tuple[tuple[str, str], ...] = GPU_NODE_SELECTOR
    tolerations: tuple[Toleration, ...] = (GPU_TOLERATION,)
    # The NVIDIA container runtime's RuntimeClass (the GPU Operator creates "nvidia"); None
    # where nvidia is the node's default runtime. With NVIDIA_VISIBLE_DEVICES=all it lets the
    # container open every GPU device without requesting (and so holding) any nvidia.com/gpu.
    runtime_class: str | None = "nvidia"
    # Privileged: every device, every capability. Only where the toolkit ignores
    # NVIDIA_VISIBLE_DEVICES in unprivileged containers, or MIG listing needs its capabilities.
    privileged: bool = False
    # recursiveReadOnly: IfPossible on the host mount (API field from Kubernetes 1.30): the
    # host's submounts (/run, /dev/shm, ...) read-only too. False for 1.29 and older.
    recursive_read_only: bool = True
    bundle_host_path: str | None = None  # a node directory the bundle is copied into
    bundle_claim: str | None = None  # or a PersistentVolumeClaim (ReadWriteMany) for them all
    service_account: str | None = None  # none needed: the pod gets no API token either way
    priority_class: str | None = None
    collector_env: tuple[tuple[str, str], ...] = ()  # GPUAUDIT_* settings for the collector
    extra_labels: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return NAME_PREFIX + self.run_id


def render_manifest(options: KubernetesJobOptions | None = None) -> str:
    """The manifest as YAML text, one document per object, ``---`` between them."""
    import yaml

    docs = manifest_documents(options or KubernetesJobOptions())
    dumper = _dumper()
    return "---\n".join(
        yaml.dump(doc, Dumper=dumper, sort_keys=False, width=100, allow_unicode=True)
        for doc in docs
    )


def manifest_documents(options: KubernetesJobOptions) -> list[dict[str, Any]]:
    """The manifest's objects, in the order they are applied."""
    check_options(options)
    labels = _labels(options)
    docs: list[dict[str, Any]] = []
    if options.create_namespace:
        docs.append(_namespace(options))
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": options.name, "namespace": options.namespace, "labels": labels},
            "data": {SCRIPT_KEY: collector_script()},
        }
    )
    docs.append(_daemonset(options, labels))
    return docs


def check_options(options: KubernetesJobOptions) -> None:
    """Refuse values Kubernetes would refuse, or that would make the manifest unsafe."""
    _dns_label("namespace", options.namespace, 63)
    _dns_label("run id", options.run_id, 40)
    if not _IMAGE.match(options.image) or len(options.image) > 512:
        raise ManifestOptionError(f"image {options.image!r} is not an image reference")
    for what, value in (
        ("runtime class", options.runtime_class),
        ("service account", options.service_account),
        ("priority class", options.priority_class),
        ("bundle claim", options.bundle_claim),
    ):
        if value is not None:
            _dns_subdomain(what, value)
    for key, value in (*options.node_selector, *options.extra_labels):
        _label_key(key)
        _label_value(key, value)
    for tol in options.tolerations:
        _toleration(tol)
    if options.bundle_host_path is not None:
        path = options.bundle_host_path
        if not _HOST_PATH.match(path) or ".." in path.split("/") or "." in path.split("/"):
            raise ManifestOptionError(f"bundle host path {path!r} must be an absolute plain path")
    if options.bundle_host_path is not None and options.bundle_claim is not None:
        raise ManifestOptionError("give a bundle host path or a bundle claim, not both")
    for name, value in options.collector_env:
        if not _ENV_NAME.match(name) or name in _RESERVED_ENV:
            raise ManifestOptionError(
                f"collector setting {name!r}: GPUAUDIT_* names only, and not {_RESERVED_ENV[0]}"
            )
        if any(ord(ch) < 32 for ch in value):
            raise ManifestOptionError(f"collector setting {name}: control characters in value")
        try:
            check_collector_setting(name, value)
        except ValueError as error:
            raise ManifestOptionError(str(error)) from None


def _dns_label(what: str, value: str, limit: int) -> None:
    if len(value) > limit or not _DNS_LABEL.match(value):
        raise ManifestOptionError(
            f"{what} {value!r} is not a DNS-1123 label: at most {limit} lower-case letters, "
            "digits and '-', starting and ending with a letter or digit"
        )


def _dns_subdomain(what: str, value: str) -> None:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ManifestOptionError(
            f"{what} {value!r} is not a DNS-1123 subdomain: lower-case letters, digits, '-' "
            "and '.', at most 253 characters"
        )


def _label_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix:
        _dns_subdomain(f"label prefix of {key!r}", prefix)
    if len(name) > 63 or not _LABEL_NAME.match(name):
        raise ManifestOptionError(f"label key {key!r} is not a Kubernetes qualified name")


def _label_value(key: str, value: str) -> None:
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        raise ManifestOptionError(f"label {key!r}: value {value!r} is not a label value")


def _toleration(tol: Toleration) -> None:
    if tol.operator not in ("Exists", "Equal"):
        raise ManifestOptionError(f"toleration operator {tol.operator!r}: Exists or Equal")
    if tol.effect not in _EFFECTS:
        raise ManifestOptionError(f"toleration effect {tol.effect!r}: one of {_EFFECTS[1:]}")
    if tol.key:
        _label_key(tol.key)
    elif tol.operator != "Exists":
        raise ManifestOptionError("a toleration without a key needs operator Exists")
    if tol.operator == "Exists" and tol.value:
        raise ManifestOptionError(f"toleration {tol.key!r}: operator Exists takes no value")
    _label_value(tol.key, tol.value)


def _labels(options: KubernetesJobOptions) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "gpuaudit-collect",
        "app.kubernetes.io/instance": options.run_id,
        "app.kubernetes.io/part-of": "gpuaudit",
        **dict(options.extra_labels),
    }


def _namespace(options: KubernetesJobOptions) -> dict[str, Any]:
    # hostPath volumes and hostNetwork are outside the Pod Security "baseline" level.
    pss = {
        f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "warn", "audit")
    }
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": options.namespace, "labels": pss},
    }


def _security_context(options: KubernetesJobOptions) -> dict[str, Any]:
    if options.privileged:
        return {"privileged": True, "runAsUser": 0, "readOnlyRootFilesystem": True}
    return {
        # root: the host's logs, package database and kernel log are root's to read
        "runAsUser": 0,
        "runAsNonRoot": False,
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        # SYS_CHROOT for chroot /host; SYSLOG for dmesg where kernel.dmesg_restrict=1
        "capabilities": {"drop": ["ALL"], "add": ["SYS_CHROOT", "SYSLOG"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _volumes(options: KubernetesJobOptions) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}},
        {"name": "script", "configMap": {"name": options.name, "defaultMode": 0o444}},
        {"name": "work", "emptyDir": {"sizeLimit": "256Mi"}},
    ]
    if options.bundle_host_path is not None:
        volumes.append(
            {
                "name": "bundles",
                "hostPath": {"path": options.bundle_host_path, "type": "DirectoryOrCreate"},
            }
        )
    elif options.bundle_claim is not None:
        volumes.append(
            {"name": "bundles", "persistentVolumeClaim": {"claimName": options.bundle_claim}}
        )
    return volumes


def _collect_container(options: KubernetesJobOptions) -> dict[str, Any]:
    host_mount: dict[str, Any] = {"name": "host-root", "mountPath": HOST_MOUNT, "readOnly": True}
    if options.recursive_read_only:
        host_mount["recursiveReadOnly"] = "IfPossible"
    mounts = [
        host_mount,
        # The only place the script writes: /tmp inside the chroot (a pod volume, not the host's).
        {"name": "work", "mountPath": f"{HOST_MOUNT}/tmp"},
        {"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True},
    ]
    env: list[dict[str, Any]] = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "HOST_ROOT", "value": HOST_MOUNT},
        {"name": "COLLECTOR", "value": f"{SCRIPT_DIR}/{SCRIPT_KEY}"},
        {"name": "PATH", "value": HOST_PATH},
        {"name": "TMPDIR", "value": "/tmp"},
        # The NVIDIA container toolkit lets the container open every GPU (no nvidia.com/gpu
        # is requested: a busy node's GPUs are audited too); utility: NVML and nvidia-smi.
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        *({"name": name, "value": value} for name, value in options.collector_env),
    ]
    if options.bundle_host_path is not None or options.bundle_claim is not None:
        mounts.append({"name": "bundles", "mountPath": BUNDLE_MOUNT})
        env.append({"name": "BUNDLE_DIR", "value": BUNDLE_MOUNT})
    return {
        "name": COLLECT_CONTAINER,
        "image": options.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", COLLECT_SH],
        "env": env,
        "volumeMounts": mounts,
        "securityContext": _security_context(options),
        "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"memory": "1Gi"},
        },
    }


def _daemonset(options: KubernetesJobOptions, labels: dict[str, str]) -> dict[str, Any]:
    selector = {
        "app.kubernetes.io/name": labels["app.kubernetes.io/name"],
        "app.kubernetes.io/instance": options.run_id,
    }
    hold = {
        "name": HOLD_CONTAINER,
        "image": options.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", HOLD_SH],
        "volumeMounts": [{"name": "work", "mountPath": WORK_DIR, "readOnly": True}],
        "securityContext": {
            "runAsUser": 0,  # the bundle in the work volume is root's (mode 0644): readable
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": {
            "requests": {"cpu": "1m", "memory": "8Mi"},
            "limits": {"cpu": "50m", "memory": "32Mi"},
        },
    }
    pod_spec: dict[str, Any] = {
        "hostNetwork": True,
        "hostPID": False,
        "hostIPC": False,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
    }
    if options.node_selector:
        pod_spec["nodeSelector"] = dict(options.node_selector)
    if options.tolerations:
        pod_spec["tolerations"] = [_toleration_doc(t) for t in options.tolerations]
    if options.runtime_class is not None:
        pod_spec["runtimeClassName"] = options.runtime_class
    if options.service_account is not None:
        pod_spec["serviceAccountName"] = options.service_account
    if options.priority_class is not None:
        pod_spec["priorityClassName"] = options.priority_class
    pod_spec["initContainers"] = [_collect_container(options)]
    pod_spec["containers"] = [hold]
    pod_spec["volumes"] = _volumes(options)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": options.name, "namespace": options.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "100%"},
            },
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"kubectl.kubernetes.io/default-container": HOLD_CONTAINER},
                },
                "spec": pod_spec,
            },
        },
    }


def _toleration_doc(tol: Toleration) -> dict[str, str]:
    doc = {"key": tol.key, "operator": tol.operator, "value": tol.value, "effect": tol.effect}
    return {k: v for k, v in doc.items() if v}


@functools.cache
def _dumper() -> type[yaml.SafeDumper]:
    """YAML with multi-line strings (the scripts) as literal blocks, readable in review, and
    no anchors: each object spelled out, as kubectl prints it. Made on first use: the parser
    of this command is added on every start of `gpuaudit`, and yaml is not needed for it."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def literal(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, literal)
    return Dumper


# The command line: ``gpuaudit collect-job kubernetes`` (cli.py adds the parser and calls these).


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``gpuaudit collect-job kubernetes``."""
    add = parser.add_argument
    add("--namespace", default="gpuaudit", help="namespace of the workload (default: gpuaudit)")
    add("--no-namespace", action="store_true", help="the namespace exists: no Namespace object")
    add("--run-id", help="names the objects and labels the pods (default: the UTC time)")
    add("--image", default=DEFAULT_IMAGE, help=f"image with sh and chroot ({DEFAULT_IMAGE})")
    add("--node-selector", action="append", metavar="KEY=VALUE",
        help="nodes to collect on (repeatable; default nvidia.com/gpu.present=true)")  # fmt: skip
    add("--toleration", action="append", metavar="KEY[=VALUE][:EFFECT]",
        help="a taint to tolerate besides nvidia.com/gpu:NoSchedule (repeatable)")  # fmt: skip
    add("--tolerate-all", action="store_true", help="run on every tainted node too")
    add("--runtime-class", default="nvidia", help="RuntimeClass of the NVIDIA runtime (nvidia)")
    add("--no-runtime-class", action="store_true", help="nvidia is the nodes' default runtime")
    add("--privileged", action="store_true", help="a privileged collector (see the docs)")
    add("--no-recursive-read-only", action="store_true", help="for Kubernetes 1.29 and older")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--bundle-host-path", metavar="DIR", help="also copy bundles to DIR on nodes"
    )
    where.add_argument("--bundle-claim", metavar="PVC", help="also copy bundles to this RWX claim")
    add("--service-account", help="serviceAccountName of the pods (none needed)")
    add("--priority-class", help="priorityClassName of the pods")
    add("--collector-env", action="append", metavar="GPUAUDIT_NAME=VALUE",
        help="a collector setting, e.g. GPUAUDIT_TIMEOUT=30 (repeatable)")  # fmt: skip


def options_from_args(args: argparse.Namespace) -> KubernetesJobOptions:
    """The options ``add_arguments`` parsed; a bad value raises :class:`ManifestOptionError`."""
    selector = tuple(_pair(t, "node selector") for t in args.node_selector or ())
    tolerations = [GPU_TOLERATION, *(parse_toleration(t) for t in args.toleration or ())]
    if args.tolerate_all:
        tolerations = [Toleration()]
    options = KubernetesJobOptions(
        namespace=args.namespace,
        create_namespace=not args.no_namespace,
        run_id=args.run_id or time.strftime("%Y%m%dt%H%M%S", time.gmtime()),
        image=args.image,
        node_selector=selector or GPU_NODE_SELECTOR,
        tolerations=tuple(tolerations),
        runtime_class=None if args.no_runtime_class else args.runtime_class,
        privileged=args.privileged,
        recursive_read_only=not args.no_recursive_read_only,
        bundle_host_path=args.bundle_host_path,
        bundle_claim=args.bundle_claim,
        service_account=args.service_account,
        priority_class=args.priority_class,
        collector_env=tuple(_pair(t, "collector setting") for t in args.collector_env or ()),
    )
    check_options(options)
    return options


def parse_toleration(text: str) -> Toleration:
    """``KEY[=VALUE][:EFFECT]``: Equal with a value, else Exists; no effect: every effect."""
    rest, _, effect = text.partition(":")
    key, eq, value = rest.partition("=")
    tol = Toleration(key=key, operator="Equal" if eq else "Exists", value=value, effect=effect)
    _toleration(tol)
    return tol


def _pair(text: str, what: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise ManifestOptionError(f"{what} {text!r}: expected NAME=VALUE")
    return key, value
