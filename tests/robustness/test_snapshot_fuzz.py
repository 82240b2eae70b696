"""Snapshot fuzz: every field of a real run's snapshots, changed to a value of another type.

The snapshots are the committed example run's (reports/example/hosts/, the demo fleet audited by
``make demo``). Each mutation changes one value of one host's file, as a hand edit or another
tool might: a string where a number was and back, ``null``, a list where an object was and back,
a Unix time where text was, numbers too large for any counter, ``NaN``. For each the file is
loaded as ``gpuaudit report`` loads it and the register is built over the whole fleet, and:

- nothing raises, and no rule fails (GA000) on any host — except a rule refusing, with a
  ValueError that says why, an inventory setting (``host_data``) it cannot use;
- the mutated host is still in the register, and every other host is reported as before;
- where the loader did not keep the new value, or the value's JSON type is not the one
  gpuaudit wrote there (``host_data`` aside: the inventory's own values may be of any type),
  the host is no longer OK, and the changed field is named in its ``parse_errors["snapshot"]``,
  in a finding on the host and, where that made the host degraded, in its status detail; or
  the file as a whole is no snapshot any more, and the host says that.

The quick run changes every field of the fleet once (each distinct field path, list indexes
aside, on one host), with the kind of change rotated by field; a sample of those runs the whole
``gpuaudit report`` (files written, HTML and all views rendered). The slow run tries every kind
on every field, and every field of every host.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.model.decode import join_path
from gpuaudit.model.snapshot import HostSnapshot, HostStatus
from gpuaudit.pipeline import ReportRequest, assemble_register, rebuild, render_report
from gpuaudit.policy import Policy, load_policy
from gpuaudit.report.run import HOSTS_DIR, RunDir, load_snapshot_file

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "reports" / "example"
GENERATED_AT = "2026-12-01T12:00:00Z"
# Every how many quick mutations a full `gpuaudit report` runs.
REBUILD_EVERY = 25

JsonPath = tuple[str | int, ...]


def _retype(value: Any) -> Any:
    """A string where there was a number and a number where there was a string (and so on)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return 7
    if isinstance(value, list):
        return "[]"
    if isinstance(value, dict):
        return 0
    return "null"


def _swap_container(value: Any) -> Any:
    """An object where there was a list, a list where there was an object or a scalar."""
    if isinstance(value, list):
        return {"0": value[0]} if value else {}
    if isinstance(value, dict):
        return list(value.values())[:1]
    return [value]


KINDS: dict[str, Callable[[Any], Any]] = {
    "retype": _retype,
    "null": lambda _value: None,
    "container": _swap_container,
    "unix_time": lambda _value: 1764590400,
    "huge": lambda _value: 10**400,
    "huge_in_range": lambda _value: 2**63 - 1,
    "nan_string": lambda _value: "NaN",
    "nan": lambda _value: math.nan,
    "infinity": lambda _value: -math.inf,
}


@dataclass(frozen=True)
class Mutation:
    file: str  # the snapshot's file name in hosts/
    path: JsonPath  # where in its JSON
    kind: str  # a key of KINDS

    @property
    def where(self) -> str:
        text = ""
        for key in self.path:
            text = join_path(text, key)
        return text

    def __str__(self) -> str:
        return f"{self.file}:{self.where or '(whole file)'}:{self.kind}"


@functools.cache
def documents() -> dict[str, Any]:
    files = sorted((EXAMPLE / HOSTS_DIR).glob("*.json"))
    assert len(files) >= 10, "the example run's snapshots are missing"
    return {f.name: json.loads(f.read_text(encoding="utf-8")) for f in files}


@functools.cache
def policy() -> Policy:
    return load_policy(EXAMPLE / "policy.yaml")


@functools.cache
def baseline(run_dir: Path) -> tuple[dict[str, HostSnapshot], dict[str, dict[str, Any]]]:
    """The example fleet as loaded (by file name) and its register's host entries (by host)."""
    snapshots = {name: load_snapshot_file(EXAMPLE / HOSTS_DIR / name) for name in documents()}
    return snapshots, {h["name"]: h for h in _register(list(snapshots.values()), run_dir)["hosts"]}


def _register(snapshots: list[HostSnapshot], run_dir: Path, render: bool = True) -> dict[str, Any]:
    """The register ``gpuaudit report`` writes, in memory; with ``render``, every other file
    of the report rendered too (HTML page, views, docs)."""
    run = RunDir(run_dir)
    if not render:
        request = ReportRequest(snapshots, policy=policy(), generated_at=GENERATED_AT)
        register = assemble_register(run, request)
        return json.loads(json.dumps(register.to_dict(), allow_nan=False))
    files = render_report(run, ReportRequest(snapshots, policy=policy(), generated_at=GENERATED_AT))
    assert {"index.html", "register.json", "summary.md", "junit.xml"} <= set(files)
    rendered: dict[str, Any] = json.loads(files["register.json"])
    return rendered


