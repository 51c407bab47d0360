"""Packaging: the source distribution builds and installs offline, and carries what setup.py reads; neither it
nor what it installs holds the platform sandbox (mediacrawler_sandbox/, its own distribution for the tests).

Built from a copy of the tree (setup.py writes *.egg-info next to itself), with the venv's setuptools and no
network (``--no-build-isolation``, ``--no-deps``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Where the sandbox's files would be in an archive or an install (it was mediacrawler/sandbox/ before).
SANDBOX = ("mediacrawler_sandbox", "mediacrawler/sandbox", "mediacrawler-sandbox")


@pytest.mark.slow
def test_sdist_carries_the_pins_and_installs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", ".pytest_cache", "*.egg-info", "tests", "benchmarks", "files", "output", "build",
        "dist"))
    built = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path / "dist")],
                           cwd=src, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    (sdist,) = (tmp_path / "dist").glob("mediacrawler-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"requirements.txt", "setup.py", "mediacrawler/settings.py", "mediacrawler/media/spool.py"} <= names
    assert (src / "mediacrawler_sandbox" / "server.py").is_file()  # in the copy, so leaving it out is setup.py's
    assert not [n for n in names if n.startswith(SANDBOX)], sorted(n for n in names if n.startswith(SANDBOX))

    target = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                                "--no-index", "--target", str(target), str(sdist)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert (target / "mediacrawler" / "settings.py").is_file()
    installed_files = [p.relative_to(target).as_posix() for p in target.rglob("*")]
    assert not [n for n in installed_files if n.startswith(SANDBOX)], installed_files
    (record,) = target.glob("mediacrawler-*/RECORD")
    assert "sandbox" not in record.read_text()
    web = target / "mediacrawler" / "web"  # mediacrawler web reads its templates and static files from the package
    assert (web / "templates" / "post.html").is_file() and (web / "static" / "app.js").is_file()
    (entry_points,) = target.glob("mediacrawler-*/entry_points.txt")
    text = entry_points.read_text()
    assert "settings = mediacrawler.settings" in text and "mediacrawler = mediacrawler.cli:main" in text
    (metadata,) = target.glob("mediacrawler-*/METADATA")
    assert "Requires-Dist: scrapy==2.19.0" in metadata.read_text()

    # That install's `mediacrawler demo`, run as a user would from elsewhere: the sandbox is not there. With -S no
    # .pth runs, so neither this checkout's editable installs (the product's, the sandbox's) nor its root can be
    # imported; the dependencies come from the venv's site-packages.
    path = [str(target), *(p for p in sys.path if p.endswith("site-packages"))]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    demo = subprocess.run([sys.executable, "-S", "-m", "mediacrawler", "demo", "--out", str(elsewhere / "out")],
                          cwd=elsewhere, env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
                          capture_output=True, text=True, timeout=120)
    assert demo.returncode == 2, demo.stderr[-3000:]
    assert demo.stdout == "" and demo.stderr.splitlines() == [
        "mediacrawler demo: the sandbox (mediacrawler_sandbox) is not installed: run `make demo` from a source "
        "checkout of mediacrawler"]
    assert not (elsewhere / "out").exists()
