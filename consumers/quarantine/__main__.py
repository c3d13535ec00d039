"""`python -m consumers.quarantine`: the quarantine service alone (same flags as the CLI)."""

import argparse
import logging
import sys

from consumers.quarantine.config import add_arguments
from consumers.quarantine_cli import cmd_run

parser = argparse.ArgumentParser(prog="python -m consumers.quarantine")
add_arguments(parser)
logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
sys.exit(cmd_run(parser.parse_args()))
