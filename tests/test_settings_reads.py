"""Settings are read one way (docs/architecture.md, "Reading settings"): a setting that mediacrawler/settings.py
defines is read with ``config.setting(settings, "NAME")`` (its type and default from there); a Scrapy setting it
does not define is read with Scrapy's getter and no default (Scrapy's own default_settings has it). No inline
default anywhere (a getter's second argument, ``or "value"`` after a read), no ``defaults.X`` read and no import
of the settings module outside config.py: a keyword default of a function that tests call without settings is
``config.default("NAME")``. The checks read the package's source, so they fail on a new one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import mediacrawler
from mediacrawler import settings as project_settings

PACKAGE = Path(mediacrawler.__file__).resolve().parent
#: getwithbase is left out: it merges a component dict with its _BASE, as Scrapy reads them.
GETTERS = {"get", "getbool", "getint", "getfloat", "getlist", "getdict", "getdictorlist"}
SETTING_NAME = re.compile(r"[A-Z][A-Z0-9_]*[A-Z0-9]")
DEFINED = {name for name in vars(project_settings) if SETTING_NAME.fullmatch(name)}
#: Where a getter reads the environment, not settings.
ENVIRON = {"os.environ", "environ", "env"}


def _is_read(node: ast.AST) -> bool:
    """Whether *node* reads a setting: ``setting(settings, …)`` or a settings getter given a setting's name."""
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Name) and node.func.id in ("setting", "default"):
        return True
    if not (isinstance(node.func, ast.Attribute) and node.func.attr in GETTERS and node.args):
        return False
    if ast.unparse(node.func.value) in ENVIRON:
        return False
    first = node.args[0]
    if isinstance(first, ast.JoinedStr):  # a name made at run time (``f"{platform}_MEDIA_REFERER"``)
        return ast.unparse(node.func.value).endswith("settings")
    return (isinstance(first, ast.Constant) and isinstance(first.value, str)
            and bool(SETTING_NAME.fullmatch(first.value)))


def problems(module: str, tree: ast.AST) -> list[str]:
    """Each read of *module* that breaks the rule, as ``line: what``."""
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if _is_read(node):
            assert isinstance(node, ast.Call)
            if isinstance(node.func, ast.Name) and node.func.id == "setting":
                first = node.args[1] if len(node.args) > 1 else node.args[0]
            else:
                first = node.args[0] if node.args else ast.Constant(None)
            name = first.value if isinstance(first, ast.Constant) else None
            if isinstance(node.func, ast.Name) and node.func.id == "default":
                if name is None or name not in DEFINED:
                    found.append(f"{line}: default() of a name settings.py does not define")
            elif isinstance(node.func, ast.Name):
                if len(node.args) != 2 or node.keywords:
                    found.append(f"{line}: setting() takes the settings and a name")
                elif name is not None and name not in DEFINED:
                    found.append(f"{line}: setting({name}) is not defined in settings.py")
            elif name in DEFINED:
                found.append(f"{line}: {name} is defined in settings.py: read it with config.setting()")
            elif len(node.args) > 1 or node.keywords:
                found.append(f"{line}: an inline default in {ast.unparse(node)}")
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and _is_read(node.values[0]):
            # ``or None`` / ``or ""`` only make an empty value one kind of empty; anything else is a default.
            if any(isinstance(v, ast.Constant) and v.value not in (None, "") for v in node.values[1:]):
                found.append(f"{line}: an inline default in {ast.unparse(node)}")
        elif (isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("settings")
              and isinstance(node.slice, ast.Constant) and node.slice.value in DEFINED):
            found.append(f"{line}: {ast.unparse(node)}: read it with config.setting()")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "defaults":
            found.append(f"{line}: defaults.{node.attr}: read it with config.setting()")
        elif module != "mediacrawler.config" and (
                (isinstance(node, ast.ImportFrom) and node.module == "mediacrawler"
                 and any(a.name == "settings" for a in node.names))
                or (isinstance(node, (ast.ImportFrom, ast.Import)) and any(
                    name == "mediacrawler.settings" for name in
                    ([node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names])))):
            found.append(f"{line}: imports the settings module: read settings with config.setting()")
    return found


def test_settings_are_read_one_way() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "settings.py":
            continue
        module = ".".join(("mediacrawler", *path.relative_to(PACKAGE).with_suffix("").parts))
        each = problems(module.removesuffix(".__init__"), ast.parse(path.read_text("utf-8")))
        if each:
            found[str(path.relative_to(PACKAGE))] = each
    assert found == {}


def test_the_check_sees_each_way_round_the_rule() -> None:
    tree = ast.parse('a = settings.getint("DOWNLOAD_DELAY")\n'          # defined: setting()
                     'b = crawler.settings.getbool("LOGSTATS_X", True)\n'  # an inline default
                     'c = settings.get("CHECKPOINT_DIR") or "checkpoints"\n'
                     'd = defaults.MEDIA_MAXSIZE\n'
                     'from mediacrawler import settings as defaults\n'
                     'e = setting(settings, "NOT_A_SETTING")\n'
                     'f = self.settings.get(f"{platform}_MEDIA_REFERER", "")\n'
                     'def g(size: int = default("NOT_A_SETTING")) -> None: ...\n'
                     'h = crawler.settings["CACHE_KEY_PREFIX"]\n')
    assert sorted(int(p.split(":")[0]) for p in problems("mediacrawler.x", tree)) == [1, 2, 3, 3, 4, 5, 6, 7, 8, 9]
    fine = ast.parse('a = setting(settings, "DOWNLOAD_DELAY")\nb = crawler.settings.getfloat("MEMUSAGE_LIMIT_MB")\n'
                     'c = os.environ.get("REDIS_URL", "")\nd = setting(s, "REDIS_URL") or None\n'
                     'def g(size: int = default("MEDIA_SEGMENT_SIZE")) -> None: ...\n')
    assert problems("mediacrawler.x", fine) == []
