"""Keep the site's sysctl values in one drop-in file (GA601).

pyinfra's ``server.sysctl(persist=True)`` appends a line to a file each time a value changes,
leaving the stale one above it, and does not look at the other files read at boot. Here the
drop-in is written whole, and a file read after it that sets one of its keys to another value
is reported (and, if asked, commented out), since that value is the one the host boots with.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Generator, Iterable, Iterator, Mapping
from typing import Any

from pyinfra import host, logger
from pyinfra.api import (
    FileUploadCommand,
    OperationValueError,
    QuoteString,
    StringCommand,
    operation,
)
from pyinfra.facts.files import File, FileContents
from pyinfra.facts.server import Sysctl

from gpuaudit.facts.sysctl import (
    SYSCTL_CONF,
    SYSCTL_DIRS,
    Assignment,
    SysctlConfFiles,
    SysctlDropins,
    dotted,
    proc_path,
)
from gpuaudit.operations.files import replace_file
from gpuaudit.operations.plan import refusal
from gpuaudit.operations.settings import host_settings

DEFAULT_PATH = "/etc/sysctl.d/90-gpuaudit.conf"
FILE_MODE = "644"
HEADER = (
    "# Managed by gpuaudit (gpuaudit.operations.sysctl.baseline): the whole file is rewritten",
    "# on every run, so edits here are lost. Change the site policy's sysctl_baseline instead.",
)

_INTEGER = re.compile(r"-?[0-9]+")
# After an optional "-" (ignore errors), names separated by dots or slashes; "*" is a glob.
_KEY = re.compile(r"-?[A-Za-z0-9_*][A-Za-z0-9_*-]*(?:[./][A-Za-z0-9_*][A-Za-z0-9_*-]*)*")

Commands = Generator[StringCommand | FileUploadCommand, None, None]


@operation()
def baseline(
    values: Mapping[str, int | str] | None = None,
    path: str = DEFAULT_PATH,
    apply: bool = True,
    fix_shadows: bool = False,
    exact: bool = False,
) -> Commands:
    """
    Write the site's sysctl values as one drop-in file and apply them to the running kernel.

    + values: ``{key: value}`` to keep (default: the policy's ``sysctl_baseline``, the host's
      ``sysctl_baseline`` data merged over the built-in one, the values rule GA601 reads)
    + path: the drop-in file; it must be read by ``sysctl --system`` at boot (a ``*.conf`` in
      ``/etc/sysctl.d`` or another sysctl.d directory)
    + apply: run ``sysctl -p <path>`` when a running value differs from the wanted one
    + fix_shadows: comment out the lines of files read after ``path`` that set a wanted key to
      a value short of it (by default they are only reported)
    + exact: hold numbers exactly as given; by default a number is a minimum, as rule GA601
      judges it, and a higher value the host has is kept

    The file is written whole (a header and one ``key = value`` line per key, sorted), never
    appended to, and left alone when it already holds exactly that. Keys may use dots or
    slashes, a leading ``-`` (the key may be missing) and ``*`` globs, as sysctl.d(5) allows;
    values are numbers or strings on one line.

    Files are read at boot in the order of their names, whatever their directory, and
    ``/etc/sysctl.conf`` last; the last value set for a key wins. A file read after ``path``
    that sets a wanted key to another value therefore undoes it at every boot: the operation
    warns about each one and names it in its "no change" message, and edits it only with
    ``fix_shadows``. Files read before ``path`` lose to it and are not reported.

    A number is a minimum (``exact=False``, the default): a file read after ``path``, or a
    running value, at or above it is left as it is, and where a file read before ``path`` sets
    a key higher, the drop-in keeps that value, so the drop-in never lowers what the host boots
    with. Only the running values short of the baseline are set (``sysctl -w``, a glob's
    running keys each by its own name), never a running value above it. Text values (``bbr``,
    ``4096 87380 6291456``) are held exactly.

    .. code:: python

        sysctl.baseline(
            name="Keep the network buffer sysctls",
            values={"net.core.rmem_max": 134217728, "net.core.wmem_max": 134217728},
        )
    """
    try:
        wanted = _validated(_wanted(values))
    except OperationValueError as bad:
        if values is not None:
            raise  # the caller's own values: a mistake in the deploy, for every host
        # The host's settings (its inventory data is not checked as a policy file is): this
        # host is refused, the others go on.
        yield refusal(f"sysctl_baseline: {bad}")
        return
    path = _validated_path(path)
    changed = False

    assignments = host.get_fact(SysctlDropins, keys=list(wanted))
    files = [*host.get_fact(SysctlConfFiles), *(file for file, _, _ in assignments)]
    if not exact:
        wanted = kept_values(path, wanted, assignments, files)
    content = render(wanted)
    remote = host.get_fact(File, path=path)
    if remote is False:
        yield refusal(f"{path} exists but is not a regular file; not replacing it")
        return
    current = host.get_fact(FileContents, path=path) if remote else None
    if not remote or current is None or list(current) != content.splitlines():
        if not remote:  # a minimal host may lack the directory
            yield StringCommand("mkdir", "-p", QuoteString(posixpath.dirname(path)))
        # Written beside it, given its mode, renamed over it: never seen half written.
        yield from replace_file(content, path, FILE_MODE)
        changed = True
    elif str(remote.get("mode")) != FILE_MODE:
        yield StringCommand("chmod", FILE_MODE, QuoteString(path))
        changed = True

    notes: list[str] = []
    unread = boot_problem(path, files)
    if unread:
        logger.warning(f"sysctl baseline: {unread}")
        notes.append(unread)

    shadows = find_shadows(path, wanted, assignments, files, exact=exact)
    for file, key, value in shadows:
        want = wanted[_key_for(wanted, key)]
        action = (
            "commenting it out" if fix_shadows else "not changed; fix_shadows=True comments it out"
        )
        logger.warning(
            f"sysctl {key}: {file} is read after {path} and sets {value}, which wins over "
            f"{want} at boot ({action})"
        )
        notes.append(f"{file} sets {key} = {value} after {path}, which wins at boot")
    if fix_shadows:
        for file, keys in _by_file(shadows):
            yield comment_out(file, keys)
            changed = True

    if apply:
        globs = any("*" in key for key in wanted)
        running = host.get_fact(Sysctl, keys=None if globs else [dotted(k) for k in wanted])
        differ, absent = live_differences(wanted, running, exact=exact)
        if absent:
            missing = ", ".join(absent)
            logger.warning(
                f"sysctl baseline: not in the running kernel (module not loaded?): {missing}"
            )
            notes.append(f"not in the running kernel: {missing}")
        if differ:
            # Only the running keys short of their value, a glob's each by its own name:
            # `sysctl -p` of the drop-in would also set a key that runs higher.
            settings = short_settings(wanted, running, exact=exact)
            yield StringCommand("sysctl", "-w", *(QuoteString(item) for item in settings))
            changed = True

    if not changed:
        what = "sysctl baseline" if apply else "sysctl baseline file (running values not checked)"
        listed = ", ".join(sorted(wanted, key=_sort_key))
        host.noop("; ".join([f"{what} already in place: {listed}", *notes]))


@operation()
def remove(path: str = DEFAULT_PATH) -> Generator[StringCommand, None, None]:
    """
    Delete the drop-in :func:`baseline` writes. The running values are left as they are.

    + path: the drop-in file

    .. code:: python

        sysctl.remove(name="Remove the gpuaudit sysctl drop-in")
    """
    path = _validated_path(path)
    remote = host.get_fact(File, path=path)
    if remote is False:
        yield refusal(f"{path} exists but is not a regular file; not removing it")
        return
    if remote:
        yield StringCommand("rm", "-f", QuoteString(path))
    else:
        host.noop(f"no sysctl drop-in at {path}")


# --- the file -------------------------------------------------------------------------------


def render(wanted: Mapping[str, str]) -> str:
    """The drop-in's whole text: the header and ``key = value`` lines, sorted by key."""
    lines = [*HEADER, *(f"{key} = {wanted[key]}" for key in sorted(wanted, key=_sort_key))]
    return "\n".join(lines) + "\n"


