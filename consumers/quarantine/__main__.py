"""`python -m consumers.quarantine`: the quarantine service alone (same flags as the CLI)."""

import argparse
import logging
import sys

from consumers.quarantine.app import serve
from consumers.quarantine.config import QuarantineSettings, add_arguments

parser = argparse.ArgumentParser(prog="python -m consumers.quarantine")
add_arguments(parser)
logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
sys.exit(serve(QuarantineSettings.from_env_and_args(parser.parse_args())))
