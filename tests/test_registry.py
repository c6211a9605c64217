"""The generic `Registry`: registration, lookup messages, listing order and discovery."""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass

import pytest

from kvbench.errors import KvbenchInputError
from kvbench.registry import Registry


@dataclass(frozen=True)
class Toy:
    name: str
    summary: str
    cls: type = object


def test_a_name_registered_twice_is_refused_unless_it_is_the_same_extension():
    toys: Registry[Toy] = Registry("--toy", identity=lambda entry: entry.cls)
    toys.add(Toy("top", "spins", int))
    toys.add(Toy("top", "spins", int))  # the same module imported again
    with pytest.raises(ValueError, match="--toy 'top' registered twice"):
        toys.add(Toy("top", "another top", str))
    assert toys.names() == ["top"]


def test_an_unknown_name_is_a_user_error_naming_the_choices_and_the_hint():
    toys: Registry[Toy] = Registry(
        "--toy", choices_label="toys: ",
        hint=lambda name: "a yoyo is a string toy" if name == "yoyo" else None)
    toys.add(Toy("top", "spins"))
    toys.add(Toy("kite", "flies"))
    with pytest.raises(KvbenchInputError, match=r"^unknown --toy 'ball' \(toys: top, kite\)$"):
        toys.get("ball")
    with pytest.raises(KvbenchInputError,
                       match=r"^unknown --toy 'yoyo' \(toys: top, kite\): a yoyo is a string"):
        toys.get("yoyo")
    assert toys.get("kite").summary == "flies" and "top" in toys and "ball" not in toys


def test_order_sorts_the_listing_and_describe_follows_it():
    toys: Registry[Toy] = Registry("--toy", order=lambda entry: (entry.name != "top", entry.name))
    for name in ("kite", "ball", "top"):
        toys.add(Toy(name, f"a {name}"))
    assert toys.names() == ["top", "ball", "kite"]
    assert toys.describe() == [("top", "a top"), ("ball", "a ball"), ("kite", "a kite")]


def test_every_module_of_the_package_is_imported_on_the_first_lookup(tmp_path, monkeypatch):
    """A new module in the package registers itself: nothing else names it."""
    package = tmp_path / "toybox"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass
        from kvbench.registry import Registry

        @dataclass(frozen=True)
        class Toy:
            name: str
            summary: str

        TOYS = Registry("--toy", "toybox")
    '''))
    for name in ("kite", "top"):
        (package / f"{name}.py").write_text(
            f"from toybox import TOYS, Toy\nTOYS.add(Toy({name!r}, 'a {name}'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import toybox

        assert "kite" not in toybox.TOYS._entries, "nothing is imported before a lookup"
        assert sorted(toybox.TOYS.names()) == ["kite", "top"]
        assert toybox.TOYS.get("top").summary == "a top"
    finally:
        for module in [m for m in sys.modules if m == "toybox" or m.startswith("toybox.")]:
            del sys.modules[module]
