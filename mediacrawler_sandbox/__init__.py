"""The platform sandbox: a local HTTP test double of the remote platforms for the tests, benchmarks and ``make
demo`` (its own distribution: never installed with mediacrawler).

``python -m mediacrawler_sandbox --port 0`` prints its base URL first; from Python, :func:`start_sandbox`.
Importing this package never imports Twisted's reactor. Reference: docs/sandbox.md, "__init__.py".
"""

from .process import SandboxError, SandboxProcess, start_sandbox
from .world import World, build_weibo_world, build_world

__all__ = ["SandboxError", "SandboxProcess", "World", "build_weibo_world", "build_world", "start_sandbox"]