def _sort_key(key: str) -> str:
    return dotted(key)


def _wanted(values: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The values to keep: the caller's, or the host's policy setting over the built-in one."""
    if values is not None:
        return values
    site = host_settings().get("sysctl_baseline")
    if not isinstance(site, Mapping):
        raise OperationValueError(
            f"sysctl_baseline must be a mapping of key to value, not {site!r}"
        )
    return dict(site)


def _validated(values: Mapping[str, Any]) -> dict[str, str]:
    """``{key: value as written}``; a bad key or value raises OperationValueError."""
    if not isinstance(values, Mapping):
        raise OperationValueError(f"sysctl values must be a mapping of key to value: {values!r}")
    if not values:
        raise OperationValueError("no sysctl values to keep (use sysctl.remove to drop the file)")
    wanted: dict[str, str] = {}
    seen: dict[str, str] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise OperationValueError(
                f"invalid sysctl key {key!r}: use names of letters, digits, '_', '-' and '*' "
                "separated by single '.' or '/', optionally after one leading '-'"
            )
        other = seen.setdefault(proc_path(key), key)
        if other != key:
            raise OperationValueError(f"sysctl keys {other!r} and {key!r} name the same setting")
        wanted[key] = _value_text(key, value)
    return wanted


def _value_text(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise OperationValueError(
            f"sysctl {key}: the value must be an int or a str, not {type(value).__name__}"
        )
    text = str(value).strip()
    if any(c in text for c in "\n\r\0"):
        raise OperationValueError(f"sysctl {key}: the value must be one line: {value!r}")
    if not text:
        raise OperationValueError(f"sysctl {key}: the value is empty")
    return text


def _validated_path(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or any(c in path for c in "\n\r\0"):
        raise OperationValueError(f"the drop-in path must be an absolute path: {path!r}")
    return posixpath.normpath(path)


# --- boot order and shadows -----------------------------------------------------------------


def load_order(files: Iterable[str]) -> list[str]:
    """The files among ``files`` that ``sysctl --system`` reads, in the order it reads them.

    ``*.conf`` files of :data:`SYSCTL_DIRS` go by file name whatever their directory; of two
    with the same name only the one in the earlier directory of that list counts.
    ``/etc/sysctl.conf`` comes last. Any other file is not read at all.
    """
    chosen: dict[str, tuple[int, str]] = {}
    conf = False
    for file in set(files):
        if file == SYSCTL_CONF:
            conf = True
            continue
        directory, _, name = file.rpartition("/")
        if directory in SYSCTL_DIRS and name.endswith(".conf"):
            rank = SYSCTL_DIRS.index(directory)
            if name not in chosen or rank < chosen[name][0]:
                chosen[name] = (rank, file)
    return [chosen[name][1] for name in sorted(chosen)] + ([SYSCTL_CONF] if conf else [])


def boot_problem(path: str, files: Iterable[str] = ()) -> str | None:
    """Why ``sysctl --system`` would not read ``path`` at boot, or None.

    ``files`` are the other configuration files known: one with the same name in a more
    important directory hides ``path``.
    """
    directory, _, name = path.rpartition("/")
    if path != SYSCTL_CONF and (directory not in SYSCTL_DIRS or not name.endswith(".conf")):
        return f"{path} is not read at boot: use a *.conf file in {SYSCTL_DIRS[0]}"
    order = load_order([path, *files])
    if path in order:
        return None
    hider = next(file for file in order if file.rpartition("/")[2] == name)
    return f"{path} is not read at boot: {hider} has the same name and is read instead"


def find_shadows(
    path: str,
    wanted: Mapping[str, str],
    assignments: Iterable[Assignment],
    files: Iterable[str] = (),
    *,
    exact: bool = False,
) -> list[Assignment]:
    """The assignments that undo a wanted value at boot, in the order they are read.

    A key is shadowed when the last value set for it, in files read after ``path``, falls
    short of the wanted one (:func:`satisfies`); every such assignment short of it is listed
    (removing only the last would let the one before it win). Files read before ``path`` lose
    to it; a file with the same name as ``path`` in a more important directory hides ``path``
    itself, and then every value read counts. ``files`` are the other configuration files known
    (:class:`~gpuaudit.facts.sysctl.SysctlConfFiles`): one that sets no wanted key still
    hides a file of its name in a less important directory, whose values then are not read.
    """
    assignments = list(assignments)
    order = load_order([path, *files, *(file for file, _, _ in assignments)])
    rank = {file: index for index, file in enumerate(order)}
    start = rank[path] + 1 if path in rank else 0
    later = sorted(
        (a for a in assignments if a[0] != path and rank.get(a[0], -1) >= start),
        key=lambda a: rank[a[0]],
    )
    shadows: list[Assignment] = []
    for key, value in wanted.items():
        target = proc_path(key)
        sets = [a for a in later if proc_path(a[1]) == target]
        if sets and not satisfies(sets[-1][2], value, exact=exact):
            shadows += [a for a in sets if not satisfies(a[2], value, exact=exact)]
    return sorted(shadows, key=lambda a: rank[a[0]])


def kept_values(
    path: str,
    wanted: Mapping[str, str],
    assignments: Iterable[Assignment],
    files: Iterable[str] = (),
) -> dict[str, str]:
    """``wanted``, each number raised to the value that files read before ``path`` leave for
    its key where that is higher: ``path`` wins over them at boot, and a minimum must not
    lower what the host booted with. Not where a file read after ``path`` sets the key: that
    file's value is what the host boots with (a shadow where it is short of the minimum), and
    a raised drop-in would only make a compliant later value look short. A glob key, and a
    text value, is kept as it is."""
    assignments = list(assignments)
    order = load_order([path, *files, *(file for file, _, _ in assignments)])
    if path not in order:
        return dict(wanted)  # hidden: it sets nothing at boot
    rank = {file: index for index, file in enumerate(order)}
    earlier = sorted(
        (a for a in assignments if rank.get(a[0], len(order)) < rank[path]),
        key=lambda a: rank[a[0]],
    )
    later = {proc_path(a[1]) for a in assignments if rank.get(a[0], -1) > rank[path]}
    kept = dict(wanted)
    for key, value in wanted.items():
        target = proc_path(key)
        if target in later:
            continue
        sets = [a[2] for a in earlier if proc_path(a[1]) == target]
        boot, want = (_number(sets[-1]) if sets else None), _number(value)
        if "*" not in key and boot is not None and want is not None and boot > want:
            kept[key] = str(boot)
    return kept


def satisfies(actual: Any, wanted: str, *, exact: bool = False) -> bool:
    """Whether a value (a file's text, or a running value) holds the wanted one: the same
    text (spaces aside), or, unless ``exact``, a number at least the wanted number."""
    if _norm(actual) == _norm(wanted):
        return True
    have, want = _number(actual), _number(wanted)
    return not exact and have is not None and want is not None and have >= want


def _number(value: Any) -> int | None:
    text = _norm(value)
    return int(text) if _INTEGER.fullmatch(text) else None


def comment_out(file: str, keys: Iterable[str]) -> StringCommand:
    """``sed`` that turns each assignment of ``keys`` in ``file`` into a comment.

    The keys are as the file spells them; ``--follow-symlinks`` edits the file a link such as
    /etc/sysctl.d/99-sysctl.conf points to, instead of replacing the link.
    """
    scripts = [
        rf"\|^[[:space:]]*-\{{0,1\}}[[:space:]]*{_bre(key)}[[:space:]]*=|s|^|# gpuaudit: |"
        for key in keys
    ]
    return StringCommand(
        "sed",
        "-i",
        "--follow-symlinks",
        *(StringCommand("-e", QuoteString(script)) for script in scripts),
        QuoteString(file),
    )


def _by_file(shadows: Iterable[Assignment]) -> list[tuple[str, list[str]]]:
    grouped: dict[str, list[str]] = {}
    for file, key, _ in shadows:
        keys = grouped.setdefault(file, [])
        if key not in keys:
            keys.append(key)
    return list(grouped.items())


def _bre(text: str) -> str:
    return re.sub(r"([\\.*\[\]^$|])", r"\\\1", text)


def _key_for(wanted: Mapping[str, str], spelling: str) -> str:
    target = proc_path(spelling)
    return next(key for key in wanted if proc_path(key) == target)


# --- running values -------------------------------------------------------------------------


def live_differences(
    wanted: Mapping[str, str], running: Mapping[str, Any], *, exact: bool = False
) -> tuple[list[str], list[str]]:
    """(keys whose running value falls short of the wanted one (:func:`satisfies`), keys the
    running kernel does not have).

    ``running`` is pyinfra's ``Sysctl`` fact (``{"net.core.rmem_max": 212992, "net.ipv4.
    tcp_rmem": [4096, 131072, 6291456]}``). A glob key is compared with every running key it
    matches that is not also wanted by name; a key with a leading ``-`` may be missing.
    """
    differ: list[str] = []
    absent: list[str] = []
    for key, _, short in _running_matches(wanted, running, exact):
        if short is None:
            if not key.startswith("-"):
                absent.append(key)
        elif short:
            differ.append(key)
    return differ, absent


def short_settings(
    wanted: Mapping[str, str], running: Mapping[str, Any], *, exact: bool = False
) -> list[str]:
    """``key=value`` for each running key short of its wanted value, each key a glob matches
    named as it runs (``net.ipv4.conf.eth0.accept_local=1``): what ``sysctl -w`` sets, and
    only that, so that no key that runs higher is lowered (``sysctl -p`` of the drop-in would
    set every key it holds)."""
    return [
        f"{dotted(path)}={value}"
        for _, value, short in _running_matches(wanted, running, exact)
        for path in short or ()
    ]


def _running_matches(
    wanted: Mapping[str, str], running: Mapping[str, Any], exact: bool
) -> Iterator[tuple[str, str, list[str] | None]]:
    """(key, wanted value, the running keys (as /proc/sys paths) it matches that fall short;
    None where it matches none), for each wanted key."""
    values = {proc_path(key): value for key, value in running.items()}
    named = {proc_path(key) for key in wanted if "*" not in key}
    for key, value in wanted.items():
        target = proc_path(key)
        if "*" in target:
            pattern = _glob(target)
            matched = [p for p in values if p not in named and pattern.fullmatch(p)]
        else:
            matched = [target] if target in values else []
        if not matched:
            yield key, value, None
        else:
            yield key, value, [p for p in matched if not satisfies(values[p], value, exact=exact)]


def _glob(target: str) -> re.Pattern[str]:
    return re.compile("[^/]*".join(re.escape(part) for part in target.split("*")))


def _norm(value: Any) -> str:
    """A value as text with single spaces: sysctl prints vectors tab-separated."""
    if isinstance(value, (list, tuple)):
        value = " ".join(str(v) for v in value)
    return " ".join(str(value).split())
