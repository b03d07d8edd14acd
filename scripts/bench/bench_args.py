"""The benchmark scripts' argument parser (gpu_check.py, pytorch_step.py and the scripts built on its
parser: conv_floor.py, profile_step.py, compare.py's PyTorch side): a bad argument is one line naming
the flag and what was expected, exit 2; no usage block, no traceback. Standard library only.

    p = Parser(prog="conv_floor.py"); p.add_argument("--steps", type=int, default=20)
    a = p.parse_args(); p.at_least(a, "steps", 1)   # "conv_floor.py: --steps 0: expected a whole number >= 1"
"""
import argparse
import sys


class ArgumentExit(SystemExit):
    """Exit status 2 whose str() is the line printed, for a caller that catches it (torch_side.py
    answers a bad request with it and keeps serving)."""

    def __init__(self, line):
        super().__init__(2)
        self.line = line

    def __str__(self):
        return self.line


class Parser(argparse.ArgumentParser):
    """Bad arguments: one line naming the flag, exit 2 (no usage block, no traceback)."""

    def error(self, message):
        line = f"{self.prog}: {message} (--help lists the options)"
        print(line, file=sys.stderr)
        raise ArgumentExit(line)

    def at_least(self, args, name, low):
        """args.<name> (a whole number) is at least `low`, or one line naming --<name>, exit 2."""
        value = getattr(args, name)
        if value < low:
            self.error(f"--{name.replace('_', '-')} {value}: expected a whole number >= {low}")
