"""The collector: one POSIX-sh script that gathers every audit section of a host at once."""

from __future__ import annotations

import re
import secrets
from importlib.resources import files

_NONCE_RE = re.compile(r"^[A-Za-z0-9]{4,64}$")


def new_nonce() -> str:
    return secrets.token_hex(8)


def collector_script(nonce: str | None = None) -> str:
    """The collector script text. With no nonce the script makes its own when it runs
    (``gpuaudit collect-script`` for hosts audited offline)."""
    text = files("gpuaudit.collect").joinpath("collector.sh").read_text(encoding="utf-8")
    if nonce is None:
        return text.replace("@NONCE@", "$(date +%s)x$$")
    if not _NONCE_RE.match(nonce):
        raise ValueError(f"collector nonce must be 4-64 letters or digits, got {nonce!r}")
    return text.replace("@NONCE@", nonce)
