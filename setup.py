"""Packaging: a pip-installable package and a scrapyd egg (scrapyd finds the settings via entry_points)."""

from setuptools import find_packages, setup

with open("requirements.txt", encoding="utf-8") as f:
    install_requires = [line.strip() for line in f if line.strip() and not line.startswith("#")]

setup(
    name="mediacrawler",
    version="0.1.0",
    description="A Scrapy-based crawler for posts, images and videos, resumable and content-addressed.",
    packages=find_packages(include=["mediacrawler", "mediacrawler.*"]),
    # mediacrawler web's templates and its script and stylesheet (read from the package at run time).
    package_data={"mediacrawler.web": ["templates/*.html", "static/*.js", "static/*.css"]},
    python_requires=">=3.11",
    install_requires=install_requires,
    entry_points={
        "scrapy": ["settings = mediacrawler.settings"],
        "console_scripts": ["mediacrawler = mediacrawler.cli:main"],
    },
)
