"""`python -m consumers.jobstatus`: the job status service alone (same flags as the CLI)."""

import argparse
import logging
import sys

from consumers.jobstatus.config import add_arguments
from consumers.status_cli import cmd_run

parser = argparse.ArgumentParser(prog="python -m consumers.jobstatus")
add_arguments(parser)
logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
sys.exit(cmd_run(parser.parse_args()))
