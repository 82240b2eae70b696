"""Real Debian roots for the remediation operations: debootstrap, apt, dpkg, dnf, rpm and
pyinfra's ``@chroot`` connector, no simulation.

Two roots are built once each and cached as tarballs in ``$GPUAUDIT_DEBROOT_CACHE`` (default
``<repo>/.cache/debroot``): ``bookworm-minbase.tar`` (``debootstrap --variant=minbase``) and
``bookworm-minbase-dnf.tar`` (the same with Debian's dnf, dnf-plugins-core, rpm and
createrepo_c). Each session prepares a template from each one it needs:

* the apt root gets a local apt repository at ``/srv/repo`` with dummy packages named like
  NVIDIA's, each at an old and a new version, and the old ones installed;
* the rpm root gets a local rpm repository at ``/srv/rpmrepo`` the same way, its rpm database
  at /var/lib/rpm, and apt purged, so that it looks like an rpm host to the operations.

Every test gets its own copy of a template (see :func:`fresh_copy`).

The roots have no network sources (apt and dnf see only their local repository) and nothing is
ever mounted in them: no /proc, /sys or /dev of this machine, so a command run inside cannot
change this machine's kernel settings. Every chroot command checks that first.

Building a root needs root privileges and a Debian mirror. When it cannot be built the tests
fail with the reason; they never skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from debroot_packages import (
    CANARY,
    CANARY_NEW,
    CANARY_OLD,
    DRIVER_PACKAGES,
    NEW,
    OLD,
    RPM_CANARY_NEW,
    RPM_CANARY_OLD,
    RPM_NEW,
    RPM_OLD,
    RPM_PACKAGES,
)

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SUITE = "bookworm"
BASE = f"{SUITE}-minbase"
# The rpm host: the same root with Debian's dnf (and its versionlock plugin), rpm, and
# createrepo_c to index the local rpm repository; apt is purged from each copy.
DNF_BASE = f"{SUITE}-minbase-dnf"
DNF_INCLUDE = ("dnf", "dnf-plugins-core", "rpm", "createrepo-c")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

SYSCTL_README = (
    "Files in /etc/sysctl.d/ are read by sysctl --system in the order of their names;\n"
    "see sysctl.d(5).\n"
)

# Under /usr/share: emptied in the cached root (see slim()).
SLIM_DIRS = ("doc", "man", "locale", "info", "lintian", "zoneinfo")
# Bumped when what the cached tarball holds changes; an older tarball is rebuilt.
BASE_FORMAT = "2"

# Controller tools the build uses, and the Debian package that ships each.
TOOLS = {
    "debootstrap": "debootstrap",
    "dpkg-deb": "dpkg",
    "dpkg-scanpackages": "dpkg-dev",
    "chroot": "coreutils",
}


def cache_dir() -> Path:
    return Path(os.environ.get("GPUAUDIT_DEBROOT_CACHE") or REPO / ".cache" / "debroot")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder is a ``debroot`` test (``-m 'not debroot'`` leaves them out)."""
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.debroot)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


_CALL_FAILED = pytest.StashKey[bool]()


# --- mounts ------------------------------------------------------------------------------------


def _unescape_mount(field_text: str) -> str:
    # /proc/self/mountinfo writes space, tab, newline and backslash as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_text)


def mounts_below(path: Path) -> list[str]:
    """Mount points at or under ``path`` (this machine's mount table)."""
    top = str(path.resolve())
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        for line in table:
            point = _unescape_mount(line.split()[4])
            if point == top or point.startswith(top + "/"):
                found.append(point)
    return found


def assert_nothing_mounted(root: Path) -> None:
    mounted = mounts_below(root)
    if mounted:
        raise AssertionError(f"{root}: something is mounted in the Debian root: {mounted}")


