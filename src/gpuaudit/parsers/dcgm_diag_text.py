"""``dcgmi diag -r LEVEL`` without ``-j``: the text table.

    Successfully ran diagnostic for group.
    +---------------------------+------------------------------------------------+
    | Diagnostic                | Result                                         |
    +===========================+================================================+
    |-----  Metadata  ----------+------------------------------------------------|
    | DCGM Version              | 3.3.8                                          |
    |-----  Deployment  --------+------------------------------------------------|
    | Persistence Mode          | Pass                                           |
    | Info                      | Persistence mode for GPU 0 is disabled. Enabl  |
    |                           | e persistence mode by running "nvidia-smi -i   |
    +-----  Hardware  ----------+------------------------------------------------+
    | GPU Memory                | Pass - GPU: 1                                  |
    |                           | Fail - GPU: 0                                  |
    | Warning                   | GPU 0 Error using CUDA API cuInit Check DCGM   |

A category row (``-----  Name  ---``) opens a category; a test row names the test and its
status ("Pass", "Pass - All", "Fail - GPU: 0"; DCGM 4 lists "GPU0: Pass" lines under the
test); ``Warning`` and ``Info`` rows belong to the test above them. dcgmi wraps long values at
a fixed width, splitting words: a continuation row's cell is joined to the one before without
adding spaces. Metadata rows (DCGM version, driver, device ids) describe the run.
"""

from __future__ import annotations

import re

from gpuaudit.model.snapshot import DcgmDiagMessage, DcgmDiagResult, DcgmDiagTest
from gpuaudit.parsers.dcgm_diag import DiagOutput, diag_status, message
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.warnings import warn

SOURCE_TEXT = "dcgmi diag"

_CATEGORY = re.compile(r"^[|+]-+\s+(\S.*?)\s+-+\+")
_BORDER = re.compile(r"^\+[-=+]+\+?\s*$")
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>.*)\|\s*$")
_STATUS = re.compile(
    r"^(?P<word>Pass|Fail|Warn(?:ing)?|Skip(?:ped)?|Not Run)"
    r"(?:\s*-\s*(?:(?P<all>All)|GPUs?:?\s*(?P<gpus>[\d,\s]+)))?$",
    re.I,
)
_PER_GPU = re.compile(r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<word>[A-Za-z ]+)$")
_METADATA = {
    "DCGM Version": "version",
    "Driver Version Detected": "driver",
    "GPU Device IDs Detected": "ids",
    "GPU Device Serials Detected": "serials",
}
_BANNER = ("Successfully ran diagnostic for group.",)


class _Test:
    """A test being read: its results and the messages of the result last seen."""

    def __init__(self, category: str, name: str) -> None:
        self.category = category
        self.name = name
        self.results: list[tuple[str, tuple[int, ...]]] = []
        self.messages: list[tuple[str, list[str]]] = []  # ("warning" | "info", chunks)

    def build(self) -> DcgmDiagTest:
        warnings = tuple(message(_joined(c)) for k, c in self.messages if k == "warning")
        info = tuple(message(_joined(c)) for k, c in self.messages if k == "info")
        named = {gpu for _, gpus in self.results for gpu in gpus}
        results = tuple(
            DcgmDiagResult(
                status=diag_status(word, SOURCE_TEXT),
                raw_status=word,
                gpus=gpus,
                warnings=_messages_for(gpus, warnings, named),
                info=_messages_for(gpus, info, named),
            )
            for word, gpus in self.results
        )
        return DcgmDiagTest(category=self.category, name=self.name, results=results)


def _joined(chunks: list[str]) -> str:
    return "".join(chunks).strip()


def _messages_for(
    gpus: tuple[int, ...], messages: tuple[DcgmDiagMessage, ...], named: set[int]
) -> tuple[DcgmDiagMessage, ...]:
    """A result's messages: those naming one of its GPUs; for a result of every GPU ("Pass -
    All", a deployment check), those naming no GPU that has a result of its own."""
    if gpus:
        return tuple(m for m in messages if m.gpu in gpus)
    return tuple(m for m in messages if m.gpu is None or m.gpu not in named)


def parse_dcgm_diag_text(text: str) -> DiagOutput:
    """The table dcgmi diag prints; ParseError when the text holds no table."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if _is_header(line)), None)
    if header is None:
        raise ParseError(SOURCE_TEXT, "no '| Diagnostic | Result |' table", text)
    for line in lines[:header]:
        if line.strip() and line.strip() not in _BANNER and not _BORDER.match(line):
            warn(SOURCE_TEXT, "a line before the table", line)
    width = _value_width(lines[header])
    category = ""
    tests: list[_Test] = []
    current: _Test | None = None
    last = ""  # "test" | "warning" | "info" | "meta" | ""
    meta: dict[str, list[str]] = {}
    meta_key = ""
    for line in lines[header + 1 :]:
        heading = _CATEGORY.match(line)
        if heading:
            category, current, last = heading.group(1).strip(), None, ""
            continue
        if _BORDER.match(line) or not line.strip():
            continue
        row = _ROW.match(line)
        if row is None:
            warn(SOURCE_TEXT, "a line that is not a table row", line)
            continue
        name, chunk = row.group("name").strip(), _chunk(row.group("value"), width)
        value = chunk.strip()
        if category.lower() == "metadata" and name:
            meta_key = _METADATA.get(name, "")
            if not meta_key:
                warn(SOURCE_TEXT, "an unknown metadata row", line)
            meta.setdefault(meta_key, []).append(chunk)
            last = "meta"
        elif name in ("Warning", "Info"):
            if current is None:
                warn(SOURCE_TEXT, f"a {name} row before any test", line)
                continue
            current.messages.append((name.lower(), [chunk]))
            last = name.lower()
        elif name:
            current = _Test(category, name)
            tests.append(current)
            _add_status(current, value, line)
            last = "test"
        elif last == "meta":
            meta[meta_key].append(chunk)
        elif last in ("warning", "info") and current is not None:
            current.messages[-1][1].append(chunk)
        elif last == "test" and current is not None:
            _add_status(current, value, line)
        else:
            warn(SOURCE_TEXT, "a continuation row that follows nothing", line)
    return DiagOutput(
        output_format="text",
        tests=tuple(t.build() for t in tests),
        dcgm_version=_meta(meta, "version"),
        driver_version=_meta(meta, "driver"),
        gpu_device_ids=tuple(p.strip() for p in (_meta(meta, "ids") or "").split(",") if p.strip()),
    )


def _is_header(line: str) -> bool:
    row = _ROW.match(line)
    return row is not None and row.group("name").strip() == "Diagnostic" and "Result" in line


def _value_width(header: str) -> int:
    row = _ROW.match(header)
    return len(row.group("value")) if row else 0


def _chunk(cell: str, width: int) -> str:
    """A wrapped cell's text: dcgmi pads it with one space before and two after."""
    if width and len(cell) == width:
        return cell[1 : width - 2]
    return " " + cell.strip()


def _add_status(test: _Test, value: str, line: str) -> None:
    status = _STATUS.match(value)
    if status:
        gpus = tuple(int(g) for g in re.findall(r"\d+", status.group("gpus") or ""))
        test.results.append((status.group("word"), gpus))
        return
    per_gpu = _PER_GPU.match(value)
    if per_gpu:
        test.results.append((per_gpu.group("word").strip(), (int(per_gpu.group("gpu")),)))
        return
    warn(SOURCE_TEXT, f"a result of {test.name!r} that is no status", line)


def _meta(meta: dict[str, list[str]], key: str) -> str | None:
    chunks = meta.get(key)
    return "".join(chunks).strip() or None if chunks else None
