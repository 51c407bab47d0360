"""Packaging: the source distribution builds and installs offline, and carries what setup.py reads.

Built from a copy of the tree (setup.py writes *.egg-info next to itself), with the venv's setuptools and no
network (``--no-build-isolation``, ``--no-deps``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_sdist_carries_the_pins_and_installs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.egg-info", "tests", "benchmarks", "files", "output", "build", "dist"))
    built = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path / "dist")],
                           cwd=src, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    (sdist,) = (tmp_path / "dist").glob("mediacrawler-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"requirements.txt", "setup.py", "mediacrawler/settings.py", "mediacrawler/media/spool.py"} <= names

    target = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                                "--no-index", "--target", str(target), str(sdist)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert (target / "mediacrawler" / "sandbox" / "server.py").is_file()
    web = target / "mediacrawler" / "web"  # mediacrawler web reads its templates and static files from the package
    assert (web / "templates" / "post.html").is_file() and (web / "static" / "app.js").is_file()
    (entry_points,) = target.glob("mediacrawler-*/entry_points.txt")
    text = entry_points.read_text()
    assert "settings = mediacrawler.settings" in text and "mediacrawler = mediacrawler.cli:main" in text
    (metadata,) = target.glob("mediacrawler-*/METADATA")
    assert "Requires-Dist: scrapy==2.19.0" in metadata.read_text()
