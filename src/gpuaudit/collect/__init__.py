"""The collector: one POSIX-sh script that gathers every audit section of a host at once."""

from __future__ import annotations

import base64
import functools
import gzip
import re
import secrets
from importlib.resources import files

from gpuaudit.parsers.limits import DEFAULT_LIMITS, OutputLimits

_NONCE_RE = re.compile(r"^[A-Za-z0-9]{4,64}$")
_PROBE_PLACEHOLDER = "@NVML_PROBE@"
# The probe travels as a quoted here-document: the shell expands nothing inside it, so the only
# text it must not hold is a line equal to the terminator.
_PROBE_TERMINATOR = "GA_NVML_PROBE_END"
# What a packed command prints when the host cannot unpack it (no base64 or no gzip). It is
# no collector framing: the bundle reader finds no header in it.
UNPACK_UNAVAILABLE = "@@gpuaudit-collector-unpack unavailable: the host has no base64 or gzip@@"
# A packed collector reads its nonce from this shell variable, set in front of the packed text:
# that text is then the same for every host of a run, and compressed once.
_NONCE_VARIABLE = "ga_nonce"
# What may stand in front of a packed script: assignments of letters and digits only.
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9]*")


# The collector's settings that are plain numbers (collector.sh's ga_bytes: at most 12 digits),
# with the least each may be. On the host a value that is no such number is replaced by the
# default; where the controller is given one, it is refused (check_collector_setting).
_NUMBER_SETTINGS = {
    "GPUAUDIT_SECTION_BYTES": 0,
    "GPUAUDIT_OUTPUT_BYTES": 0,
    "GPUAUDIT_KERNEL_LOG_LINES": 1,
    "GPUAUDIT_EARLIER_BOOTS": 1,
}
_PLAIN_NUMBER = re.compile(r"[0-9]{1,12}")


def check_collector_setting(name: str, value: str) -> None:
    """Raise ValueError, naming the setting, where ``value`` is not one the collector takes for
    ``name`` (a byte count or the kernel log's line bound that is no plain number). Settings
    the collector reads otherwise are not judged here."""
    least = _NUMBER_SETTINGS.get(name)
    if least is None:
        return
    if not _PLAIN_NUMBER.fullmatch(value) or int(value) < least:
        raise ValueError(
            f"collector setting {name}={value!r}: a plain number of at least {least} is needed"
        )


def new_nonce() -> str:
    return secrets.token_hex(8)


def nvml_probe_source() -> str:
    """The device probe the ``nvml`` section runs with the host's python3 (nvml_probe.py)."""
    return files("gpuaudit.collect").joinpath("nvml_probe.py").read_text(encoding="utf-8")


def collector_script(
    nonce: str | None = None, limits: OutputLimits = DEFAULT_LIMITS, *, comments: bool = True
) -> str:
    """The collector script text. With no nonce the script makes its own when it runs
    (``gpuaudit collect-script`` for hosts audited offline). ``limits`` are the bounds on what
    the host sends (the environment of the host's shell can lower or raise them). Without
    ``comments`` its comment lines are left out (:func:`without_comment_lines`): the text the
    audit sends to every host, where nobody reads them."""
    text = _collector_text(limits, comments)
    if nonce is None:
        return text.replace("@NONCE@", "$(date +%s)x$$")
    return text.replace("@NONCE@", _checked_nonce(nonce))


def _checked_nonce(nonce: str) -> str:
    if not _NONCE_RE.match(nonce):
        raise ValueError(f"collector nonce must be 4-64 letters or digits, got {nonce!r}")
    return nonce


@functools.cache
def _collector_text(limits: OutputLimits, comments: bool = True) -> str:
    text = files("gpuaudit.collect").joinpath("collector.sh").read_text(encoding="utf-8")
    text = text.replace("@SECTION_BYTES@", str(int(limits.section_bytes)), 1)
    text = text.replace("@OUTPUT_BYTES@", str(int(limits.output_bytes)), 1)
    text = text.replace("@FLOOR_BYTES@", str(int(limits.floor_bytes)), 1)
    text = text.replace(_PROBE_PLACEHOLDER, _probe_for_heredoc(), 1)
    return text if comments else without_comment_lines(text)


