"""No module of mediacrawler imports a layer above its own (docs/architecture.md, "Layers"), at module level or
inside a function. The known exceptions are listed: they are to be removed, and a fixed one must leave the list."""

from __future__ import annotations

import ast
from pathlib import Path

import mediacrawler

PACKAGE = Path(mediacrawler.__file__).resolve().parent

#: Low to high; the first part of the module path after ``mediacrawler.``.
LAYERS: list[set[str]] = [
    {"__init__", "contracts", "config", "items", "fsutil", "parsers", "signals", "settings", "feeds", "checkpoints",
     "exporters", "scrub"},
    {"media"},
    {"cache", "distributed"},
    {"middlewares", "handlers"},
    {"pipelines"},
    {"extensions"},
    {"spiders"},
    {"commands", "cli", "status", "demo", "__main__"},
]

#: (importer, imported) pairs still to be removed.
KNOWN: set[tuple[str, str]] = set()


def layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "mediacrawler" or len(parts) < 2:
        return None
    return next((n for n, names in enumerate(LAYERS) if parts[1] in names), None)


def upward_imports() -> set[tuple[str, str]]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(("mediacrawler", *path.relative_to(PACKAGE).with_suffix("").parts))
        mine = layer(module)
        if mine is None:  # sandbox/: the test double, outside the crawler's layers
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                other = layer(target)
                if other is not None and other > mine:
                    found.add((module, target))
    return found


def test_every_package_has_a_layer() -> None:
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
            if (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert tops - {name for names in LAYERS for name in names} == {"sandbox"}


def test_no_module_imports_a_layer_above_it() -> None:
    assert upward_imports() == KNOWN
