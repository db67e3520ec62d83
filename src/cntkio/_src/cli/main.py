"""The ``cntkio`` command line: the parser and the dispatch to the commands, one module each — ``inspect`` and
``validate`` (:mod:`.check`), ``convert``, ``explain``, ``stats``, ``read``.

Exit status: 0 valid (converted), 1 errors found in the data, 2 usage error, unreadable file or a file that is not
data cntkio reads (``cntkio inspect notes.md``: it says what the file seems to be).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from cntkio._src.cli import check, convert, explain, read, stats
from cntkio._src.cli.common import EXIT_INVALID, cannot_read, fail, format_error
from cntkio._src.common.errors import ConfigError, FormatError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cntkio", description="Tools for CNTK data files.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    check.add_commands(commands)  # inspect, validate
    convert.add_command(commands)
    explain.add_command(commands)
    stats.add_command(commands)
    read.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cntkio`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    logger = logging.getLogger("cntkio")
    level = logger.level
    logger.setLevel(logging.ERROR)  # every problem is in the report: no log lines on stderr
    try:
        return int(args.handler(args))
    except BrokenPipeError:  # output piped into e.g. `head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_INVALID
    except FormatError as error:  # one no command reported itself (a file an option names): a line, not a traceback
        return fail(args.command, format_error(error))
    except ConfigError as error:
        return fail(args.command, str(error))
    except OSError as error:
        return fail(args.command, cannot_read(error, str(error.filename or "")))
    except KeyboardInterrupt:
        return 130
    finally:
        logger.setLevel(level)
