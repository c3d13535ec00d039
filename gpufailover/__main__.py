import sys

from gpufailover.cli import main

sys.exit(main())
