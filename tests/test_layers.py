"""No module of mediacrawler imports a layer above its own (docs/architecture.md, "Layers"), at module level or
inside a function, absolutely or relatively (``from . import x``, ``from mediacrawler import x``), or by an import
string (``"mediacrawler.distributed.x.Y"`` handed to ``load_object``). settings.py is the wiring point: each of its
import strings must load and sit in the layer its setting wires (ITEM_PIPELINES in pipelines/, EXTENSIONS in
extensions/…). No import cycle among the module-level imports of mediacrawler nor of mediacrawler_sandbox. The
product imports the sandbox only inside ``mediacrawler demo``. The known exceptions are listed: they are to be
removed, and a fixed one must leave the list. Every check is a pure function over sources, also run here on
planted violations."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from scrapy.utils.misc import load_object

import mediacrawler
import mediacrawler_sandbox

PACKAGE = Path(mediacrawler.__file__).resolve().parent
SANDBOX = Path(mediacrawler_sandbox.__file__).resolve().parent

#: Low to high; the first part of the module path after ``mediacrawler.``.
LAYERS: list[set[str]] = [
    {"__init__", "compat", "contracts", "config", "items", "fsutil", "parsers", "signals", "settings", "feeds",
     "checkpoints", "exporters", "scrub", "jobstate", "records", "library", "links"},
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

#: The settings of settings.py that name components, and the packages (first part after ``mediacrawler.``) those
#: must be in. A new setting with an import string must be added here.
SETTING_LAYERS: dict[str, set[str]] = {
    "SPIDER_MODULES": {"spiders"},
    "SPIDER_LOADER_CLASS": {"spiders"},
    "NEWSPIDER_MODULE": {"spiders"},
    "COMMANDS_MODULE": {"commands"},
    "DOWNLOAD_HANDLERS": {"handlers"},
    "DOWNLOADER_MIDDLEWARES": {"middlewares"},
    "SPIDER_MIDDLEWARES": {"middlewares"},
    "ITEM_PIPELINES": {"pipelines"},
    "FEED_EXPORTERS": {"exporters"},
    "FEED_STORAGES": {"feeds"},
    "EXTENSIONS": {"extensions"},
    "ADDONS": {"extensions", "distributed"},
}
#: A value parser named in a declaration (``Parsed("mediacrawler.x.parse", …)``) is called by config.py when the
#: settings are checked, before any component exists: it must sit below the components.
PARSER_MAX_LAYER = 2

#: module name -> (source, whether it is a package's __init__).
Sources = Mapping[str, tuple[str, bool]]


def layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "mediacrawler" or len(parts) < 2:
        return None
    return next((n for n, names in enumerate(LAYERS) if parts[1] in names), None)


def _targets(module: str, node: ast.Import | ast.ImportFrom, *, package: bool) -> tuple[str, list[str]]:
    """``(base, names)`` of one import statement, resolved to full names: ``from mediacrawler import x`` gives
    ``("mediacrawler", ["mediacrawler.x"])``, ``import a.b`` ``("", ["a.b"])``."""
    if isinstance(node, ast.Import):
        return "", [alias.name for alias in node.names]
    if node.level:
        parts = module.split(".")
        anchor = parts[: len(parts) - node.level + (1 if package else 0)]
        base = ".".join([*anchor, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    return base, [f"{base}.{alias.name}" for alias in node.names]


def imported(module: str, tree: ast.AST, *, package: bool) -> set[str]:
    """What ``module`` imports anywhere in it: absolute and relative imports resolved to full names (``from
    mediacrawler import x`` imports ``mediacrawler.x``), and import strings (log channel names excepted)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            base, names = _targets(module, node, package=package)
            found.update([base, *names] if base else names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and IMPORT_STRING.fullmatch(node.value):
            found.add(node.value)
    loggers = {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call)
               and getattr(n.func, "attr", None) == "getLogger" and n.args and isinstance(n.args[0], ast.Constant)}
    return found - loggers


