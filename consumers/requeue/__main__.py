"""`python -m consumers.requeue`: the requeue service alone (same flags as the CLI)."""

import argparse
import logging
import sys

from consumers.requeue.app import serve
from consumers.requeue.config import RequeueSettings, add_arguments

parser = argparse.ArgumentParser(prog="python -m consumers.requeue")
add_arguments(parser)
logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
sys.exit(serve(RequeueSettings.from_env_and_args(parser.parse_args())))