def _nodes(value: Any, path: JsonPath = ()) -> Iterator[JsonPath]:
    """Every node of a JSON tree, the tree itself first."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nodes(item, (*path, index))


def _field(path: JsonPath) -> str:
    """The path with its list indexes taken out: the field a path is an instance of."""
    return ".".join("*" if isinstance(key, int) else key for key in path)


def _occurrences() -> dict[str, list[tuple[str, JsonPath]]]:
    """Each field of the fleet, with every (file, path) holding it."""
    fields: dict[str, list[tuple[str, JsonPath]]] = {}
    for name, document in documents().items():
        for path in _nodes(document):
            fields.setdefault(_field(path), []).append((name, path))
    return dict(sorted(fields.items()))


def quick_mutations() -> list[Mutation]:
    """Every field once, on one of its occurrences, with the kind of change rotated."""
    kinds = list(KINDS)
    mutations = []
    for number, places in enumerate(_occurrences().values()):
        name, path = places[(number * 7) % len(places)]
        mutations.append(Mutation(name, path, kinds[number % len(kinds)]))
    return mutations


def exhaustive_mutations() -> list[Mutation]:
    """Every kind on every field; and every field of every host, with the kind rotated."""
    kinds = list(KINDS)
    mutations = []
    for places in _occurrences().values():
        name, path = places[0]
        mutations += [Mutation(name, path, kind) for kind in kinds]
    for name, document in documents().items():
        seen: set[str] = set()
        for path in _nodes(document):
            if _field(path) not in seen:
                seen.add(_field(path))
                mutations.append(Mutation(name, path, kinds[len(mutations) % len(kinds)]))
    return mutations


def _get(value: Any, path: JsonPath) -> Any:
    for key in path:
        value = value[key]
    return value


def mutated_text(mutation: Mutation) -> tuple[str, Any, Any]:
    """(the mutated file's text, the value that was there, the value put in its place)."""
    document = documents()[mutation.file]
    original = _get(document, mutation.path)
    new = KINDS[mutation.kind](original)
    if not mutation.path:
        return json.dumps(new), original, new
    parent = _get(document, mutation.path[:-1])
    key = mutation.path[-1]
    parent[key] = new
    try:
        return json.dumps(document), original, new
    finally:
        parent[key] = original


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object"}[type(value)]


def _unusable_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and (
            (isinstance(value, float) and not math.isfinite(value))
            or abs(value) > 2**64  # larger than any counter a tool prints
        )
    )


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (NaN equal to NaN, 8 to 8.0)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) or a == b


_GONE = object()


def _read_back(snapshot: HostSnapshot, path: JsonPath) -> Any:
    try:
        return _get(snapshot.to_dict(), path)
    except (KeyError, IndexError, TypeError):
        return _GONE