def package_sources(root: Path) -> dict[str, tuple[str, bool]]:
    """Every module of the package in directory ``root`` (its name is the directory's); directories without an
    ``__init__.py`` (a build/ left by packaging) hold none."""
    return {".".join((root.name, *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"):
            (p.read_text("utf-8"), p.name == "__init__.py") for p in sorted(root.rglob("*.py"))
            if all((d / "__init__.py").is_file() for d in p.parents if d.is_relative_to(root))}


def upward_imports(sources: Sources) -> set[tuple[str, str]]:
    """(importer, imported) for every import of a layer above the importer's."""
    found = set()
    for module, (source, package) in sources.items():
        mine = layer(module)
        if mine is None or module == "mediacrawler.settings":  # settings: the wiring point, checked on its own
            continue
        for target in imported(module, ast.parse(source), package=package):
            other = layer(target)
            if other is not None and other > mine:
                found.add((module, target))
    return found


def sandbox_imports(sources: Sources) -> set[tuple[str, str]]:
    """(module, name) for every import of the sandbox (mediacrawler_sandbox, a test double) in the product, by an
    import statement (anywhere in it) or an import string."""
    found = set()
    for module, (source, package) in sources.items():
        tree = ast.parse(source)
        names = imported(module, tree, package=package) | {
            n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        found.update((module, name) for name in names if re.fullmatch(r"mediacrawler_sandbox(\.\w+)*", name))
    return found


def settings_problems(source: str) -> list[str]:
    """What is wrong with the import strings of a settings module's source: a string outside the settings of
    :data:`SETTING_LAYERS` and the value parsers of declarations, one in the wrong package for its setting, a
    value parser above :data:`PARSER_MAX_LAYER`."""
    problems = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name, value, annotation = node.targets[0].id, node.value, None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name, value, annotation = node.target.id, node.value, node.annotation
        else:
            continue
        for string in _import_strings(annotation):
            if (layer(string) or 0) > PARSER_MAX_LAYER:
                problems.append(f"{name}: the value parser {string} is above the layer of distributed/")
        for string in _import_strings(value):
            allowed = SETTING_LAYERS.get(name)
            if allowed is None:
                problems.append(f"{name}: names {string} but is not in SETTING_LAYERS")
            elif string.split(".")[1] not in allowed:
                problems.append(f"{name}: {string} is not in {', '.join(sorted(allowed))}")
    return problems


def _import_strings(node: ast.AST | None) -> Iterator[str]:
    for n in ast.walk(node) if node is not None else ():
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and IMPORT_STRING.fullmatch(n.value):
            yield n.value


def module_level_imports(module: str, source: str, *, package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that importing ``module`` imports: statements run at import time (class bodies,
    ``try``, ``if`` included), not those inside functions nor under ``if TYPE_CHECKING:``. ``from p import x``
    imports ``p.x`` when that is a module, else ``p``."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                base, names = _targets(module, node, package=package)
                for name in names:
                    if name in known:
                        found.add(name)
                    elif base in known:
                        found.add(base)
                    elif not base and name.rsplit(".", 1)[0] in known:  # import p.x where x is no module
                        found.add(name.rsplit(".", 1)[0])
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            else:
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    children = getattr(node, field, None) or []
                    visit([c for c in children if isinstance(c, ast.stmt)])
                    for child in children:  # except handlers and match cases hold statements in their body
                        if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                            visit(child.body)

    visit(ast.parse(source).body)
    return found - {module}


def import_cycles(sources: Sources) -> list[list[str]]:
    """The import cycles among ``sources`` (module-level imports only): each strongly connected component of more
    than one module, sorted."""
    known = set(sources)
    graph = {m: module_level_imports(m, s, package=p, known=known) for m, (s, p) in sources.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):  # Tarjan's algorithm, iterative (bounded by the graph's size)
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


# --- the checks on this repository -------------------------------------------------------------------------------


def test_every_package_has_a_layer() -> None:
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
            if (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert tops - {name for names in LAYERS for name in names} == set()


def test_no_module_imports_a_layer_above_it() -> None:
    assert upward_imports(package_sources(PACKAGE)) == KNOWN


def test_the_product_imports_the_sandbox_only_in_the_demo_command() -> None:
    """Only ``mediacrawler demo`` runs the sandbox, and imports it inside the command (it is not installed with
    the product): no module-level import of it anywhere."""
    sources = package_sources(PACKAGE)
    assert {module for module, _ in sandbox_imports(sources)} == {"mediacrawler.demo"}
    top_level = module_level_imports("mediacrawler.demo", sources["mediacrawler.demo"][0], package=False,
                                     known=set(package_sources(SANDBOX)))
    assert top_level == set()


def test_every_import_string_of_settings_loads_and_sits_in_its_settings_layer() -> None:
    source = (PACKAGE / "settings.py").read_text("utf-8")
    assert settings_problems(source) == []
    strings = set(_import_strings(ast.parse(source)))
    assert len(strings) > 20
    for name in sorted(strings):
        try:
            load_object(name)  # an object: a component, a handler, an exporter
        except NameError:
            importlib.import_module(name)  # a module (COMMANDS_MODULE, SPIDER_MODULES); raises if it names nothing


def test_no_import_cycle_in_mediacrawler_nor_in_the_sandbox() -> None:
    product, sandbox = package_sources(PACKAGE), package_sources(SANDBOX)
    assert len(product) > 100 and len(sandbox) > 25
    assert import_cycles(product) == []
    assert import_cycles(sandbox) == []


# --- each check catches a planted violation ----------------------------------------------------------------------


def test_the_checks_see_relative_package_and_string_imports() -> None:
    tree = ast.parse("from . import store\nfrom ..spiders import _base\nfrom mediacrawler import cli\n"
                     "X = 'mediacrawler.commands.crawl.Command'\n"
                     "log = logging.getLogger('mediacrawler.spiders')\n")
    found = imported("mediacrawler.media.index", tree, package=False)
    assert {"mediacrawler.media.store", "mediacrawler.spiders._base", "mediacrawler.cli",
            "mediacrawler.commands.crawl.Command"} <= found
    assert "mediacrawler.spiders" not in found


def test_upward_imports_are_caught_in_every_form() -> None:
    planted = {
        "mediacrawler.media.index": ("def f():\n    from ..spiders import _base\n", False),
        "mediacrawler.media": ("from mediacrawler import pipelines\n", True),
        "mediacrawler.parsers.weibo": ("from . import weibo_api\nfrom .. import media\n", False),
        "mediacrawler.items": ("X = 'mediacrawler.extensions.marks.MarkExtension'\n", False),
        "mediacrawler.spiders.weibo": ("from mediacrawler.pipelines import dedupe\nimport mediacrawler.cache\n",
                                       False),  # lower layers: allowed
    }
    assert upward_imports(planted) == {
        ("mediacrawler.media.index", "mediacrawler.spiders"),
        ("mediacrawler.media.index", "mediacrawler.spiders._base"),
        ("mediacrawler.media", "mediacrawler.pipelines"),
        ("mediacrawler.parsers.weibo", "mediacrawler.media"),
        ("mediacrawler.items", "mediacrawler.extensions.marks.MarkExtension"),
    }


def test_a_sandbox_import_is_caught_at_module_level_and_by_string() -> None:
    planted = {
        "mediacrawler.web.app": ("import mediacrawler_sandbox.server\n", False),
        "mediacrawler.commands.get": ("def f():\n    from mediacrawler_sandbox import process\n", False),
        "mediacrawler.settings": ("X = 'mediacrawler_sandbox.world.build_world'\n", False),
        "mediacrawler.spiders.weibo": ("from mediacrawler import sandbox_tools\n", False),
    }
    assert {module for module, _ in sandbox_imports(planted)} == {
        "mediacrawler.web.app", "mediacrawler.commands.get", "mediacrawler.settings"}
    known = {"mediacrawler_sandbox", "mediacrawler_sandbox.server", "mediacrawler_sandbox.process"}
    assert module_level_imports("mediacrawler.web.app", planted["mediacrawler.web.app"][0], package=False,
                                known=known) == {"mediacrawler_sandbox.server"}
    assert module_level_imports("mediacrawler.commands.get", planted["mediacrawler.commands.get"][0],
                                package=False, known=known) == set()


def test_settings_strings_out_of_their_layer_are_caught() -> None:
    planted = (
        "ITEM_PIPELINES = {'mediacrawler.pipelines.dedupe.DedupePipeline': 1,\n"
        "                  'mediacrawler.extensions.marks.MarkExtension': 2}\n"
        "EXTENSIONS = {'mediacrawler.extensions.marks.MarkExtension': 1}\n"
        "DOWNLOAD_HANDLERS = {'http': 'mediacrawler.media.store.Handler'}\n"
        "SOMETHING_NEW = 'mediacrawler.cache.redis.RedisCache'\n"
        "RATE: Annotated[dict, Parsed('mediacrawler.distributed.limiter.parse_rate', 'a rate')] = {}\n"
        "BAD: Annotated[str, Parsed('mediacrawler.spiders._base.parse', 'x')] = ''\n"
        "LOG_LEVEL = 'mediacrawler is not an import string'\n"
    )
    assert settings_problems(planted) == [
        "ITEM_PIPELINES: mediacrawler.extensions.marks.MarkExtension is not in pipelines",
        "DOWNLOAD_HANDLERS: mediacrawler.media.store.Handler is not in handlers",
        "SOMETHING_NEW: names mediacrawler.cache.redis.RedisCache but is not in SETTING_LAYERS",
        "BAD: the value parser mediacrawler.spiders._base.parse is above the layer of distributed/",
    ]


def test_import_cycles_are_found_among_module_level_imports_only() -> None:
    planted = {
        "p": ("", True),
        "p.a": ("from p import b\n", False),
        "p.b": ("class B:\n    from .c import C\n", False),
        "p.c": ("try:\n    import p.a\nexcept ImportError:\n    pass\n", False),
        "p.d": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.e import E\n", False),
        "p.e": ("from .d import D\n\n\ndef f():\n    from p import d\n", False),
        "p.f": ("from . import f\n", False),  # itself: no cycle of two
    }
    assert import_cycles(planted) == [["p.a", "p.b", "p.c"]]
    planted["p.d"] = ("from p.e import E\n", False)
    assert import_cycles(planted) == [["p.a", "p.b", "p.c"], ["p.d", "p.e"]]
