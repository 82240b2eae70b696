"""``dcgmi diag -r LEVEL [-j]``: DCGM's active diagnostic, as the collector's ``dcgm_diag``
section carries it.

The section (collect/collector.sh, ``s_dcgm_diag``) starts with the collector's own
``key=value`` lines, then a line ``output:``, then what dcgmi printed on stdout::

    level=1                 # the -r level asked for
    state=ran               # ran | busy | not_checked (the diag never runs on a busy GPU)
    busy_pids=4242 4243     # with state=busy: the compute processes that held the GPUs
    reason=...              # with busy / not_checked: why it did not run, one line
    format=json             # json | text: how dcgmi was asked to answer
    json_rc=2               # with format=text: dcgmi's exit status when -j was refused
    output:
    { "DCGM GPU Diagnostic" : ... }

The section's exit status is dcgmi's (127: dcgmi is not installed). dcgmi's stdout comes in
two forms, both read here:

- JSON (``-j``). DCGM 2.x and 3.x put everything under ``"DCGM GPU Diagnostic"`` →
  ``test_categories`` → ``tests`` → ``results`` (one per GPU, ``gpu_ids`` a string or a
  number; deployment checks give one result for all GPUs, with a CSV of ids or none), with
  ``status`` (Pass / Fail / Warn / Skip, upper case from nvvs itself), ``info`` (a string or a
  list) and ``warnings`` (strings in 2.x, objects with ``warning`` / ``error_id`` /
  ``error_category`` / ``error_severity`` in 3.x). DCGM 4 names the object ``"DCGM
  Diagnostic"``, keeps ``metadata`` (version, driver) and ``entity_groups`` beside it and
  describes a result by ``entity_group`` / ``entity_id``. A banner before the document
  ("Successfully ran diagnostic for group.", a warning line) is skipped.
- The text table (:mod:`gpuaudit.parsers.dcgm_diag_text`).

What the parser meets and cannot place is recorded with :func:`warn`; text that is neither
form raises :class:`ParseError`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpuaudit.model.snapshot import (
    DcgmDiag,
    DcgmDiagMessage,
    DcgmDiagResult,
    DcgmDiagTest,
    DiagRun,
    DiagStatus,
)
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.warnings import warn

SOURCE_JSON = "dcgmi diag -j"
SOURCE_SECTION = "dcgm_diag section"
OUTPUT_MARK = "output:"

_STATUS_WORDS = {
    "pass": DiagStatus.PASS,
    "passed": DiagStatus.PASS,
    "fail": DiagStatus.FAIL,
    "failed": DiagStatus.FAIL,
    "warn": DiagStatus.WARN,
    "warning": DiagStatus.WARN,
    "skip": DiagStatus.SKIP,
    "skipped": DiagStatus.SKIP,
    "not run": DiagStatus.NOT_RUN,
    "notrun": DiagStatus.NOT_RUN,
}
_MESSAGE_GPU = re.compile(r"^\s*GPU\s*(\d+)\b")
_ROOT_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
_RESULT_KEYS = {
    "gpu_ids", "gpu_id", "status", "warnings", "info", "entity_group", "entity_group_id",
    "entity_id", "aux_data",
}  # fmt: skip
_ROOT_INNER_KEYS = {
    "test_categories", "version", "runtime_error", "Driver Version Detected", "GPU Device IDs",
    "GPU Device Serials", "driver_version", "warning", "errorCode", "error_code",
}  # fmt: skip


@dataclass(frozen=True)
class DiagOutput:
    """What dcgmi printed, read: the tests and the run's metadata."""

    output_format: str  # "json" | "text"
    tests: tuple[DcgmDiagTest, ...] = ()
    dcgm_version: str | None = None
    driver_version: str | None = None
    gpu_device_ids: tuple[str, ...] = ()
    runtime_error: str | None = None


def diag_status(word: str, source: str) -> DiagStatus:
    """DCGM's status word; an unknown one is UNKNOWN (and a parse warning), never a pass."""
    status = _STATUS_WORDS.get(" ".join(word.strip().lower().split()))
    if status is None:
        warn(source, "unknown diagnostic status", word)
        return DiagStatus.UNKNOWN
    return status


def message(text: str, **codes: int | None) -> DcgmDiagMessage:
    """A warning or info text, with the GPU it starts by naming ("GPU 0 Error using ...")."""
    text = " ".join(text.split())
    match = _MESSAGE_GPU.match(text)
    return DcgmDiagMessage(text=text, gpu=int(match.group(1)) if match else None, **codes)


# --- the section --------------------------------------------------------------------------


