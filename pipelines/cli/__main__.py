"""`python -m pipelines.cli`: the `knowledge` command without its installed script."""

import sys

from pipelines.cli.main import main

sys.exit(main())
