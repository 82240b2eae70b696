"""How a command run "on" a simulated host is kept off the machine running the simulator.

Each simulated host has a root file system of its own, made of two overlays mounted in a
private mount namespace for the length of one command and then entered with ``chroot``:

    /        overlay: lower = <sim dir>/.base (a skeleton shared by every host),
                      upper = <host>/root   (the host's own files: /etc, /var, /proc, /dev …)
    /usr     overlay: lower = this machine's /usr (read only through the overlay),
                      upper = <host>/usr    (the host's tools: nvidia-smi, systemctl … shims,
                                             and whiteouts hiding the real ones it must not run)

plus read-only bind mounts of the Python runtime the simulated tools run on, and of
``/dev/null``, ``/dev/zero``, ``/dev/full``, ``/dev/random`` and ``/dev/urandom``. Nothing of this
machine's /proc, /sys, /dev, /etc, /var, /tmp or home directories is visible, so ``files.line``,
``sed -i``, ``rm -rf /etc``, a real ``sysctl -p`` or ``dpkg`` run by absolute path change only the
host's upper directories. The command also gets new PID, UTS, IPC and network namespaces
(``kill -1`` or ``reboot -f`` end only the command itself; no network) and runs with a bounding
set reduced to the file-owning capabilities (no CAP_SYS_ADMIN, SYS_MODULE, SYS_BOOT,
SYS_TIME, MKNOD, SYS_CHROOT, NET_ADMIN …), so it can neither mount nor load a module nor leave
the chroot.

As root this is done directly; as another user in a user namespace of its own (``unshare
--user --map-root-user``, overlayfs with ``userxattr``), where the kernel allows unprivileged
user namespaces. Where neither is available — user namespaces disabled, a kernel without
overlayfs, a simulator directory on a file system overlayfs cannot use as an upper layer —
:func:`isolation_problem` says why and the connector runs only the audit's read-only
collector, refusing every other command.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
import threading
from functools import cache
from pathlib import Path

# "off": the read-only mode even where isolation works; "userns": a user namespace even as
# root (how other users run); unset: root directly, other users in a user namespace.
ISOLATION_ENV = "GPUAUDIT_SIM_ISOLATION"
BASE_NAME = ".base"
# Bumped when the skeleton changes, so an old one is rebuilt.
_BASE_VERSION = "1"
# The skeleton's marker file: its first line is the version.
_BASE_MARKER = ".gpuaudit-base"
_DEVICES = ("null", "zero", "full", "random", "urandom")
# Trees of this machine the host sees through an overlay of its own (when they are real
# directories; on a merged-/usr system /bin, /sbin and /lib are links into /usr).
SYSTEM_TREES = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Where a host's commands are looked up; a tool the host does not have is whited out in each.
BIN_DIRS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The capabilities a command on a simulated host keeps: enough to own and change files in its
# own root, none that reach the kernel, the mounts or the machine.
_KEPT_CAPS = (
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
    "net_bind_service", "audit_write",
)  # fmt: skip
# /etc files of this machine copied into the skeleton: who root is, and /etc/alternatives,
# through which Debian's /usr/bin/awk, /usr/bin/which … resolve.
_ETC_COPIES = ("passwd", "group", "nsswitch.conf", "ld.so.conf", "ld.so.conf.d", "alternatives")


class IsolationUnavailable(RuntimeError):
    """Simulated hosts cannot be isolated here; the message says why."""


def overlay_trees() -> list[str]:
    """The system trees this machine has as real directories (each gets its own overlay)."""
    return [t for t in SYSTEM_TREES if os.path.isdir(f"/{t}") and not os.path.islink(f"/{t}")]


def runtime_paths() -> list[str]:
    """Directories the simulated tools' Python needs (interpreter, venv, gpuaudit itself),
    outside the overlaid system trees, without any that another one contains.

    The directory this process started in is left out, though ``python -m`` puts it on
    ``sys.path``: sshd starts a login's commands in its home directory, which a simulated host
    must not see (gpuaudit's own directory is named on its own)."""
    import gpuaudit

    wanted = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # the directory was removed
        here = None
    wanted.update(p for p in sys.path if p and os.path.isdir(p) and os.path.realpath(p) != here)
    wanted.add(str(Path(gpuaudit.__file__).resolve().parents[1]))
    trees = tuple(f"/{t}/" for t in overlay_trees())
    real = sorted({os.path.realpath(p) for p in wanted if os.path.isdir(p)})
    real = [p for p in real if p != "/" and not (p + "/").startswith(trees)]
    return [p for p in real if not any(p.startswith(other + "/") for other in real)]


def base_dir(sim_dir: Path) -> Path:
    return Path(sim_dir) / BASE_NAME


def ensure_base(sim_dir: Path) -> Path:
    """The skeleton every host's root overlays, built once per simulator directory, with a
    mount point for each of this process's runtime paths.

    Processes differ in their runtime paths: the directory a command starts in is on its
    ``sys.path``, and sshd starts each simulated host's commands in the login's home directory.
    A process whose paths the skeleton lacks adds their mount points to it. It never builds the
    skeleton anew while it is current: other hosts' commands may be running on it, and a
    skeleton taken from under a running command leaves it without /etc or /usr.
    """
    base = base_dir(sim_dir)
    if _base_version(base) != _BASE_VERSION:
        _build_base(base)
    for path in runtime_paths():
        (base / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return base


def _base_version(base: Path) -> str | None:
    try:
        return (base / _BASE_MARKER).read_text(encoding="utf-8").partition("\n")[0]
    except OSError:
        return None


def _build_base(base: Path) -> None:
    tmp = base.with_name(f"{BASE_NAME}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    tmp.mkdir(parents=True)
    for name in ("etc", "var/lib", "var/log", "run", "root", "home", "opt", "srv", "proc", "sys"):
        (tmp / name).mkdir(parents=True, exist_ok=True)
    (tmp / "tmp").mkdir(mode=0o1777)
    os.chmod(tmp / "tmp", 0o1777)
    os.chmod(tmp / "root", 0o700)
    for tree in SYSTEM_TREES:
        source = Path(f"/{tree}")
        if source.is_symlink():
            (tmp / tree).symlink_to(os.readlink(source))
        elif source.is_dir():
            (tmp / tree).mkdir()
    (tmp / "dev").mkdir()
    for device in _DEVICES:
        (tmp / "dev" / device).touch()
    for name in _ETC_COPIES:
        source = Path("/etc") / name
        if source.is_dir():
            shutil.copytree(source, tmp / "etc" / name, symlinks=True)
        elif source.is_file():
            shutil.copy2(source, tmp / "etc" / name)
    (tmp / _BASE_MARKER).write_text(f"{_BASE_VERSION}\n", encoding="utf-8")
    # Another process may have built it meanwhile: keep theirs if it is current. Only a
    # skeleton of another version (an older gpuaudit's) is replaced.
    if base.exists() and _base_version(base) != _BASE_VERSION:
        shutil.rmtree(base, ignore_errors=True)
    try:
        tmp.rename(base)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def in_user_namespace() -> bool:
    """Whether hosts are entered through a user namespace (not root, or asked to)."""
    return os.geteuid() != 0 or os.environ.get(ISOLATION_ENV) == "userns"


def whiteout(path: Path) -> None:
    """Hide ``path`` of the lower layer in an overlay's upper directory (a 0/0 character
    device, which Linux lets any user create)."""
    if path.is_symlink() or path.exists():
        if stat.S_ISCHR(path.lstat().st_mode) and path.lstat().st_rdev == 0:
            return
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))


def upper_for(host_dir: Path, relative: str) -> Path:
    """The upper-layer path of a host file given relative to its root (``usr/bin/dmesg``)."""
    top, _, rest = relative.partition("/")
    if top in overlay_trees():
        return host_dir / top / rest
    return host_dir / "root" / relative


def enter_command(host_dir: Path, sim_dir: Path, command: str) -> list[str]:
    """argv that runs the shell ``command`` inside the host's isolated root."""
    base = base_dir(sim_dir)
    merged = host_dir / "merged"
    q = shlex.quote
    userns = in_user_namespace()
    steps = [
        "set -e",
        _overlay(base, host_dir / "root", host_dir / "work" / "root", merged, userns),
    ]
    for tree in overlay_trees():
        upper, work = host_dir / tree, host_dir / "work" / tree
        steps.append(_overlay(Path(f"/{tree}"), upper, work, merged / tree, userns))
    for device in _DEVICES:
        if os.path.exists(f"/dev/{device}"):
            steps.append(f"mount --bind /dev/{device} {q(str(merged / 'dev' / device))}")
    for path in runtime_paths():
        steps.append(f"mount --rbind -o ro {q(path)} {q(str(merged) + path)}")
    caps = ",".join(["-all", *(f"+{cap}" for cap in _KEPT_CAPS)])
    steps.append(
        f"exec chroot {q(str(merged))} /usr/bin/setpriv --inh-caps=-all --bounding-set={caps} "
        f'/usr/bin/env -i PATH={HOST_PATH} HOME=/root LANG=C.UTF-8 /bin/sh -c "$1"'
    )
    script = "\n".join(steps)
    user = ["--user", "--map-root-user"] if userns else []
    return [
        "unshare", *user, "--mount", "--propagation", "private", "--pid", "--fork", "--uts",
        "--ipc", "--net", "--", "/bin/sh", "-c", script, "gpuaudit-sim", command,
    ]  # fmt: skip


def _overlay(lower: Path, upper: Path, work: Path, target: Path, userns: bool) -> str:
    # In a user namespace overlayfs keeps its metadata in user.* extended attributes.
    extra = ",userxattr" if userns else ""
    options = f"lowerdir={lower},upperdir={upper},workdir={work},index=off{extra}"
    return f"mount -t overlay gpuaudit-sim -o {shlex.quote(options)} {shlex.quote(str(target))}"


def prepare_host_dirs(host_dir: Path) -> None:
    for name in ("root", "merged", *overlay_trees()):
        (host_dir / name).mkdir(parents=True, exist_ok=True)
    for name in ("root", *overlay_trees()):
        (host_dir / "work" / name).mkdir(parents=True, exist_ok=True)


def isolation_problem(sim_dir: Path) -> str | None:
    """Why simulated hosts cannot be isolated under ``sim_dir`` (None when they can)."""
    return _probe(str(Path(sim_dir).resolve()), os.environ.get(ISOLATION_ENV, ""))


_PROBE_LOCK = threading.Lock()


def _probe(sim_dir: str, setting: str) -> str | None:
    # Hosts connect side by side (pyinfra's greenlets): one probe, the others wait for it.
    with _PROBE_LOCK:
        return _probe_once(sim_dir, setting)


@cache
def _probe_once(sim_dir: str, setting: str) -> str | None:
    if setting == "off":
        return f"{ISOLATION_ENV}=off"
    for tool in ("unshare", "chroot", "mount", "setpriv"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    probe = Path(sim_dir) / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        ensure_base(Path(sim_dir))
        prepare_host_dirs(probe)
        whiteout(probe / "root" / "gone")
        argv = enter_command(probe, Path(sim_dir), "test ! -e /gone && echo x > /etc/probe")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0 or not (probe / "root" / "etc" / "probe").is_file():
            how = "in a user namespace" if in_user_namespace() else "as root"
            return f"the isolated root could not be entered {how}: {done.stderr.strip()[-300:]}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the isolated root could not be set up: {exc}"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return None
