"""gpuaudit.operations.sysctl.baseline against a real Debian root through pyinfra's ``@chroot``
connector, with ``apply=False``: the root has no /proc, and this machine's own sysctl files and
running values must come out byte-identical."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuaudit.operations.sysctl import render

VALUES = {"vm.swappiness": 13, "net.core.rmem_max": 134217728}
DROPIN = "/etc/sysctl.d/90-gpuaudit.conf"
DEPLOY = f"""
from gpuaudit.operations import sysctl

sysctl.baseline(name="Keep the sysctl baseline", values={VALUES!r}, apply=False)
"""


def controller_sysctl() -> dict[str, object]:
    """This machine's sysctl configuration files (links, bytes, modes) and running values."""
    state: dict[str, object] = {}
    for directory in ("/etc/sysctl.d", "/run/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d"):
        top = Path(directory)
        if not top.is_dir():
            continue
        for entry in sorted(top.iterdir()):
            info = os.lstat(entry)
            link = os.readlink(entry) if entry.is_symlink() else None
            body = entry.read_bytes() if entry.is_file() else None
            state[str(entry)] = (info.st_mode, info.st_mtime_ns, link, body)
    conf = Path("/etc/sysctl.conf")
    state[str(conf)] = conf.read_bytes() if conf.exists() else None
    for key in VALUES:
        proc = Path("/proc/sys") / key.replace(".", "/")
        state[str(proc)] = proc.read_text() if proc.exists() else None
    return state


def test_baseline_writes_the_dropin_in_the_root_only(debroot) -> None:
    before = controller_sysctl()

    first = debroot.pyinfra(DEPLOY)
    assert first.returncode == 0, first.output
    assert first.changed("Keep the sysctl baseline")
    dropin = debroot.path / DROPIN.lstrip("/")
    content = dropin.read_text()
    assert content == render({k: str(v) for k, v in VALUES.items()})
    settings = [line for line in content.splitlines() if not line.startswith("#")]
    assert settings == ["net.core.rmem_max = 134217728", "vm.swappiness = 13"]
    info = dropin.stat()
    assert (info.st_mode & 0o777, info.st_uid, info.st_gid) == (0o644, 0, 0)

    second = debroot.pyinfra(DEPLOY)
    assert second.returncode == 0, second.output
    assert not second.changed("Keep the sysctl baseline"), second.output
    assert second.results("Keep the sysctl baseline")["No Change"] == "1"
    assert dropin.read_text() == content

    assert controller_sysctl() == before
    assert not any((debroot.path / "proc").iterdir())


@pytest.mark.parametrize(
    ("options", "before_text", "after_text"),
    [
        # A number in the baseline is a minimum: the later file's rmem_max below it undoes
        # the drop-in at boot and is commented out; its swappiness above the baseline's is kept.
        pytest.param(
            "",
            "# site tuning\nvm.swappiness = 60\nnet.core.rmem_max = 212992\n"
            "kernel.pid_max = 4194304\n",
            "# site tuning\nvm.swappiness = 60\n# gpuaudit: net.core.rmem_max = 212992\n"
            "kernel.pid_max = 4194304\n",
            id="minimum",
        ),
        # exact=True holds the numbers exactly: any other value is a shadow.
        pytest.param(
            ", exact=True",
            "# site tuning\nvm.swappiness = 60\nkernel.pid_max = 4194304\n",
            "# site tuning\n# gpuaudit: vm.swappiness = 60\nkernel.pid_max = 4194304\n",
            id="exact",
        ),
    ],
)
def test_fix_shadows_comments_out_a_later_file_in_the_root(
    debroot, options: str, before_text: str, after_text: str
) -> None:
    before = controller_sysctl()
    override = debroot.path / "etc" / "sysctl.d" / "99-site.conf"
    override.write_text(before_text)
    deploy = DEPLOY.replace("apply=False", f"apply=False, fix_shadows=True{options}")

    first = debroot.pyinfra(deploy)
    assert first.returncode == 0, first.output
    assert first.changed("Keep the sysctl baseline")
    assert override.read_text() == after_text

    second = debroot.pyinfra(deploy)
    assert second.returncode == 0, second.output
    assert not second.changed("Keep the sysctl baseline"), second.output
    assert controller_sysctl() == before


def test_a_masked_vendor_file_is_left_as_it_is(debroot) -> None:
    # sysctl.d(5): a link to /dev/null in /etc masks the vendor file of its name, which is then
    # not read at boot, so its value is no shadow to comment out.
    vendor = debroot.path / "usr" / "lib" / "sysctl.d" / "95-vendor.conf"
    vendor.parent.mkdir(parents=True, exist_ok=True)
    vendor.write_text("vm.swappiness = 60\n")
    mask = debroot.path / "etc" / "sysctl.d" / "95-vendor.conf"
    mask.symlink_to("/dev/null")
    deploy = DEPLOY.replace("apply=False", "apply=False, fix_shadows=True")

    first = debroot.pyinfra(deploy)
    assert first.returncode == 0, first.output
    assert "95-vendor.conf" not in first.output
    assert vendor.read_text() == "vm.swappiness = 60\n"
    assert os.readlink(mask) == "/dev/null"
