"""`palw`: a thin dispatcher; each command module adds its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys

from pytest_palw import __version__
from pytest_palw.errors import PalwError

# Each has register(subparsers); a module not written yet is skipped, a broken one is not.
COMMAND_MODULES = ("pytest_palw.cli.build", "pytest_palw.cli.models",
                   "pytest_palw.cli.certify", "pytest_palw.cli.mutants", "pytest_palw.cli.report",
                   "pytest_palw.cli.diff", "pytest_palw.cli.verify")


def _command_modules():
    for name in COMMAND_MODULES:
        try:
            yield importlib.import_module(name)
        except ModuleNotFoundError as error:
            # Skip only when this module (or its package) is absent; a missing import inside
            # an existing module is a real bug and must show.
            if error.name != name and not name.startswith(f"{error.name}."):
                raise


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="palw", description="pytest-palw: build and certify a "
                                     "PALW-patched llama.cpp runtime")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _command_modules():
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PalwError as error:
        print(f"palw: error: {_one_line(str(error))}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("palw: interrupted", file=sys.stderr)
        return 130


def _one_line(message: str) -> str:
    return " ".join(message.split())
