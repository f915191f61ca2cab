"""The `tsvk` command: one entry point, one plain function per subcommand."""
import sys


def main(argv=None) -> int:
    print("tsvk: under construction", file=sys.stderr)
    return 2
