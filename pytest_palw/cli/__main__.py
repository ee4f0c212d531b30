"""`python -m pytest_palw.cli` is `palw`."""

import sys

from pytest_palw.cli import main

sys.exit(main())
