"""`python -m attnc ...`: the same command as the `attnc` console script."""
import sys

from attnc.cli import main

sys.exit(main())
