"""`knowledge adapt`: fine-tune the embedding model on the knowledge base alone (docs/adapt.md)."""

import argparse
import sys

from components.errors import EXIT_OK
from pipelines.cli.common import UsageError, add_overrides, command_parser, load

NAME = "adapt"


def add_parser(sub) -> None:
    parser = command_parser(
        sub,
        NAME,
        help="fine-tune the embedding model on the knowledge base alone (no labels), for embedder.model=DIR",
        description="Fine-tune embedder.model (the packaged all-MiniLM-L6-v2) on pairs made from the knowledge base "
        "alone: title -> section, heading path -> section, first sentence -> rest, with in-batch negatives and "
        "a sibling document's hard negative. Resumable (a run writes DIR.partial, moved to DIR once complete), deterministic with "
        "--seed; writes a model folder with a model card. Use it with embedder.model=DIR.",
    )
    parser.add_argument("--kb", metavar="DIR", help="knowledge base folder (default: kb.path)")
    parser.add_argument("--epochs", type=int, default=1, metavar="N", help="training epochs (default 1)")
    parser.add_argument(
        "--output", metavar="DIR", help="model folder (default: paths.state_dir/models/adapted-<kb folder name>)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write the model into a folder adapt did not write (its files of the same names are replaced, "
        "other files are left alone)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="B", help="pairs per batch (default 32)")
    parser.add_argument("--max-steps", type=int, metavar="N", help="stop after N steps (default: all epochs)")
    parser.add_argument(
        "--guard",
        action="append",
        metavar="FILE",
        help="off-topic query set the calibration is fitted on and the verdict judges with (repeatable; "
        "default eval/offtopic-alerts.jsonl)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--labels",
        metavar="FILE",
        help="labelled queries (knowledge eval JSONL): the train split adds query -> document pairs, the check "
        "split (a stable hash of the query) is held out and judges base against adapted model",
    )
    source.add_argument(
        "--labels-from-store",
        action="store_true",
        help="the labels of the trace store (trace.db_url) instead of a file, merged as `knowledge labels export` "
        "merges them; then as with --labels FILE",
    )
    parser.add_argument(
        "--labels-only",
        action="store_true",
        help="train on the labelled pairs alone, not on the knowledge base's own (minutes instead of an hour)",
    )
    parser.add_argument(
        "--calibration",
        choices=("packaged_decides", "score_map"),
        default="packaged_decides",
        help="how the model's similarities are made to mean what the thresholds mean: the packaged model decides "
        "answer vs no evidence while the adapted one ranks (default), or thresholds mapped to the adapted scale",
    )
    parser.add_argument(
        "--no-verdict", action="store_true", help="write the calibration but skip judging base against adapted model"
    )
    add_overrides(parser)


def run(args: argparse.Namespace) -> int:
    for name in ("epochs", "batch_size", "max_steps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} {value} must be 1 or more")
    cfg = load(args.overrides)  # a bad config fails before the slow imports below

    from pipelines.adapt.run import AdaptOptions, adapt_model, default_output
    from pipelines.adapt.verdict import NotRecommendedError

    options = AdaptOptions(
        kb_path=args.kb,
        output=args.output,
        epochs=args.epochs,
        seed=args.seed,
        batch_size=args.batch_size,
        max_steps=args.max_steps,
        overwrite=args.overwrite,
        progress_bar=sys.stderr.isatty(),
        overrides=list(args.overrides),
        guard_sets=args.guard,
        labels=args.labels,
        labels_from_store=args.labels_from_store,
        labels_only=args.labels_only,
        calibrate=True,
        verdict=not args.no_verdict,
        calibration_method=args.calibration,
    )
    try:
        adapt_model(cfg, options, say=lambda line: print(line, flush=True))
    except NotRecommendedError:  # a verdict, printed above with its reason: an answer, not a failure
        output = args.output or default_output(cfg, args.kb or cfg.kb.path)
        print(f"The adapted model stays in {output}, marked as not recommended in its card; keep the packaged model.")
    return EXIT_OK