def unmount_below(path: Path) -> None:
    """Unmount whatever a failed debootstrap left mounted under ``path`` (deepest first)."""
    for point in sorted(mounts_below(path), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
    assert_nothing_mounted(path)


def remove_tree(path: Path) -> None:
    """Delete a root; refuses while anything is mounted in it and never crosses a mount."""
    if not path.exists():
        return
    assert_nothing_mounted(path)
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


# --- controller set-up -------------------------------------------------------------------------


def _which(tool: str) -> str | None:
    return shutil.which(tool) or next(
        (p for p in (f"/usr/sbin/{tool}", f"/sbin/{tool}") if os.access(p, os.X_OK)), None
    )


def ensure_tools() -> None:
    """The build needs root; missing tools are installed with apt-get, as `make system-deps`
    does, when running as root on an apt machine."""
    if os.geteuid() != 0:
        pytest.fail(
            "the debroot tests need root: debootstrap, chroot and dpkg inside the Debian root "
            "run as uid 0 (run them as root, e.g. `sudo .venv/bin/pytest tests/debroot`)",
            pytrace=False,
        )
    missing = sorted({package for tool, package in TOOLS.items() if not _which(tool)})
    if not missing:
        return
    apt_get = _which("apt-get")
    if not apt_get:
        pytest.fail(
            f"the debroot tests need {', '.join(missing)} and this machine has no apt-get",
            pytrace=False,
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in ([apt_get, "update", "-qq"], [apt_get, "install", "-y", "-qq", *missing]):
        run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
        if run.returncode != 0:
            pytest.fail(
                f"could not install {', '.join(missing)} for the debroot tests "
                f"(`{' '.join(argv)}` exited {run.returncode}):\n{run.stdout}{run.stderr}",
                pytrace=False,
            )
    still = [tool for tool in TOOLS if not _which(tool)]
    if still:
        pytest.fail(f"installed {missing} but still no {still}", pytrace=False)


def _source_entries() -> Iterator[tuple[str, list[str], list[str]]]:
    """(URI, suites, components) of each ``deb`` source of this machine's apt."""
    apt = Path("/etc/apt")
    lists = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]
    for path in lists:
        with contextlib.suppress(OSError):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
                if len(words) >= 4 and words[0] == "deb":
                    yield words[1], [words[2]], words[3:]
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        with contextlib.suppress(OSError):
            text = path.read_text(encoding="utf-8", errors="replace")
            for stanza in re.split(r"\n\s*\n", text):
                keys: dict[str, list[str]] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line or line[:1].isspace():
                        continue
                    key, _, value = line.partition(":")
                    keys[key.strip().lower()] = value.split()
                if "deb" in keys.get("types", []) and keys.get("enabled", ["yes"]) != ["no"]:
                    for uri in keys.get("uris", []):
                        yield uri, keys.get("suites", []), keys.get("components", [])


def debian_mirror() -> str:
    """``$GPUAUDIT_DEBROOT_MIRROR``, else the mirror this machine's apt uses for bookworm's
    main component, else deb.debian.org."""
    chosen = os.environ.get("GPUAUDIT_DEBROOT_MIRROR")
    if chosen:
        return chosen
    entries = [e for e in _source_entries() if "main" in e[2] and e[0].startswith("http")]
    for uri, suites, _ in entries:
        if SUITE in suites:
            return uri
    for uri, suites, _ in entries:  # another Debian release's mirror carries bookworm too
        if uri.rstrip("/").endswith("/debian") and any("-" not in s for s in suites):
            return uri
    return DEFAULT_MIRROR


# --- the root ----------------------------------------------------------------------------------


def chroot_run(
    root: Path, *argv: str, check: bool = True, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` inside ``root`` with a clean environment (nothing of this machine's)."""
    assert_nothing_mounted(root)
    proc = root / "proc"
    if proc.is_dir() and any(proc.iterdir()):
        raise AssertionError(f"{proc} is not empty: a proc file system seems to be there")
    command = [
        "chroot",
        str(root),
        "/usr/bin/env",
        "-i",
        f"PATH={CHROOT_PATH}",
        "LANG=C",
        "DEBIAN_FRONTEND=noninteractive",
        *argv,
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and run.returncode != 0:
        raise AssertionError(
            f"`{' '.join(argv)}` in {root} exited {run.returncode}:\n{run.stdout}{run.stderr}"
        )
    return run


def ensure_dev_null(root: Path) -> None:
    """debootstrap creates /dev/null with mknod; make sure it is the character device."""
    null = root / "dev" / "null"
    if null.is_char_device():
        return
    null.unlink(missing_ok=True)
    null.parent.mkdir(exist_ok=True)
    subprocess.run(["mknod", "-m", "666", str(null), "c", "1", "3"], check=True)


def strip_network(root: Path) -> None:
    """Remove the root's network sources, downloaded indices and cached .debs."""
    apt = root / "etc" / "apt"
    (apt / "sources.list").unlink(missing_ok=True)
    for entry in (apt / "sources.list.d").iterdir():
        entry.unlink()
    for sub in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for entry in (root / sub).iterdir():
            if entry.is_file():
                entry.unlink()
        (root / sub / "partial").mkdir(exist_ok=True)
    for entry in (root / "var/cache/apt").glob("*.bin"):
        entry.unlink()


def slim(root: Path) -> None:
    """Drop documentation, translations and time zones, as Debian's slim images do.

    Copying the root for each test costs per file; this halves the files (about 6,700 to
    2,800). Nothing apt, dpkg or pyinfra read is among them; UTC is kept for /etc/localtime.
    """
    share = root / "usr" / "share"
    utc = share / "zoneinfo" / "Etc"
    kept = {utc, utc / "UTC", share / "zoneinfo" / "UTC"}
    entries = [*(e for sub in SLIM_DIRS for e in (share / sub).glob("*")), *utc.glob("*")]
    for entry in entries:
        if entry in kept:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def build_base(tarball: Path, include: Sequence[str] = ()) -> float:
    """debootstrap a minbase root and store it as ``tarball``; returns the seconds it took."""
    started = time.monotonic()
    mirror = debian_mirror()
    name = tarball.name.removesuffix(".tar")
    work = Path(tempfile.mkdtemp(prefix=f"{name}.build.", dir=tarball.parent))
    target = work / "root"
    log = tarball.parent / f"{name}.debootstrap.log"
    try:
        argv = ["debootstrap", "--variant=minbase", "--components=main"]
        if include:
            argv.append("--include=" + ",".join(include))
        argv += [SUITE, str(target)]
        with log.open("w") as out:
            run = subprocess.run(
                [*argv, mirror], stdout=out, stderr=subprocess.STDOUT, timeout=1800
            )
        unmount_below(target)
        if run.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            pytest.fail(
                f"could not build the Debian root: `{' '.join(argv)} {mirror}` exited "
                f"{run.returncode} (full log: {log}; set GPUAUDIT_DEBROOT_MIRROR for another "
                f"mirror):\n{tail}",
                pytrace=False,
            )
        ensure_dev_null(target)
        strip_network(target)
        slim(target)
        partial = tarball.with_suffix(".tar.partial")
        subprocess.run(
            ["tar", "-C", str(target), "--numeric-owner", "-cf", str(partial), "."], check=True
        )
        os.replace(partial, tarball)
    finally:
        unmount_below(work)
        remove_tree(work)
    return time.monotonic() - started


def base_tarball(name: str = BASE, include: Sequence[str] = ()) -> tuple[Path, float | None]:
    """The cached tarball ``<name>.tar``, built under a lock when absent or of an older
    format (with the seconds spent building it)."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"{name}.tar"
    stamp = cache / f"{name}.format"
    with (cache / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = stamp.read_text().strip() if stamp.exists() else None
        if tarball.is_file() and tarball.stat().st_size > 0 and current == BASE_FORMAT:
            return tarball, None
        seconds = build_base(tarball, include)
        stamp.write_text(BASE_FORMAT + "\n")
        return tarball, seconds


def build_deb(out: Path, package: str, version: str, depends: Sequence[str], arch: str) -> None:
    tree = out.parent / "build" / f"{package}_{version}"
    data = tree / "usr" / "share" / package
    data.mkdir(parents=True)
    (data / "VERSION").write_text(f"{package} {version}: a dummy for gpuaudit's tests\n")
    (tree / "DEBIAN").mkdir()
    control = [
        f"Package: {package}",
        f"Version: {version}",
        f"Architecture: {arch}",
        "Maintainer: gpuaudit tests <tests@example.invalid>",
        "Section: non-free/libs",
        "Priority: optional",
    ]
    if depends:
        control.append("Depends: " + ", ".join(f"{d} (= {version})" for d in depends))
    control.append(f"Description: {package} (dummy, no driver content)")
    (tree / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(tree), str(out)],
        check=True,
        capture_output=True,
    )


def add_local_repository(root: Path) -> None:
    """Dummy NVIDIA packages at both versions in ``/srv/repo``, apt's only source."""
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], check=True, capture_output=True, text=True
    ).stdout.strip()
    repo = root / "srv" / "repo"
    repo.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "debs"
        out.mkdir()
        for version in (OLD, NEW):
            for package, depends in DRIVER_PACKAGES.items():
                build_deb(out, package, version, depends, arch)
        for version in (CANARY_OLD, CANARY_NEW):
            build_deb(out, CANARY, version, (), arch)
        for deb in out.iterdir():
            shutil.copy2(deb, repo / deb.name)
    index = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "."],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (repo / "Packages").write_text(index)
    apt = root / "etc" / "apt"
    (apt / "sources.list.d" / "local.list").write_text("deb [trusted=yes] file:/srv/repo ./\n")
    (apt / "apt.conf.d" / "90gpuaudit-offline").write_text(
        'Acquire::Languages "none";\nAPT::Install-Recommends "false";\n'
    )
    sources = [apt / "sources.list", *(apt / "sources.list.d").iterdir()]
    online = [p for p in sources if p.exists() and re.search(r"\b(https?|ftp)://", p.read_text())]
    assert not online, f"network sources left in the root: {online}"


def extract(tarball: Path, template: Path) -> None:
    template.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(template), "--numeric-owner", "-xf", str(tarball)], check=True)
    ensure_dev_null(template)


def prepare_template(tarball: Path, template: Path) -> None:
    extract(tarball, template)
    add_local_repository(template)
    chroot_run(template, "apt-get", "update")
    wanted = [f"{p}={OLD}" for p in DRIVER_PACKAGES] + [f"{CANARY}={CANARY_OLD}"]
    chroot_run(template, "apt-get", "install", "-y", *wanted)
    chroot_run(template, "apt-get", "clean")
    # minbase has no procps; a GPU host has, and with it this directory (its README only).
    sysctl_d = template / "etc" / "sysctl.d"
    sysctl_d.mkdir(exist_ok=True)
    (sysctl_d / "README.sysctl").write_text(SYSCTL_README)


RPM_SPEC = """\
%define debug_package %{{nil}}
Name: {name}
{epoch}Version: {version}
Release: {release}
Summary: {name} (dummy, no driver content)
License: none
{requires}
%description
A dummy package named like NVIDIA's, for gpuaudit's tests.

%install
mkdir -p %{{buildroot}}/usr/share/{name}
echo '{name} {version}-{release}' > %{{buildroot}}/usr/share/{name}/VERSION

%files
/usr/share/{name}/VERSION
"""


def rpm_nevr(name: str, version: str) -> tuple[str, str]:
    """(``name-version-release`` to ask dnf for, ``version-release`` as rpm -q prints it)."""
    _, release, _ = RPM_PACKAGES.get(name, (None, "1", ()))
    return f"{name}-{version}-{release}", f"{version}-{release}"


def build_rpm(root: Path, name: str, version: str) -> None:
    epoch, release, requires = RPM_PACKAGES.get(name, (None, "1", ()))
    lines = []
    for dep in requires:
        dep_epoch, dep_release, _ = RPM_PACKAGES[dep]
        evr = f"{dep_epoch + ':' if dep_epoch else ''}{version}-{dep_release}"
        lines.append(f"Requires: {dep} = {evr}")
    spec = root / "srv" / "rpmbuild" / "SPECS" / f"{name}-{version}.spec"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(
        RPM_SPEC.format(
            name=name,
            version=version,
            release=release,
            epoch=f"Epoch: {epoch}\n" if epoch else "",
            requires="\n".join(lines),
        )
    )
    chroot_run(
        root,
        "rpmbuild",
        "--quiet",
        "--define",
        "_topdir /srv/rpmbuild",
        "-bb",
        f"/srv/rpmbuild/SPECS/{spec.name}",
    )


def prepare_dnf_template(tarball: Path, template: Path) -> None:
    """A Debian root that is an rpm host: dnf with versionlock, its rpm database at
    /var/lib/rpm (Debian's rpm defaults to ~/.rpmdb), a local rpm repository, no apt."""
    extract(tarball, template)
    (template / "etc" / "rpm").mkdir(exist_ok=True)
    (template / "etc" / "rpm" / "macros.gpuaudit-dbpath").write_text("%_dbpath /var/lib/rpm\n")
    (template / "var" / "lib" / "rpm").mkdir(parents=True, exist_ok=True)
    for version in (RPM_OLD, RPM_NEW):
        for name in RPM_PACKAGES:
            build_rpm(template, name, version)
    for version in (RPM_CANARY_OLD, RPM_CANARY_NEW):
        build_rpm(template, CANARY, version)
    repo = template / "srv" / "rpmrepo"
    repo.mkdir(parents=True)
    for rpm in (template / "srv" / "rpmbuild" / "RPMS").rglob("*.rpm"):
        shutil.copy2(rpm, repo / rpm.name)
    shutil.rmtree(template / "srv" / "rpmbuild")
    chroot_run(template, "createrepo_c", "--quiet", "/srv/rpmrepo")
    dnf = template / "etc" / "dnf"
    (template / "etc" / "yum.repos.d").mkdir(exist_ok=True)
    (template / "etc" / "yum.repos.d" / "local.repo").write_text(
        "[local]\nname=local driver repository\nbaseurl=file:///srv/rpmrepo\n"
        "enabled=1\ngpgcheck=0\n"
    )
    # dnf-plugins-core's "local" plugin adds a signed repository of its own; not wanted here.
    (dnf / "plugins" / "local.conf").write_text("[main]\nenabled = false\n")
    (dnf / "vars").mkdir(exist_ok=True)
    (dnf / "vars" / "releasever").write_text("9\n")
    wanted = [rpm_nevr(name, RPM_OLD)[0] for name in RPM_PACKAGES]
    wanted.append(rpm_nevr(CANARY, RPM_CANARY_OLD)[0])
    chroot_run(template, "dnf", "-y", "-q", "install", *wanted)
    # An rpm host has no apt: gpuaudit's operations pick the package manager by what is there.
    chroot_run(template, "dpkg", "--purge", "apt")


# --- what tests use ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """``apt-cache policy <package>``: installed, candidate, and (version, priority) rows."""

    installed: str | None
    candidate: str | None
    versions: dict[str, int]
    text: str


@dataclass
class PyinfraRun:
    returncode: int
    output: str

    def results(self, operation: str) -> dict[str, str]:
        """The operation's row of pyinfra's results table: Hosts, Success, Error, No Change."""
        _, _, table = self.output.rpartition("--> Results:")
        row = re.compile(
            rf"^\s*{re.escape(operation)}\s{{2,}}(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$", re.M
        )
        match = row.search(table)
        assert match, f"no results row for {operation!r}:\n{self.output}"
        return dict(zip(("Hosts", "Success", "Error", "No Change"), match.groups(), strict=True))

    def changed(self, operation: str) -> bool:
        row = self.results(operation)
        assert row["Error"] == "-", self.output
        return row["Success"] != "-"


@dataclass
class Root:
    """One test's own copy of a Debian root."""

    path: Path
    deploys: Path
    runs: list[PyinfraRun] = field(default_factory=list, repr=False)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return chroot_run(self.path, *argv, check=check)

    def read(self, path: str) -> str | None:
        target = self.path / path.lstrip("/")
        return target.read_text() if target.exists() else None

    def pyinfra(self, deploy: str) -> PyinfraRun:
        """Run real pyinfra with the ``@chroot`` connector and ``deploy`` as the deploy file."""
        assert_nothing_mounted(self.path)
        self.deploys.mkdir(exist_ok=True)
        script = self.deploys / f"deploy{len(self.runs)}.py"
        script.write_text(deploy)
        run = subprocess.run(
            [sys.executable, "-m", "pyinfra", "-y", f"@chroot{self.path}", str(script)],
            cwd=self.deploys,
            capture_output=True,
            text=True,
            timeout=300,
        )
        result = PyinfraRun(run.returncode, run.stdout + run.stderr)
        self.runs.append(result)
        assert_nothing_mounted(self.path)
        return result


@dataclass
class DebRoot(Root):
    """An apt host: the old driver packages installed, the new ones in its repository."""

    def versions(self) -> dict[str, str]:
        """Installed packages of interest → version (``dpkg-query -W``)."""
        names = [*DRIVER_PACKAGES, CANARY]
        run = self.run(
            "dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\n", *names
        )
        installed = {}
        for line in run.stdout.splitlines():
            package, version, status = line.split(maxsplit=2)
            if status[1:2] == "i":  # "ii", or "hi" when held: installed either way
                installed[package] = version
        return installed

    def holds(self) -> list[str]:
        return sorted(self.run("apt-mark", "showhold").stdout.split())

    def policy(self, package: str) -> Policy:
        text = self.run("apt-cache", "policy", package).stdout

        def header(key: str) -> str | None:
            match = re.search(rf"^\s*{key}:\s*(\S+)", text, re.M)
            return None if match is None or match.group(1) == "(none)" else match.group(1)

        table = text.partition("Version table:")[2]
        rows = re.findall(r"^\s*(?:\*\*\*\s+)?(\S+)\s+(-?\d+)\s*$", table, re.M)
        return Policy(header("Installed"), header("Candidate"), {v: int(p) for v, p in rows}, text)


@dataclass
class DnfRoot(Root):
    """An rpm host: dnf with versionlock, the old driver packages installed, the new ones in
    its repository."""

    def versions(self) -> dict[str, str]:
        """Installed packages of interest → ``version-release`` (``rpm -qa``)."""
        run = self.run("rpm", "-qa", "--queryformat", "%{NAME} %{VERSION}-%{RELEASE}\n")
        wanted = {*RPM_PACKAGES, CANARY}
        pairs = (line.split() for line in run.stdout.splitlines())
        return {name: version for name, version in pairs if name in wanted}

    def locks(self) -> list[str]:
        """``dnf versionlock list`` as it prints it, sorted."""
        return sorted(self.run("dnf", "-q", "versionlock", "list").stdout.split())


@dataclass(frozen=True)
class Template:
    """A session's prepared root and the state of its /usr, which the copies link to."""

    path: Path
    usr: dict[str, tuple[int, int, int]]


def usr_snapshot(template: Path) -> dict[str, tuple[int, int, int]]:
    """(inode, mtime, size) of every file and link under the template's /usr."""
    found = {}
    for top, _, files in os.walk(template / "usr"):
        for name in files:
            info = os.lstat(os.path.join(top, name))
            found[os.path.join(top, name)] = (info.st_ino, info.st_mtime_ns, info.st_size)
    return found


def fresh_copy(template: Path, root: Path) -> None:
    """Copy the template for one test: ``cp -a`` for everything but /usr, hard links
    (``cp -al``) for /usr.

    Creating a file costs about 0.4 ms here, so a full ``cp -a`` of the dnf root (7,700
    files) takes 4-6 s and one of the apt root (2,800) 0.3-2 s; with /usr linked they take
    about 1.5 s and 0.3 s. dpkg and rpm replace a package's files by renaming new ones into
    place and never write into an installed file, so the links are never written through;
    :func:`check_usr_untouched` makes sure of that after every test.
    """
    root.mkdir()
    shutil.copystat(template, root)
    others = [str(entry) for entry in template.iterdir() if entry.name != "usr"]
    subprocess.run(["cp", "-a", *others, str(root)], check=True)
    subprocess.run(["cp", "-al", str(template / "usr"), str(root / "usr")], check=True)
    assert_nothing_mounted(root)


def check_usr_untouched(template: Path, before: dict[str, tuple[int, int, int]]) -> None:
    after = usr_snapshot(template)
    changed = sorted(path for path in before if after.get(path) != before[path])
    added = sorted(set(after) - set(before))
    if changed or added:
        raise AssertionError(
            "a file under the shared template's /usr was written through a hard link "
            f"(the template is spoiled for the other tests): {changed[:10]} {added[:10]}"
        )


def finish(
    root: Path, template: Path, usr: dict[str, tuple[int, int, int]], request: pytest.FixtureRequest
) -> None:
    """A passing test's root is deleted at once; a failing one's stays for a look."""
    assert_nothing_mounted(root)
    check_usr_untouched(template, usr)
    if not request.node.stash.get(_CALL_FAILED, True):
        remove_tree(root)


def session_template(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    include: Sequence[str],
    prepare: Callable[[Path, Path], None],
) -> Path:
    ensure_tools()
    tarball, built = base_tarball(name, include)
    if built is not None:
        print(f"\n[debroot] built {tarball} in {built:.1f}s", file=sys.stderr)
    template = tmp_path_factory.mktemp(name) / "template"
    started = time.monotonic()
    try:
        prepare(tarball, template)
    except (subprocess.CalledProcessError, AssertionError) as exc:
        detail = getattr(exc, "stderr", None) or ""
        pytest.fail(f"could not prepare the Debian root from {tarball}: {exc}\n{detail}")
    print(f"\n[debroot] prepared {template} in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return template


def _templates(
    factory: pytest.TempPathFactory, base: str, include: tuple[str, ...], prepare: Any
) -> Iterator[Template]:
    template = session_template(factory, base, include, prepare)
    yield Template(template, usr_snapshot(template))
    remove_tree(template)


def _copies(template: Template, tmp_path: Path, request: pytest.FixtureRequest, kind: Any):
    """A fresh copy of a session template for one test (see :func:`fresh_copy`), checked
    afterwards for writes through the shared /usr links."""
    root = tmp_path / "root"
    fresh_copy(template.path, root)
    yield kind(root, tmp_path / "deploys")
    finish(root, template.path, template.usr, request)


@pytest.fixture(scope="session")
def debroot_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Template]:
    """The session's apt root: cached minbase plus the local NVIDIA repository, old
    versions installed."""
    yield from _templates(tmp_path_factory, BASE, (), prepare_template)


@pytest.fixture
def debroot(
    debroot_template: Template, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[DebRoot]:
    """A fresh copy of the session's apt root for this test."""
    yield from _copies(debroot_template, tmp_path, request, DebRoot)


@pytest.fixture(scope="session")
def dnfroot_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Template]:
    """The session's rpm root: Debian's dnf and rpm, a local rpm repository, old versions
    installed, apt purged."""
    yield from _templates(tmp_path_factory, DNF_BASE, DNF_INCLUDE, prepare_dnf_template)


@pytest.fixture
def dnfroot(
    dnfroot_template: Template, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[DnfRoot]:
    """A fresh copy of the session's rpm root for this test."""
    yield from _copies(dnfroot_template, tmp_path, request, DnfRoot)
