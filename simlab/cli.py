"""The `simlab` command line. Bad input (InputError) is one message on stderr and exit code 2 (a traceback only with
--debug). Anything else is a bug in simlab, never disguised as bad input: its traceback, a line saying so, exit 1."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from simlab.errors import InputError

EXIT_INPUT = 2
EXIT_INTERNAL = 1

# Each module in simlab/commands/ adds one subcommand.
COMMANDS = ("run", "ab", "tune", "decide", "replay", "fit", "calibrate", "calibrate_gpu", "report", "loadtest",
            "validate_real")


def build_parser() -> argparse.ArgumentParser:
    from simlab.version import __version__

    parser = argparse.ArgumentParser(prog="simlab", description="Simulate and tune LLM traffic scheduling.")
    parser.add_argument("--version", action="version", version=f"simlab {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"simlab.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted: finished runs are saved; run the same command again to continue", file=sys.stderr)
        return 130
    except OSError as exc:  # the machine, not the input nor simlab: a full disk, a folder without write permission
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as exc:  # noqa: BLE001 - a bug: show where, say what it is
        if args.debug:
            raise
        traceback.print_exc()
        print(f"internal error: {type(exc).__name__}: {exc}. This is a bug in simlab, not a problem with your input; "
              "please report it with the traceback above. Finished runs are saved.", file=sys.stderr)
        return EXIT_INTERNAL
