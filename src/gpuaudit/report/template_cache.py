"""The page templates' compiled code, kept between processes.

Jinja turns each template into Python source and compiles it the first time a process asks for
it: for the report's six templates about 0.08 s of CPU in every process that writes a page (each
``gpuaudit audit``, ``gpuaudit report``, every shard that writes the register), whatever the
size of the fleet. Jinja's bytecode cache keeps the compiled code on disk and gives it back while
the template's source is the one it was compiled from (a checksum of the source), so a changed
template is compiled again.

The code is kept in ``__pycache__/`` beside the templates, as Python keeps the package's own
modules, and is as trusted as they are (loading it runs it). Where that directory cannot be made
(a package installed read-only), templates are compiled in memory each time, as without a cache;
where it cannot be written, what it holds is used and nothing is added. The cache only ever saves
time: nothing it does can fail a report. ``make bytecode`` fills it, as it compiles the modules.

Jinja's checksum covers the source only; the cache key here also covers Jinja's version and the
environment's settings that shape the compiled code (delimiters, whitespace control,
autoescaping, the kind of undefined), so code compiled under other settings is never reused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

import jinja2
from jinja2 import Environment, FileSystemBytecodeCache
from jinja2.bccache import Bucket

CACHE_DIR = "__pycache__"
_PATTERN = "%s.jinja-code"


class CompiledTemplates(FileSystemBytecodeCache):
    """Jinja's file-system bytecode cache that is never a reason for a page to fail: an entry
    that cannot be read (cut short, damaged) is compiled again, one that cannot be written is
    left unwritten; keyed by the environment's settings as well as by the template."""

    def __init__(self, directory: Path, settings: str) -> None:
        super().__init__(str(directory), _PATTERN)
        self.settings = settings

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        text = "\0".join((jinja2.__version__, self.settings, name, filename or ""))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # a damaged entry: unpickling and unmarshalling raise many kinds
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        with suppress(OSError):
            super().dump_bytecode(bucket)


def environment_settings(env: Environment) -> str:
    """What of ``env`` the compiled code of a template depends on, as one text."""
    autoescape = env.autoescape if isinstance(env.autoescape, bool) else "function"
    return repr(
        (
            env.block_start_string,
            env.block_end_string,
            env.variable_start_string,
            env.variable_end_string,
            env.comment_start_string,
            env.comment_end_string,
            env.line_statement_prefix,
            env.line_comment_prefix,
            env.trim_blocks,
            env.lstrip_blocks,
            env.newline_sequence,
            env.keep_trailing_newline,
            env.optimized,
            env.is_async,
            autoescape,
            env.finalize is not None,
            f"{env.undefined.__module__}.{env.undefined.__qualname__}",
            sorted(env.extensions),
        )
    )


def cache_templates(env: Environment, templates: Path) -> Environment:
    """Give ``env`` (whose templates are in ``templates``) the cache beside them, where that
    directory is or can be made; ``env`` as it was otherwise. Returns ``env``."""
    directory = templates / CACHE_DIR
    with suppress(OSError):  # read-only: what the directory holds is still read
        directory.mkdir(exist_ok=True)
    if directory.is_dir():
        env.bytecode_cache = CompiledTemplates(directory, environment_settings(env))
    return env


def warm(environments: Iterable[Environment]) -> int:
    """Compile every template of ``environments`` into their caches; how many were loaded."""
    count = 0
    for env in environments:
        for name in env.list_templates(filter_func=lambda n: n.endswith(".j2")):
            env.get_template(name)
            count += 1
    return count
