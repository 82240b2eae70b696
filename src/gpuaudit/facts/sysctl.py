"""The sysctl settings a host's configuration files make, as :mod:`gpuaudit.operations.sysctl`
reads them before writing its drop-in.

The running values come from pyinfra's own ``server.Sysctl`` fact; what is here is what that
fact cannot tell: which files set a key, and so which value wins at the next boot.
"""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand

# The directories `sysctl --system` and systemd-sysctl read *.conf files from, most important
# first: of two files with the same name only the one in the earlier directory is read (see
# sysctl.d(5) and sysctl(8)). /etc/sysctl.conf is read after all of them by `sysctl --system`.
SYSCTL_DIRS = (
    "/etc/sysctl.d",
    "/run/sysctl.d",
    "/usr/local/lib/sysctl.d",
    "/usr/lib/sysctl.d",
    "/lib/sysctl.d",
)
SYSCTL_CONF = "/etc/sysctl.conf"

# One assignment as a configuration file holds it: (file, key as written there, value).
Assignment = tuple[str, str, str]


def proc_path(key: str) -> str:
    """Where a key lives under /proc/sys, the form two spellings of one key share.

    sysctl.d(5): if the first separator is a slash the name is the path as it stands; if it is
    a dot, dots and slashes swap (``net.ipv4.conf.eth0/100.rp_filter`` is
    ``net/ipv4/conf/eth0.100/rp_filter``). A leading ``-`` (ignore errors) is not part of it.
    """
    key = key.strip().removeprefix("-").strip()
    slash, dot = key.find("/"), key.find(".")
    if slash != -1 and (dot == -1 or slash < dot):
        return key
    return key.translate(_SWAP)


def dotted(key: str) -> str:
    """The name as ``sysctl`` prints it (``net.ipv4.conf.eth0/100.rp_filter``)."""
    return proc_path(key).translate(_SWAP)


_SWAP = str.maketrans("./", "/.")


def parse_assignment(line: str) -> tuple[str, str] | None:
    """``key = value`` from one configuration line, or None for a comment, blank line or a
    glob exclusion (``-key`` without ``=``). The ``-`` prefix is dropped from the key."""
    text = line.strip()
    if not text or text[0] in "#;":
        return None
    key, sep, value = text.partition("=")
    key = key.strip().removeprefix("-").strip()
    if not sep or not key or any(c.isspace() for c in key):
        return None
    return key, value.strip()


class SysctlDropins(FactBase[list[Assignment]]):
    """
    Every assignment of the given keys in the host's sysctl configuration files, in file
    order and, within a file, line order.

    .. code:: python

        host.get_fact(SysctlDropins, keys=["net.core.rmem_max"])
        [
            ("/etc/sysctl.d/90-gpuaudit.conf", "net.core.rmem_max", "134217728"),
            ("/etc/sysctl.d/99-override.conf", "net/core/rmem_max", "212992"),
            ("/etc/sysctl.conf", "net.core.rmem_max", "212992"),
        ]

    The files are ``*.conf`` in each of :data:`SYSCTL_DIRS` and ``/etc/sysctl.conf``, whether
    or not they are read at boot (a file hidden by one of the same name elsewhere is listed
    too; :func:`gpuaudit.operations.sysctl.load_order` tells which are read, given every file
    :class:`SysctlConfFiles` lists, since a file that sets none of the keys can hide one that
    does). A key is listed
    as the file spells it (dots or slashes), without the ``-`` prefix; commented lines are
    left out. The lines are picked by the keys as fixed strings, in both spellings, so a glob
    pattern elsewhere that matches a key is not listed.
    """

    @staticmethod
    def default() -> list[Assignment]:
        return []

    def requires_command(self, keys: list[str]) -> str:
        return "grep"

    def command(self, keys: list[str]) -> StringCommand:
        patterns: list[str] = []
        for key in keys:
            for spelling in (dotted(key), proc_path(key)):
                if spelling not in patterns:
                    patterns.append(spelling)
        # Directory globs stay unquoted so the shell expands them; a directory without files
        # leaves the pattern as is and grep, silenced, skips it. No match exits 1: not an error.
        files = [f"{directory}/*.conf" for directory in SYSCTL_DIRS] + [SYSCTL_CONF]
        return StringCommand(
            "LANG=C grep -H -s -F",
            *(StringCommand("-e", QuoteString(p)) for p in patterns),
            "--",
            *files,
            "2>/dev/null || true",
        )

    def process(self, output: list[str]) -> list[Assignment]:
        found: list[Assignment] = []
        for line in output:
            path, sep, content = line.partition(":")
            if not sep or not path.startswith("/"):
                continue
            assignment = parse_assignment(content)
            if assignment is not None:
                found.append((path, *assignment))
        return found


class SysctlConfFiles(FactBase[list[str]]):
    """
    Every configuration file ``sysctl --system`` might read, whatever it holds: ``*.conf`` in
    each of :data:`SYSCTL_DIRS` (links included, a link to /dev/null too) and
    ``/etc/sysctl.conf``.

    .. code:: python

        ["/etc/sysctl.d/50-vendor.conf", "/etc/sysctl.d/90-gpuaudit.conf",
         "/usr/lib/sysctl.d/50-vendor.conf", "/etc/sysctl.conf"]

    :class:`SysctlDropins` lists only the files that set a key. A file of the same name in a
    more important directory hides one that does, even when it sets nothing: an empty file,
    or a link to /dev/null, which is how sysctl.d(5) says a vendor file is masked. Without
    this list such a hidden file would count as read at boot.
    """

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self) -> str:
        # The globs stay unquoted so the shell expands them; a directory without files leaves
        # the pattern itself, which neither test finds.
        files = " ".join([f"{directory}/*.conf" for directory in SYSCTL_DIRS] + [SYSCTL_CONF])
        return (
            f"for ga_f in {files}; do "
            'if [ -e "$ga_f" ] || [ -L "$ga_f" ]; then printf \'%s\\n\' "$ga_f"; fi; done'
        )

    def process(self, output: list[str]) -> list[str]:
        return [line for line in (raw.rstrip("\r\n") for raw in output) if line.startswith("/")]
