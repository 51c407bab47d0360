"""No module of mediacrawler imports a layer above its own (docs/architecture.md, "Layers"), at module level or
inside a function, absolutely or relatively (``from . import x``, ``from mediacrawler import x``), or by an import
string (``"mediacrawler.distributed.x.Y"`` handed to ``load_object``). settings.py is the wiring point: its import
strings may name any layer, and each must load. The known exceptions are listed: they are to be removed, and a
fixed one must leave the list."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from scrapy.utils.misc import load_object

import mediacrawler

PACKAGE = Path(mediacrawler.__file__).resolve().parent

#: Low to high; the first part of the module path after ``mediacrawler.``.
LAYERS: list[set[str]] = [
    {"__init__", "contracts", "config", "items", "fsutil", "parsers", "signals", "settings", "feeds", "checkpoints",
     "exporters", "scrub", "jobstate", "records", "library", "links"},
    {"media"},
    {"cache", "distributed"},
    {"middlewares", "handlers"},
    {"pipelines"},
    {"extensions"},
    {"spiders"},
    {"commands", "cli", "status", "demo", "__main__", "web"},
]

#: (importer, imported) pairs still to be removed: backend tables chosen by a setting's value, which belong in
#: settings.py beside the setting (as Scrapy's DOWNLOAD_HANDLERS_BASE does).
KNOWN: set[tuple[str, str]] = {
    ("mediacrawler.media.index", "mediacrawler.distributed.media_index.RedisMediaIndex"),
    ("mediacrawler.checkpoints.store", "mediacrawler.distributed.checkpoint.RedisCheckpointStore"),
}
#: A string naming a module or object of the package, as an import string does.
IMPORT_STRING = re.compile(r"mediacrawler(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "mediacrawler" or len(parts) < 2:
        return None
    return next((n for n, names in enumerate(LAYERS) if parts[1] in names), None)


def imported(module: str, tree: ast.AST, *, package: bool) -> set[str]:
    """What ``module`` imports: absolute and relative imports resolved to full names (``from mediacrawler import
    x`` imports ``mediacrawler.x``), and import strings (log channel names excepted)."""
    found: set[str] = set()
    parts = module.split(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = parts[: len(parts) - node.level + (1 if package else 0)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "getLogger":
            continue
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and IMPORT_STRING.fullmatch(node.value):
            found.add(node.value)
    loggers = {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call)
               and getattr(n.func, "attr", None) == "getLogger" and n.args and isinstance(n.args[0], ast.Constant)}
    return found - loggers


def modules() -> list[tuple[str, Path]]:
    return [(".".join(("mediacrawler", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"), p)
            for p in PACKAGE.rglob("*.py")]


def upward_imports() -> set[tuple[str, str]]:
    found = set()
    for module, path in modules():
        mine = layer(module)
        if mine is None or module == "mediacrawler.settings":  # settings: the wiring point
            continue
        tree = ast.parse(path.read_text("utf-8"))
        for target in imported(module, tree, package=path.name == "__init__.py"):
            other = layer(target)
            if other is not None and other > mine:
                found.add((module, target))
    return found


def test_every_package_has_a_layer() -> None:
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
            if (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert tops - {name for names in LAYERS for name in names} == set()


def sandbox_imports() -> set[tuple[str, str]]:
    """(module, name) for every import of the sandbox (mediacrawler_sandbox, a test double) in the product, by an
    import statement or an import string."""
    found = set()
    for module, path in modules():
        tree = ast.parse(path.read_text("utf-8"))
        names = imported(module, tree, package=path.name == "__init__.py") | {
            n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        found.update((module, name) for name in names if re.fullmatch(r"mediacrawler_sandbox(\.\w+)*", name))
    return found


def test_the_product_imports_the_sandbox_only_in_the_demo_command() -> None:
    """Only ``mediacrawler demo`` runs the sandbox, and imports it inside the command (it is not installed with
    the product): no module-level import of it anywhere."""
    importers = {module for module, _ in sandbox_imports()}
    assert importers == {"mediacrawler.demo"}
    tree = ast.parse((PACKAGE / "demo.py").read_text("utf-8"))
    top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [n for n in top_level if "mediacrawler_sandbox" in ast.unparse(n)]


def test_no_module_imports_a_layer_above_it() -> None:
    assert upward_imports() == KNOWN


def test_every_import_string_of_settings_loads() -> None:
    tree = ast.parse((PACKAGE / "settings.py").read_text("utf-8"))
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
               and IMPORT_STRING.fullmatch(n.value)}
    assert len(strings) > 20
    for name in sorted(strings):
        try:
            load_object(name)  # an object: a component, a handler, an exporter
        except NameError:
            importlib.import_module(name)  # a module (COMMANDS_MODULE, SPIDER_MODULES); raises when it names nothing


def test_the_checks_see_relative_package_and_string_imports() -> None:
    tree = ast.parse("from . import store\nfrom ..spiders import _base\nfrom mediacrawler import cli\n"
                     "X = 'mediacrawler.commands.crawl.Command'\nlog = logging.getLogger('mediacrawler.spiders')\n")
    found = imported("mediacrawler.media.index", tree, package=False)
    assert {"mediacrawler.media.store", "mediacrawler.spiders._base", "mediacrawler.cli",
            "mediacrawler.commands.crawl.Command"} <= found
    assert "mediacrawler.spiders" not in found

