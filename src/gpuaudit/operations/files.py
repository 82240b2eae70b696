"""Replacing a configuration file on a host so that no reader ever sees half of it.

pyinfra's upload writes the file in place (over SFTP, or ``cp`` of a temporary copy under
sudo): a dropped connection or a crash leaves it truncated, and ``systemd-sysctl`` (started
by udev for each new network interface) or an apt run at that moment reads a partial file.
The new text goes to a hidden file in the same directory instead, gets its mode there, and is
renamed over the old one, which is atomic on one file system. The hidden name (``.name.
gpuaudit-new``) is one that neither sysctl.d (only ``*.conf``) nor apt (it skips names that
start with a dot) reads, should a run stop before the rename.
"""

from __future__ import annotations

import posixpath
from io import StringIO

from pyinfra.api import FileUploadCommand, QuoteString, StringCommand


def staging_path(path: str) -> str:
    """Where the new text of ``path`` is written before it is renamed over it."""
    folder, name = posixpath.split(path)
    return posixpath.join(folder, f".{name}.gpuaudit-new")


def replace_file(
    content: str, path: str, mode: str
) -> tuple[FileUploadCommand, StringCommand, StringCommand]:
    """The commands that put ``content`` at ``path`` with ``mode``, all at once."""
    staged = staging_path(path)
    return (
        FileUploadCommand(StringIO(content), staged),
        StringCommand("chmod", mode, QuoteString(staged)),
        StringCommand("mv", "-f", QuoteString(staged), QuoteString(path)),
    )
