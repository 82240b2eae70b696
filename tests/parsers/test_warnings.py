"""Parse warnings are collected where the parsers run, kept once each, and bounded."""

from __future__ import annotations

from gpuaudit.parsers.warnings import MAX_WARNINGS, collecting, warn


def test_a_warning_outside_a_collection_goes_nowhere() -> None:
    warn("nvidia-smi -q", "unknown field", "Foo : 1")
    with collecting() as warnings:
        pass
    assert warnings == []


def test_warnings_are_kept_once_each_and_cut_to_length() -> None:
    with collecting() as warnings:
        warn("nvidia-smi -q", "unknown field", "Foo : 1", gpu=0)
        warn("nvidia-smi -q", "unknown field", "Foo : 1", gpu=0)
        warn("kernel log", "unknown form", "x" * 500)
    assert [(w.source, w.gpu) for w in warnings] == [("nvidia-smi -q", 0), ("kernel log", None)]
    assert len(warnings[1].text) == 200 and warnings[1].text.endswith("…")


def test_a_flood_of_warnings_is_bounded_and_says_how_many_were_left_out() -> None:
    with collecting() as warnings:
        for n in range(MAX_WARNINGS + 7):
            warn("topo -m", "unknown cell", str(n))
    assert len(warnings) == MAX_WARNINGS + 1
    assert warnings[-1].message == "7 more parse warnings left out"


def test_collections_nest_without_leaking() -> None:
    with collecting() as outer:
        warn("a", "outer")
        with collecting() as inner:
            warn("b", "inner")
    assert [w.message for w in outer] == ["outer"]
    assert [w.message for w in inner] == ["inner"]
