import sys

from assets_pkg.cli import main

sys.exit(main())