def parse_dcgm_diag_section(stdout: str, stderr: str = "", rc: int | None = 0) -> DcgmDiag:
    """The whole ``dcgm_diag`` section: the collector's header, then dcgmi's output."""
    if rc == 127:
        return DcgmDiag(run=DiagRun.MISSING, level=0, reason=_first_line(stderr), rc=rc)
    header, output = _split_header(stdout)
    level = _int(header.get("level")) or 0
    state = header.get("state", "")
    if state == "busy":
        pids = tuple(int(p) for p in header.get("busy_pids", "").split() if p.isdigit())
        return DcgmDiag(
            run=DiagRun.BUSY, level=level, reason=header.get("reason", ""), busy_pids=pids, rc=rc
        )
    if state == "not_checked":
        return DcgmDiag(run=DiagRun.NOT_CHECKED, level=level, reason=header.get("reason", ""))
    if state != "ran":
        raise ParseError(SOURCE_SECTION, f"no state= line the collector writes ({state!r})", stdout)
    if not output.strip():
        return DcgmDiag(
            run=DiagRun.FAILED,
            level=level,
            rc=rc,
            reason=_failure(rc, stderr, "dcgmi printed nothing"),
        )
    try:
        read = parse_dcgm_diag_output(output)
    except ParseError as error:
        return DcgmDiag(
            run=DiagRun.FAILED,
            level=level,
            rc=rc,
            output_format=header.get("format"),
            reason=_failure(rc, output + "\n" + stderr, error.reason),
        )
    if not read.tests:
        why = read.runtime_error or "dcgmi reported no test results"
        return DcgmDiag(
            run=DiagRun.FAILED,
            level=level,
            rc=rc,
            output_format=read.output_format,
            reason=_failure(rc, why, why),
            dcgm_version=read.dcgm_version,
            driver_version=read.driver_version,
            runtime_error=read.runtime_error,
        )
    return DcgmDiag(
        run=DiagRun.RAN,
        level=level,
        rc=rc,
        output_format=read.output_format,
        dcgm_version=read.dcgm_version,
        driver_version=read.driver_version,
        gpu_device_ids=read.gpu_device_ids,
        runtime_error=read.runtime_error,
        tests=read.tests,
    )


def _split_header(stdout: str) -> tuple[dict[str, str], str]:
    header: dict[str, str] = {}
    lines = stdout.splitlines(keepends=True)
    for index, line in enumerate(lines):
        text = line.rstrip("\r\n")
        if text == OUTPUT_MARK:
            return header, "".join(lines[index + 1 :])
        key, eq, value = text.partition("=")
        if eq and key.isidentifier():
            header[key] = value
        elif text.strip():
            warn(SOURCE_SECTION, "a line the collector does not write", text)
    return header, ""


def _failure(rc: int | None, text: str, fallback: str) -> str:
    said = _first_line(text) or fallback
    if rc == 124:
        return f"dcgmi diag ran past its time limit and was stopped (exit 124): {said}"
    return f"exit status {rc}: {said}" if rc not in (0, None) else said


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[0].split())[:300] if lines else ""


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


# --- dcgmi's output -----------------------------------------------------------------------


def parse_dcgm_diag_output(text: str) -> DiagOutput:
    """JSON where the output holds a JSON document, the text table otherwise."""
    start = _json_start(text)
    if start is not None:
        return parse_dcgm_diag_json(text[start:])
    from gpuaudit.parsers.dcgm_diag_text import parse_dcgm_diag_text

    return parse_dcgm_diag_text(text)


def _json_start(text: str) -> int | None:
    match = re.search(r"^\s*\{", text, re.M)
    return match.start() if match else None


def parse_dcgm_diag_json(text: str) -> DiagOutput:
    """``dcgmi diag -j``'s document (a banner before its first ``{`` is skipped)."""
    start = _json_start(text)
    if start is None:
        raise ParseError(SOURCE_JSON, "no JSON document", text)
    try:
        document, end = json.JSONDecoder().raw_decode(text, start + text[start:].index("{"))
    except ValueError as error:
        raise ParseError(SOURCE_JSON, f"not JSON ({error})", text[start:]) from None
    if text[end:].strip():
        warn(SOURCE_JSON, "text after the JSON document", text[end:].strip())
    if not isinstance(document, dict):
        raise ParseError(SOURCE_JSON, "the document is not a JSON object", text[start:])
    key = next((k for k in _ROOT_KEYS if k in document), None)
    root: Any = document.get(key) if key else None
    if not isinstance(root, dict):
        raise ParseError(SOURCE_JSON, f"no {' or '.join(map(repr, _ROOT_KEYS))} object", text)
    for other in document:
        if other not in (key, "metadata", "entity_groups"):
            warn(SOURCE_JSON, "unknown top-level key", other)
    for inner in root:
        if inner not in _ROOT_INNER_KEYS:
            warn(SOURCE_JSON, f"unknown key in {key!r}", inner)
    found = document.get("metadata")
    metadata: dict[str, Any] = found if isinstance(found, dict) else {}
    tests = tuple(_json_tests(root.get("test_categories")))
    runtime = root.get("runtime_error") or document.get("runtime_error")
    return DiagOutput(
        output_format="json",
        tests=tests,
        dcgm_version=_text(root.get("version") or metadata.get("version")),
        driver_version=_text(
            root.get("Driver Version Detected")
            or root.get("driver_version")
            or metadata.get("Driver Version Detected")
            or metadata.get("driver_version")
        ),
        gpu_device_ids=_device_ids(root.get("GPU Device IDs"), document.get("entity_groups")),
        runtime_error=_text(runtime),
    )


