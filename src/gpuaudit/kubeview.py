"""The Kubernetes view of a run: read once, kept in the run directory, loaded for every register.

``gpuaudit audit --kube-nodes FILE`` (a saved ``kubectl get nodes -o json``) or
``--kubeconfig PATH`` / ``--kube-context NAME`` (kubectl is run once, on the control node, with
a time limit) gives the scheduler rules (GA9xx) the cluster's view of the hosts. Before pyinfra
starts, the audit stores what it read in the run directory::

    cluster/kubernetes-nodes.json     the node list, as kubectl printed it (or as the file held)
    cluster/kubernetes-nodes.source   where it came from: the file, or the kubectl command
    cluster/kubernetes-nodes.failed   instead of the node list: why it could not be read

and :func:`load_cluster_view` reads it back whenever a register is written (the audit's own,
``gpuaudit report RUN``), so a rebuilt register judges the hosts against the same view. A
kubectl that fails, hangs or prints something that is not a node list is recorded in
``.failed`` and the rules say so (not evaluated, with the reason); it never stops the audit.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

from gpuaudit.model.cluster import ClusterView
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.kube import parse_nodes
from gpuaudit.parsers.warnings import collecting
from gpuaudit.report.run import atomic_write_files

CLUSTER_DIR = "cluster"
NODES_FILE = "kubernetes-nodes.json"
SOURCE_FILE = "kubernetes-nodes.source"
FAILED_FILE = "kubernetes-nodes.failed"
KUBECTL_TIMEOUT_S = 60
# A node list of a few thousand nodes is tens of MB; more than this is not a node list.
_MAX_BYTES = 512 * 1024 * 1024
_ERROR_CHARS = 2000


def kubectl_command(kubeconfig: str | None = None, context: str | None = None) -> list[str]:
    command = [os.environ.get("GPUAUDIT_KUBECTL") or "kubectl"]
    if kubeconfig:
        command.append(f"--kubeconfig={kubeconfig}")
    if context:
        command.append(f"--context={context}")
    return [*command, "get", "nodes", "-o", "json"]


def read_kubectl(
    kubeconfig: str | None = None,
    context: str | None = None,
    timeout: float = KUBECTL_TIMEOUT_S,
) -> tuple[str | None, str, str | None]:
    """Run ``kubectl get nodes -o json`` once: (its output or None, the command, why it failed
    or None). A missing kubectl, a timeout, an exit status other than 0 and output that is no
    node list are failures, said in words."""
    command = kubectl_command(kubeconfig, context)
    shown = " ".join(command)
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        return None, shown, f"{command[0]} is not installed on this machine"
    except subprocess.TimeoutExpired:
        return None, shown, f"{shown} did not answer within {timeout:g} s"
    except OSError as error:
        return None, shown, f"{shown} could not be started: {error}"
    stdout = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip() or stdout.strip()
        return None, shown, f"{shown} exited {done.returncode}: {said[:_ERROR_CHARS]}"
    try:
        parse_nodes(stdout, shown)
    except ParseError as error:
        return None, shown, f"{shown} printed no node list: {error}"
    return stdout, shown, None


def read_file(path: str | os.PathLike[str]) -> str:
    """A saved node list's text; OSError when it cannot be read, ParseError when it is not one
    (the caller refuses the option before any host is contacted)."""
    file = Path(path)
    if file.stat().st_size > _MAX_BYTES:
        raise ParseError("kubectl get nodes -o json", f"{file} is larger than a node list")
    text = file.read_bytes().decode("utf-8", "replace")
    parse_nodes(text, str(file))
    return text


def store(
    run_path: str | os.PathLike[str],
    *,
    text: str | None,
    source: str,
    error: str | None = None,
) -> None:
    """Keep the view in the run directory: the node list and its source, or why it failed
    (the other file is removed, so a new view replaces an old one whole)."""
    folder = Path(run_path) / CLUSTER_DIR
    folder.mkdir(parents=True, exist_ok=True)
    files = {folder / SOURCE_FILE: source.strip() + "\n"}
    if error is None and text is not None:
        files[folder / NODES_FILE] = text
        stale = folder / FAILED_FILE
    else:
        files[folder / FAILED_FILE] = (error or "no node list").strip() + "\n"
        stale = folder / NODES_FILE
    atomic_write_files(files)
    stale.unlink(missing_ok=True)


def copy_into(run_path: str | os.PathLike[str], nodes_file: str | os.PathLike[str]) -> None:
    """Store a saved node list (``gpuaudit report RUN --kube-nodes FILE``), checked first."""
    store(run_path, text=read_file(nodes_file), source=f"file {Path(nodes_file).resolve()}")


def load_cluster_view(run_path: str | os.PathLike[str]) -> ClusterView | None:
    """The run's view (None: the run was given none). A stored list that no longer parses,
    or a recorded failure, is a view with its ``error`` set."""
    folder = Path(run_path) / CLUSTER_DIR
    nodes, failed = folder / NODES_FILE, folder / FAILED_FILE
    if not nodes.is_file() and not failed.is_file():
        return None
    try:
        source = (folder / SOURCE_FILE).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        source = ""
    source = source or f"{CLUSTER_DIR}/{NODES_FILE}"
    try:
        if nodes.is_file():
            text = nodes.read_bytes().decode("utf-8", "replace")
            with collecting() as warnings:
                view = parse_nodes(text, source)
            return replace(view, warnings=tuple(warnings))
        reason = failed.read_text(encoding="utf-8", errors="replace").strip()
    except ParseError as error:
        reason = f"{CLUSTER_DIR}/{NODES_FILE}: {error}"
    except OSError as error:
        reason = f"{CLUSTER_DIR}: {error.strerror or error}"
    return ClusterView(source=source, error=reason or "the Kubernetes view could not be read")
