"""``python -m mediacrawler``: the same as the ``mediacrawler`` console script."""

import sys

from mediacrawler.cli import main

sys.exit(main())