def check(mutation: Mutation, run_dir: Path, render: bool = True) -> None:
    """Load the mutated file, build the fleet's register (and with ``render`` the rest of the
    report, in memory); check what the module docstring says."""
    text, original, new = mutated_text(mutation)
    path = run_dir / HOSTS_DIR / mutation.file
    path.write_text(text, encoding="utf-8")
    loaded = load_snapshot_file(path)
    before, before_hosts = baseline(run_dir)
    snapshots = [loaded if name == mutation.file else s for name, s in before.items()]
    register = _register(snapshots, run_dir, render)

    in_inventory_data = mutation.path[:1] == ("host_data",) and len(mutation.path) > 1
    for failed in (f for f in register["findings"] if f["rule"] == "GA000"):
        # A rule may refuse an inventory setting it cannot use (ValueError, in GA000's
        # message); any other failure is a rule crashing on what the loader let through.
        refused = in_inventory_data and "failed: ValueError:" in failed["message"]
        assert refused and failed["host"] == loaded.host, f"{mutation}: {failed['message']}"

    hosts = {h["name"]: h for h in register["hosts"]}
    assert len(hosts) == len(before)
    real_name = before[mutation.file].host
    host = loaded.host
    if mutation.path == ("host",) and isinstance(new, str) and new:
        expected_name = new
    elif mutation.path in ((), ("host",)):  # no usable name inside: the file's stands in
        expected_name = Path(mutation.file).stem
    else:
        expected_name = real_name
    assert host == expected_name, f"{mutation}: the host is now called {host!r}"
    assert host in hosts, f"{mutation}: the host is missing from the register"
    for other, entry in before_hosts.items():
        if other != real_name:
            assert (hosts[other]["status"], hosts[other]["status_detail"]) == (
                entry["status"],
                entry["status_detail"],
            ), f"{mutation}: host {other} changed"

    read_back = _read_back(loaded, mutation.path)
    kept = read_back is not _GONE and _same(read_back, new)
    wrong_type = original is not None and (
        (_json_kind(original) != _json_kind(new) and new is not None) or _unusable_number(new)
    )
    if not kept or (wrong_type and not in_inventory_data):
        entry = hosts[host]
        assert entry["status"] != HostStatus.OK.value, f"{mutation}: the host is still OK"
        if entry["status"] == HostStatus.COLLECTION_FAILED.value and not loaded.gpus:
            assert "not a readable snapshot" in entry["status_detail"], mutation
        else:
            said = f"field {mutation.where}"
            assert said in loaded.parse_errors.get("snapshot", ""), mutation
            assert "unusable value" in entry["status_detail"], mutation
            if entry["status"] == HostStatus.DEGRADED.value:  # it says why first
                assert said in entry["status_detail"], f"{mutation}: {entry['status_detail']}"
            # A finding on the host quotes it (GA002 on an audited host, GA001 on another).
            messages = [f["message"] for f in register["findings"] if f["host"] == host]
            assert any(said in m for m in messages), f"{mutation}: no finding names it"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory alone in its parent: no earlier run to compare with, no rollouts."""
    directory = tmp_path_factory.mktemp("fuzz") / "run"
    (directory / HOSTS_DIR).mkdir(parents=True)
    return directory


def full_report(mutation: Mutation, tmp_path: Path) -> None:
    """``gpuaudit report`` on a copy of the example run with the mutated file."""
    run = RunDir(tmp_path / "run")
    shutil.copytree(EXAMPLE / HOSTS_DIR, run.hosts_dir)
    shutil.copy(EXAMPLE / "policy.yaml", run.path / "policy.yaml")
    text, _original, _new = mutated_text(mutation)
    (run.hosts_dir / mutation.file).write_text(text, encoding="utf-8")
    html = rebuild(run.path)
    register = json.loads(run.register_path.read_text(encoding="utf-8"))
    names = {h["name"] for h in register["hosts"]}
    assert load_snapshot_file(run.hosts_dir / mutation.file).host in names, mutation
    assert len(names) == len(documents())
    page = html.read_text(encoding="utf-8")
    assert all(escape(name) in page for name in names), mutation
    for name in ("register.csv", "summary.md", "junit.xml", "gpuaudit.prom"):
        assert (run.path / name).stat().st_size > 0, (mutation, name)


def test_the_example_fleet_loads_cleanly(run_dir: Path) -> None:
    snapshots, hosts = baseline(run_dir)
    assert all("snapshot" not in s.parse_errors for s in snapshots.values())
    assert sum(h["status"] == "ok" for h in hosts.values()) >= 10
    register = _register(list(snapshots.values()), run_dir)
    assert not [f for f in register["findings"] if f["rule"] == "GA000"]


def test_the_quick_set_covers_every_field_and_every_kind() -> None:
    mutations = quick_mutations()
    assert {m.kind for m in mutations} == set(KINDS)
    assert len({_field(m.path) for m in mutations}) == len(_occurrences()) == len(mutations)
    assert {m.file for m in mutations} == set(documents())


def test_every_field_changed_once(run_dir: Path) -> None:
    # Every other one renders the whole report; the kinds' count is odd, so both halves
    # still see every kind.
    assert len(KINDS) % 2 == 1
    for number, mutation in enumerate(quick_mutations()):
        check(mutation, run_dir, render=number % 2 == 0)


def test_a_sample_through_the_whole_report(tmp_path: Path) -> None:
    sample = quick_mutations()[::REBUILD_EVERY]
    for number, mutation in enumerate(sample):
        full_report(mutation, tmp_path / str(number))


@pytest.mark.slow
def test_every_kind_on_every_field(run_dir: Path) -> None:
    for number, mutation in enumerate(exhaustive_mutations()):
        check(mutation, run_dir, render=number % 2 == 0)


@pytest.mark.slow
def test_every_field_through_the_whole_report(tmp_path: Path) -> None:
    for number, mutation in enumerate(quick_mutations()):
        full_report(mutation, tmp_path / str(number))


def test_a_snapshot_file_is_the_general_json_encoders_text_for_every_mutation(
    run_dir: Path,
) -> None:
    """``HostSnapshot.to_json`` writes the model in one walk of its own (model/jsonable.py
    ``to_json_text``): for every snapshot of the example fleet, and each of them as loaded
    after every quick mutation (odd values kept, refused ones replaced), its text is exactly
    ``json.dumps(to_jsonable(snapshot), indent=1)``."""
    from gpuaudit.model.jsonable import to_jsonable

    def same(snapshot: HostSnapshot) -> None:
        try:
            general = json.dumps(to_jsonable(snapshot), indent=1, allow_nan=False)
        except ValueError as refused:  # a NaN the model kept: the fast path refuses it too
            with pytest.raises(type(refused)):
                snapshot.to_json()
            return
        assert snapshot.to_json() == general, snapshot.host

    for name in documents():
        same(load_snapshot_file(EXAMPLE / HOSTS_DIR / name))
    for mutation in quick_mutations():
        text, _original, _new = mutated_text(mutation)
        path = run_dir / HOSTS_DIR / mutation.file
        path.write_text(text, encoding="utf-8")
        same(load_snapshot_file(path))
