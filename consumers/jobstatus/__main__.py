"""`python -m consumers.jobstatus`: the job status service alone (same flags as the CLI)."""

import argparse
import logging
import sys

from consumers.jobstatus.app import serve
from consumers.jobstatus.config import JobStatusSettings, add_arguments

parser = argparse.ArgumentParser(prog="python -m consumers.jobstatus")
add_arguments(parser)
logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
sys.exit(serve(JobStatusSettings.from_env_and_args(parser.parse_args())))
