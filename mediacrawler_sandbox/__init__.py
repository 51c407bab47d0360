"""The bundled platform sandbox: a local HTTP test double of the remote platforms (see docs, BRIEF §4).

Run it with ``python -m mediacrawler_sandbox --port 0`` (prints its base URL as the first stdout line), or from
Python with :func:`start_sandbox`. Module map:

- :mod:`.world` / :mod:`.weibo` — pure, deterministic world models (what tests import to compute expectations)
- :mod:`.media` — pure media generators (Pillow images, PyAV MP4, streamed blobs)
- :mod:`.faults`, :mod:`.state` — fault knobs, request log, counters
- :mod:`.server`, :mod:`.httpbase`, :mod:`.weibo_site`, :mod:`.media_site`, :mod:`.control` — the Twisted server
- :mod:`.process` — start/stop a sandbox subprocess and call its control endpoints (stdlib only)

Importing this package never imports Twisted's reactor.
"""

from .process import SandboxError, SandboxProcess, start_sandbox
from .world import World, build_weibo_world, build_world

__all__ = ["SandboxError", "SandboxProcess", "World", "build_weibo_world", "build_world", "start_sandbox"]
