"""`python -m pipelines.cli`: the `knowledge` command without its installed script."""

import sys

from pipelines.cli.entry_point import main

sys.exit(main())
