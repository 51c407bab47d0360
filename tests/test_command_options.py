"""The settings of a ``mediacrawler`` command (mediacrawler/commands/options.py): mediacrawler's own settings from a
directory with no scrapy.cfg, a scrapy.cfg's module where there is one, ``-s NAME=VALUE`` at command-line priority,
and one line saying where a missing directory was looked for."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from scrapy.exceptions import UsageError

from mediacrawler.commands.options import command_settings, missing_dir


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no scrapy.cfg (nor one of the user's), no SCRAPY_SETTINGS_MODULE."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.setenv("SCRAPY_SETTINGS_MODULE", "placeholder")  # recorded, so the test's own value is undone
    monkeypatch.delenv("SCRAPY_SETTINGS_MODULE")
    return tmp_path


def test_without_scrapy_cfg_the_project_settings_are_mediacrawlers(elsewhere: Path) -> None:
    settings = command_settings()
    assert settings.get("BOT_NAME") == "mediacrawler"
    assert settings.get("CHECKPOINT_DIR") == "checkpoints"


def test_s_pairs_win_at_command_line_priority(elsewhere: Path) -> None:
    settings = command_settings(["CHECKPOINT_DIR=/srv/c", "LOG_LEVEL=WARNING", "EMPTY="])
    assert settings.get("CHECKPOINT_DIR") == "/srv/c" and settings.getpriority("CHECKPOINT_DIR") == 40
    assert settings.get("LOG_LEVEL") == "WARNING" and settings.get("EMPTY") == ""


@pytest.mark.parametrize("pair", ["CHECKPOINT_DIR", "=x"])
def test_a_pair_that_is_not_name_value_is_a_usage_error(elsewhere: Path, pair: str) -> None:
    with pytest.raises(UsageError, match="expected NAME=VALUE"):
        command_settings([pair])


def test_a_scrapy_cfg_names_the_project(elsewhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (elsewhere / "scrapy.cfg").write_text("[settings]\ndefault = mine_settings\n", "utf-8")
    (elsewhere / "mine_settings.py").write_text('BOT_NAME = "mine"\n', "utf-8")
    monkeypatch.setattr(sys, "path", list(sys.path))  # init_env appends the project directory
    monkeypatch.delitem(sys.modules, "mine_settings", raising=False)
    assert command_settings().get("BOT_NAME") == "mine"


def test_missing_dir_says_where_it_looked(elsewhere: Path) -> None:
    assert missing_dir(elsewhere, setting="CHECKPOINT_DIR") is None
    line = missing_dir("checkpoints", setting="CHECKPOINT_DIR")
    assert line == (f"{elsewhere / 'checkpoints'} does not exist (CHECKPOINT_DIR=checkpoints, relative to "
                    f"{elsewhere}); run from the crawl's directory or give -s CHECKPOINT_DIR=…")
    assert missing_dir("/nowhere/x", setting="FILES_STORE", given="--store /nowhere/x") == (
        "/nowhere/x does not exist (--store /nowhere/x); run from the crawl's directory or give -s FILES_STORE=…")
