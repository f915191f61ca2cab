"""`tsvk batch`: the archive's answers for a folder or a table of photos, one row per input, resumable."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import defaults
from ..arguments import positive_int
from ..errors import UsageError
from .batch_job import BatchRequest, run_batch
from .sources import DEFAULT_COLUMN
from .tables import OUTPUT_FORMATS


def register(commands) -> None:
    p = commands.add_parser(
        "batch", help="score a folder or a table of photos offline with an archive's serving code (resumable)",
        description="Each input gets one row: its id (its position in the input), its path or URL, and exactly the answer "
                    "(or the error status and code) /predictions gives for the same bytes. Run it again with the same "
                    "arguments after any stop, a kill included, and it finishes the rest: every input ends up in the "
                    "output once.")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--archive", type=Path, help="the .mar to run (built by `tsvk archive`)")
    which.add_argument("--model", help=f"the archive <model>.mar in --model-store (default {defaults.MODEL_STORE})")
    p.add_argument("--model-store", type=Path, default=Path(defaults.MODEL_STORE), help="where --model's archive is")
    p.add_argument("--input", type=Path, required=True,
                   help="a folder of photos (walked in name order), a text file of paths or URLs (one a line), or a "
                        "Parquet/CSV table (.parquet, .csv) with a column of them")
    p.add_argument("--output", type=Path, required=True, help=f"the rows: {' or '.join(OUTPUT_FORMATS)}")
    p.add_argument("--column", default=DEFAULT_COLUMN, help=f"a table's column of paths or URLs (default {DEFAULT_COLUMN})")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", dest="options",
                   help="an answer option sent with every input, as a served request's form field (e.g. "
                        "score_threshold=0.5 for a detector); repeat for more")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="worker processes (default: what `tsvk config` plans for serving the archive here)")
    p.add_argument("--batch", type=positive_int, default=None, help="inputs per worker batch (default: the archive's)")
    p.add_argument("--max-request-mb", type=positive_int, default=defaults.MAX_REQUEST_MB,
                   help=f"inputs larger than this become 413 rows, as served requests would (default {defaults.MAX_REQUEST_MB})")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run on Ray Data instead: a cluster's address (ray://host:10001, or host:port of a node's "
                        "cluster), or `local` for a Ray started in this process; needs `pip install tsvk[ray]`")
    p.set_defaults(func=cmd_batch)


def cmd_batch(args: argparse.Namespace) -> int:
    archive = args.archive or args.model_store / f"{args.model}.mar"
    if not archive.is_file():
        raise UsageError(f"{archive}: no such archive; build it with `tsvk archive` or name one with --archive")
    request = BatchRequest(archive=archive, input=args.input, output=args.output, column=args.column,
                           workers=args.workers, batch=args.batch, options=tuple(args.options),
                           max_request_mb=args.max_request_mb, ray=args.ray, quiet=args.quiet)
    progress = run_batch(request)
    if not args.quiet:
        print(progress.summary())
    return 0
