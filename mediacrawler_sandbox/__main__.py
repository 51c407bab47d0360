"""``python -m mediacrawler_sandbox --port 0 …``: see :func:`mediacrawler_sandbox.server.main`."""

import sys

from .server import main

if __name__ == "__main__":
    sys.exit(main())