def _json_tests(categories: Any) -> list[DcgmDiagTest]:
    if categories is None:
        return []
    if not isinstance(categories, list):
        warn(SOURCE_JSON, "test_categories is not a list", repr(categories))
        return []
    tests: list[DcgmDiagTest] = []
    for category in categories:
        if category is None:
            continue  # nvvs leaves nulls between entries; they hold nothing
        if not isinstance(category, dict):
            warn(SOURCE_JSON, "a test category that is not an object", repr(category))
            continue
        name = _text(category.get("category")) or ""
        for test in category.get("tests") or []:
            if test is None:
                continue
            if not isinstance(test, dict) or not isinstance(test.get("name"), str):
                warn(SOURCE_JSON, "a test without a name", repr(test))
                continue
            tests.append(_json_test(name, test))
    return tests


def _json_test(category: str, test: dict[str, Any]) -> DcgmDiagTest:
    results = []
    for item in test.get("results") or []:
        if item is None:
            continue
        if not isinstance(item, dict):
            warn(SOURCE_JSON, f"a result of {test['name']!r} that is not an object", repr(item))
            continue
        results.append(_json_result(test["name"], item))
    summary = test.get("test_summary")
    summary_status = None
    if isinstance(summary, dict) and isinstance(summary.get("status"), str):
        summary_status = diag_status(summary["status"], SOURCE_JSON)
    return DcgmDiagTest(
        category=category, name=test["name"], results=tuple(results), summary=summary_status
    )


def _json_result(test: str, item: dict[str, Any]) -> DcgmDiagResult:
    for key in item:
        if key not in _RESULT_KEYS:
            warn(SOURCE_JSON, f"unknown key in a result of {test!r}", key)
    raw = item.get("status")
    status = diag_status(raw, SOURCE_JSON) if isinstance(raw, str) else DiagStatus.UNKNOWN
    if not isinstance(raw, str):
        warn(SOURCE_JSON, f"a result of {test!r} without a status", repr(item)[:200])
    warnings = []
    for entry in _as_list(item.get("warnings")):
        if isinstance(entry, str):
            warnings.append(message(entry))
        elif isinstance(entry, dict) and isinstance(entry.get("warning"), str):
            warnings.append(
                message(
                    entry["warning"],
                    error_id=_int(entry.get("error_id")),
                    error_category=_int(entry.get("error_category")),
                    error_severity=_int(entry.get("error_severity")),
                )
            )
        else:
            warn(SOURCE_JSON, f"a warning of {test!r} without text", repr(entry)[:200])
    info = [message(entry) for entry in _as_list(item.get("info")) if isinstance(entry, str)]
    return DcgmDiagResult(
        status=status,
        raw_status=raw if isinstance(raw, str) else "",
        gpus=_gpu_ids(item, test),
        warnings=tuple(warnings),
        info=tuple(info),
    )


def _gpu_ids(item: dict[str, Any], test: str) -> tuple[int, ...]:
    if "entity_id" in item:
        group = item.get("entity_group", "GPU")
        if group != "GPU":
            warn(SOURCE_JSON, f"a result of {test!r} for a {group} entity", repr(item)[:200])
            return ()
        value = item["entity_id"]
    else:
        value = item.get("gpu_ids", item.get("gpu_id"))
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if all(p.isdigit() for p in parts):
            return tuple(int(p) for p in parts)
    warn(SOURCE_JSON, f"GPU ids of {test!r} that are not numbers", repr(value))
    return ()


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _device_ids(ids: Any, entity_groups: Any) -> tuple[str, ...]:
    if isinstance(ids, list):
        return tuple(str(i) for i in ids)
    found: list[str] = []
    for group in entity_groups if isinstance(entity_groups, list) else []:
        if isinstance(group, dict) and group.get("entity_group") == "GPU":
            for entity in group.get("entities") or []:
                if isinstance(entity, dict) and isinstance(entity.get("device_id"), str):
                    found.append(entity["device_id"])
    return tuple(found)
