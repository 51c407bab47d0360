"""``setting(settings, name)``: the one way components read a setting whose default lives in
mediacrawler/settings.py, so that a component built without the project's settings still gets that default."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mediacrawler import settings as defaults

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def setting(settings: BaseSettings, name: str) -> Any:
    """``settings[name]`` as the type of its default in mediacrawler/settings.py (also the value when unset)."""
    default = getattr(defaults, name)
    getter = {bool: settings.getbool, int: settings.getint, float: settings.getfloat, list: settings.getlist}
    return getter.get(type(default), settings.get)(name, default)