# A here-document's start: `<<WORD`, `<<'WORD'`, `<<"WORD"` or `<<-WORD`; its body ends at a
# line that is WORD alone (after tabs, for `<<-`).
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def without_comment_lines(script: str) -> str:
    """``script`` (POSIX sh) without the lines that are only a comment: a fifth of the
    collector's text, which every host is sent. A here-document's lines are kept whatever they
    hold (the NVML probe is Python, and a here-document is data); so is every other line,
    a comment after a command included. The collector holds no quoted text that spans lines
    with a line starting ``#`` in it (tests/facts/test_facts.py runs both texts)."""
    kept: list[str] = []
    ending: tuple[str, bool] | None = None
    for line in script.splitlines(keepends=True):
        if ending is not None:
            kept.append(line)
            word, tabs = ending
            if (line.rstrip("\n").lstrip("\t") if tabs else line.rstrip("\n")) == word:
                ending = None
            continue
        if line.lstrip().startswith("#"):
            continue
        heredoc = _HEREDOC.search(line)
        if heredoc:
            ending = (heredoc.group(3), heredoc.group(1) == "-")
        kept.append(line)
    return "".join(kept)


def _probe_for_heredoc() -> str:
    probe = nvml_probe_source().rstrip("\n")
    if _PROBE_TERMINATOR in probe.splitlines() or "@NONCE@" in probe:
        raise ValueError("nvml_probe.py holds text that would break the collector script")
    return probe


def packed_command(script: str, settings: str = "") -> str:
    """``script`` as one shell command for a host across a network: the script travels
    gzipped, in base64 (the collector is some 31 KiB of text without its comment lines, sent to
    every host: packed, under half of that), and what it prints comes back in one piece.

    ``settings``: shell assignments (``NAME=value`` lines, letters and digits only) run in front
    of the script, outside the packed text, so that one packed text serves every host whatever
    their settings (:func:`packed_collector`). The host unpacks the script in memory and runs
    it in the same shell (``eval``), so it is still one remote command; a host without base64
    or gzip prints :data:`UNPACK_UNAVAILABLE` instead, and the caller sends the plain script.
    The output is held until the script ends and then written at once: the SSH server sends it
    in a few full packets rather than one per line, which is most of what reading it costs the
    controller. Nothing is lost by the wait: a command stopped before its end gives pyinfra no
    output either way."""
    if any(not _ASSIGNMENT.fullmatch(line) for line in settings.splitlines()):
        raise ValueError(
            f"settings in front of a packed script must be plain assignments: {settings!r}"
        )
    return (
        "{ "
        + "".join(f"{line}\n" for line in settings.splitlines())
        + "if command -v base64 >/dev/null 2>&1 && command -v gzip >/dev/null 2>&1; then\n"
        f'eval "$(printf %s {_packed_text(script)} | base64 -d | gzip -dc)"\n'
        "fi\n"
        f"echo '{UNPACK_UNAVAILABLE}'\n"
        "} | { ga_out=$(cat); printf '%s\\n' \"$ga_out\"; }\n"
    )


@functools.lru_cache(maxsize=4)
def _packed_text(script: str) -> str:
    """gzip then base64, made once per text: compressing the collector at level 9 costs the
    controller about 2 ms, and every host of a run is sent the same text."""
    return base64.b64encode(gzip.compress(script.encode("utf-8"), 9, mtime=0)).decode()


def packed_collector(nonce: str, settings: str = "", limits: OutputLimits = DEFAULT_LIMITS) -> str:
    """:func:`collector_script` for ``nonce`` as a :func:`packed_command` (``settings``: its
    ``NAME=value`` lines). The nonce is an assignment in front of the packed text, which names
    it by a variable: that text is the same for every host of a run."""
    text = _collector_text(limits, comments=False).replace("@NONCE@", f"${{{_NONCE_VARIABLE}}}")
    return packed_command(text, f"{settings}{_NONCE_VARIABLE}={_checked_nonce(nonce)}\n")


def unpacked_command(command: str) -> str | None:
    """The script a :func:`packed_command` carries, with its settings in front (a packed
    collector's as :func:`collector_script` gives it, the nonce in place); None for any other
    command."""
    match = _PACKED.fullmatch(command)
    if match is None:
        return None
    try:
        script = gzip.decompress(base64.b64decode(match.group(2), validate=True)).decode("utf-8")
    except (ValueError, OSError, EOFError):
        return None
    settings = match.group(1).splitlines()
    nonce = f"{_NONCE_VARIABLE}="
    for line in [line for line in settings if line.startswith(nonce)]:
        settings.remove(line)
        script = script.replace(f"${{{_NONCE_VARIABLE}}}", line[len(nonce) :])
    return "".join(f"{line}\n" for line in settings) + script


_PACKED = re.compile(
    r"\{ ((?:[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9]*\n)*)"
    r"if command -v base64 >/dev/null 2>&1 && command -v gzip >/dev/null 2>&1; then\n"
    r'eval "\$\(printf %s ([A-Za-z0-9+/=]+) \| base64 -d \| gzip -dc\)"\n'
    r"fi\n"
    rf"echo '{re.escape(UNPACK_UNAVAILABLE)}'\n"
    r"\} \| \{ ga_out=\$\(cat\); printf '%s\\n' \"\$ga_out\"; \}\n"
)
