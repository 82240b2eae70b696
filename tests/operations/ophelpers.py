"""What the operation tests share."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

from pyinfra.api import StringCommand


def refused(commands: Sequence[Any]) -> str:
    """The reason an operation gave for refusing the host. A refusal is one command that, run
    by a real shell, prints the reason on stderr, nothing on stdout, and exits 1 (so pyinfra
    fails this host and goes on with the others)."""
    assert len(commands) == 1, commands
    (command,) = commands
    text = command.get_raw_value() if isinstance(command, StringCommand) else command
    done = subprocess.run(["sh", "-c", text], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (1, ""), done
    assert done.stderr.startswith("refused: ") and done.stderr.endswith("\n"), done.stderr
    return done.stderr.removeprefix("refused: ").removesuffix("\n")
