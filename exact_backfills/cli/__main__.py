import sys

from exact_backfills.cli import main

sys.exit(main())
