"""The page templates' compiled code kept between processes (report/template_cache.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from gpuaudit.report import html
from gpuaudit.report.template_cache import (
    CACHE_DIR,
    CompiledTemplates,
    cache_templates,
    environment_settings,
    warm,
)
from gpuaudit.upgrade import report as rollout_report


def _env(templates: Path, *, trim_blocks: bool = True) -> Environment:
    env = Environment(
        loader=FileSystemLoader(templates),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=trim_blocks,
    )
    return cache_templates(env, templates)


class _Compiles:
    """Counts the templates an environment compiles from source."""

    def __init__(self, env: Environment, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str | None] = []
        compile_source = env.compile

        def counted(source: object, name: str | None = None, *args: object, **kw: object):
            self.names.append(name)
            return compile_source(source, name, *args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(env, "compile", counted)


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "page.html.j2").write_text(
        "{% for item in items %}\n<li>{{ item }}</li>\n{% endfor %}\n", encoding="utf-8"
    )
    return folder


def test_a_second_environment_takes_the_compiled_code_instead_of_compiling(
    templates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _env(templates)
    made = first.get_template("page.html.j2").render(items=["<a>", "b"])
    assert list((templates / CACHE_DIR).iterdir())

    second = _env(templates)
    compiles = _Compiles(second, monkeypatch)
    assert second.get_template("page.html.j2").render(items=["<a>", "b"]) == made
    assert compiles.names == []
    assert "&lt;a&gt;" in made


def test_a_changed_template_is_compiled_again(
    templates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _env(templates).get_template("page.html.j2")
    (templates / "page.html.j2").write_text("changed {{ items | length }}\n", encoding="utf-8")
    again = _env(templates)
    compiles = _Compiles(again, monkeypatch)
    assert again.get_template("page.html.j2").render(items=[1, 2]) == "changed 2"
    assert compiles.names == ["page.html.j2"]


def test_code_compiled_under_other_settings_is_not_reused(
    templates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trimmed = _env(templates).get_template("page.html.j2").render(items=["x"])
    untrimmed_env = _env(templates, trim_blocks=False)
    compiles = _Compiles(untrimmed_env, monkeypatch)
    untrimmed = untrimmed_env.get_template("page.html.j2").render(items=["x"])
    assert compiles.names == ["page.html.j2"]
    assert trimmed == "<li>x</li>\n"
    assert untrimmed == "\n<li>x</li>\n"
    assert environment_settings(_env(templates)) != environment_settings(untrimmed_env)


@pytest.mark.parametrize("damage", [b"", b"j2 not a cache entry", None])
def test_a_damaged_entry_is_compiled_again(
    templates: Path, monkeypatch: pytest.MonkeyPatch, damage: bytes | None
) -> None:
    expected = _env(templates).get_template("page.html.j2").render(items=["y"])
    for entry in (templates / CACHE_DIR).iterdir():
        data = entry.read_bytes()
        entry.write_bytes(data[: len(data) // 2] if damage is None else damage)
    again = _env(templates)
    compiles = _Compiles(again, monkeypatch)
    assert again.get_template("page.html.j2").render(items=["y"]) == expected
    assert compiles.names == ["page.html.j2"]


def test_without_a_cache_directory_templates_are_compiled_in_memory(templates: Path) -> None:
    (templates / CACHE_DIR).write_text("a file where the directory would be", encoding="utf-8")
    env = _env(templates)
    assert env.bytecode_cache is None
    assert env.get_template("page.html.j2").render(items=["z"]) == "<li>z</li>\n"


def test_a_cache_that_cannot_be_written_never_fails_the_page(templates: Path) -> None:
    env = _env(templates)
    assert isinstance(env.bytecode_cache, CompiledTemplates)
    shutil.rmtree(templates / CACHE_DIR)  # gone under the process: writing an entry fails
    assert env.get_template("page.html.j2").render(items=["w"]) == "<li>w</li>\n"
    assert not (templates / CACHE_DIR).exists()


def test_the_report_and_rollout_pages_keep_their_code_beside_their_templates() -> None:
    for module in (html, rollout_report):
        env = module.environment()
        cache = env.bytecode_cache
        assert isinstance(cache, CompiledTemplates)
        assert Path(cache.directory) == module.TEMPLATES / CACHE_DIR
    assert warm([html.environment(), rollout_report.environment()]) >= 7
