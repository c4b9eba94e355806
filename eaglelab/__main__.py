import sys

from eaglelab.cli import main

sys.exit(main())
