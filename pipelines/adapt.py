"""
`knowledge adapt`: fine-tune the embedding model on the knowledge base alone, without labels.

Pairs come from `pipelines.adapt_pairs` (title -> section, heading path -> section, first
sentence -> rest, each with a sibling's hard negative); the model is trained with
sentence-transformers' `SentenceTransformerTrainer` and `MultipleNegativesRankingLoss` (in-batch
negatives plus the hard one), batches without duplicate texts. Checkpoints go to
`OUTPUT/checkpoints/`, so an interrupted run resumes where it stopped; the finished model is saved
in `OUTPUT` with a model card (`README.md`) and `adapt.json` saying what it was trained on, and is
used with `embedder.model=OUTPUT`. Design notes: docs/adapt.md.

Usage example:

```python
from pipelines.adapt import AdaptOptions, adapt_model
from pipelines.settings import load_config

result = adapt_model(load_config(), AdaptOptions(kb_path="knowledge/", epochs=1, output="/tmp/kb-model"))
result.output  # then: knowledge index embedder.model=/tmp/kb-model
```
"""

import json
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from transformers import TrainerCallback

from components.common.embedding_models import resolve_model
from components.common.model_folder import ADAPT_RECORD, CALIBRATION_FILE
from components.errors import BadInputError
from pipelines.adapt_labels import LabelSplit, chosen_labels, label_pairs_note, trained_on, with_label_pairs
from pipelines.adapt_pairs import MinedPairs, check_training_source, pairs_from, read_kb
from pipelines.adapt_split import HeldOutSplit, split_held_out
from pipelines.adapt_verdict import checked_guard_sets

CHECKPOINTS = "checkpoints"
RUN_FILE = "run.json"
LOSS_NAME = "MultipleNegativesRankingLoss"
MODEL_CARD_TITLE = "# Knowledge-base adapted embedding model"  # the card's first line marks a folder adapt wrote


class AdaptOutputError(BadInputError):
    """The output folder holds another run's model or checkpoints."""


@dataclass
class AdaptOptions:
    """What `knowledge adapt` was asked for (None: the default)."""

    kb_path: str | None = None
    output: str | None = None
    epochs: int = 1
    seed: int = 0
    batch_size: int = 32
    learning_rate: float = 2e-5
    max_steps: int | None = None
    progress_bar: bool = False
    overwrite: bool = False  # write the model's files into a folder adapt did not write (others are left alone)
    callbacks: list[TrainerCallback] = field(default_factory=list)  # more trainer callbacks (observe or stop a run)
    overrides: list[str] = field(default_factory=list)  # the command's config overrides, for the verdict's pipelines
    guard_sets: list[str] | None = None  # off-topic query files besides the configured guard's (guard.sets)
    labels: str | None = None  # a `knowledge eval` JSONL file: its train split trains, its check split judges
    labels_from_store: bool = False  # the trace store's labels (trace.db_url) instead of a file
    labels_only: bool = False  # train on the labelled pairs alone (the KB still gives their chunks and the index)
    # After training: fit the model's calibration, then judge it against the base model (the CLI does
    # both; the training machinery alone leaves them out).
    calibrate: bool = False
    verdict: bool = False
    calibration_method: str = "packaged_decides"  # or "score_map" (pipelines/adapt_calibration.py)


@dataclass
class AdaptResult:
    output: str
    record: dict[str, Any] = field(default_factory=dict)
    already_done: bool = False


def default_output(cfg: DictConfig, kb_path: str) -> Path:
    """`<state_dir>/models/adapted-<kb folder name>`: beside the index, outside version control."""
    return Path(cfg.paths.state_dir) / "models" / f"adapted-{Path(kb_path).resolve().name or 'kb'}"


def adapt_model(cfg: DictConfig, options: AdaptOptions, say=print) -> AdaptResult:
    """Mine pairs, train (or resume, or find the same run already done) and write the model with its card."""
    kb_path = options.kb_path or cfg.kb.path
    output = Path(options.output) if options.output else default_output(cfg, kb_path)
    check_output_folder(output, options.overwrite)
    check_training_source(kb_path)
    if options.calibrate:
        checked_guard_sets(cfg, options.guard_sets)
    labels = chosen_labels(cfg, options.labels, options.labels_from_store, options.labels_only, say)
    documents, chunks = read_kb(
        kb_path,
        max_tokens=cfg.chunking.max_tokens,
        overlap_tokens=cfg.chunking.overlap_tokens,
        min_tokens=cfg.chunking.min_tokens,
        tokenizer_model=cfg.embedder.model,
    )
    mined = pairs_from(documents, chunks)
    if not mined.pairs:
        raise BadInputError(f"knowledge base {kb_path} gives no training pairs (it needs at least two documents)")
    split = split_held_out(mined, options.seed)  # the verdict's queries: never trained on
    mined = split.training
    settings = {**_settings(cfg, options, kb_path, mined), "held_out_anchors": len(split.held_out)}
    if labels is not None:
        mined = with_label_pairs(cfg, mined, labels, chunks, documents, options.labels_only)
        settings = {**settings, "pairs": mined.counts(), "labels": labels.settings(options.labels_only)}
    done = _finished_record(output)
    if done is not None and not (options.overwrite and done.get("settings") != settings):
        if done.get("settings") != settings:
            raise AdaptOutputError(
                f"{output} holds a model adapted with other settings or another knowledge base: "
                "give another --output, or --overwrite to replace it"
            )
        say(f"{output} already holds this adapted model (same knowledge base and settings): nothing to do")
        if options.calibrate and _calibration_method(output) != options.calibration_method:  # none yet, or another
            calibrate_and_judge(cfg, options, output, split, kb_path, say, labels)
        return AdaptResult(str(output), done, already_done=True)
    result = _train(cfg, options, output, mined, settings, say)
    if options.calibrate:
        calibrate_and_judge(cfg, options, output, split, kb_path, say, labels)
    return result


def calibrate_and_judge(
    cfg: DictConfig,
    options: AdaptOptions,
    output: Path,
    split: HeldOutSplit,
    kb_path: str,
    say,
    labels: LabelSplit | None = None,
):
    """
    Write the model's calibration (docs/adapt.md#calibration), then judge it against the base model
    (on the labels' check split when given, else on the KB's held-out anchors) and mark its card; a
    model that is not recommended stays, and the run ends with NotRecommendedError.
    """
    from pipelines.adapt_calibration import calibration_lines, fit_calibration, packaged_decides, write_calibration
    from pipelines.adapt_verdict import NotRecommendedError, guard_texts, judge, judged_queries

    guard_sets = checked_guard_sets(cfg, options.guard_sets)
    names = [query_set.path for query_set in guard_sets]
    if options.calibration_method == "score_map":
        calibration = fit_calibration(cfg, str(output), split.training, guard_texts(guard_sets), names)
    else:
        calibration = packaged_decides(cfg, names)
    path = write_calibration(output, calibration)
    say(f"Calibration ({calibration['method']}) written to {path}: {calibration_lines(calibration)}")
    if not options.verdict:
        return None
    sets = {**judged_queries(split, labels), **{s.name: s.queries for s in guard_sets}}
    say(f"Judging base against adapted model on {', '.join(f'{n} ({len(q)})' for n, q in sets.items())} ...")
    verdict = judge(cfg, options.overrides, str(output), kb_path, sets)
    for line in verdict.lines():
        say(line)
    write_calibration(output, {**calibration, "verdict": verdict.as_dict()})
    card = output / "README.md"
    head = (
        card.read_text(encoding="utf-8").split(VERDICT_HEADING, 1)[0].rstrip("\n") + "\n"
    )  # a new verdict replaces the last
    card.write_text(head + verdict_section(verdict.lines()), encoding="utf-8")
    if not verdict.recommended:
        raise NotRecommendedError(
            f"the adapted model is not recommended: {verdict.reason} "
            f"(it stays in {output}, marked as not recommended in its model card)"
        )
    return verdict


VERDICT_HEADING = "\n## Verdict\n"


def verdict_section(lines: list[str]) -> str:
    return "\n".join(["", "## Verdict", "", "```", *lines, "```", ""])


def _settings(cfg: DictConfig, options: AdaptOptions, kb_path: str, mined: MinedPairs) -> dict[str, Any]:
    """Everything that decides the trained weights: a resumed or repeated run must match it."""
    return {
        "base_model": cfg.embedder.model,
        "kb_path": str(Path(kb_path).resolve()),
        "kb_fingerprint": mined.fingerprint,
        "pairs": mined.counts(),
        "chunking": [cfg.chunking.max_tokens, cfg.chunking.overlap_tokens, cfg.chunking.min_tokens],
        "epochs": options.epochs,
        "seed": options.seed,
        "batch_size": options.batch_size,
        "learning_rate": options.learning_rate,
        "max_steps": options.max_steps,
        "loss": LOSS_NAME,
    }


def check_output_folder(output: Path, overwrite: bool) -> None:
    """
    Refuse, before any work, an output that is a file, or a folder holding files adapt did not
    write (a user's README.md or config.json would be overwritten by the model's), unless
    `overwrite`. A `checkpoints` folder adapt did not start is refused even then: it is removed at
    the end of a run.
    """
    if output.exists() and not output.is_dir():
        raise AdaptOutputError(f"--output {output} is a file, not a folder: give a new or empty folder")
    if not output.is_dir() or _written_by_adapt(output):
        return
    checkpoints = output / CHECKPOINTS
    if checkpoints.exists() and not (checkpoints / RUN_FILE).is_file():
        raise AdaptOutputError(
            f"{checkpoints} was not written by adapt (adapt removes it after training): move it away"
        )
    if not overwrite:
        raise AdaptOutputError(
            f"--output {output} holds files adapt did not write: give a new or empty folder, "
            "or --overwrite to write the model's files there (other files are left alone)"
        )


def _written_by_adapt(folder: Path) -> bool:
    """Empty, a model folder whose card adapt wrote, or an interrupted run's checkpoints alone."""
    entries = {entry.name for entry in folder.iterdir()}
    if not entries:
        return True
    if entries == {CHECKPOINTS}:
        return (folder / CHECKPOINTS / RUN_FILE).is_file()
    try:
        with (folder / "README.md").open(encoding="utf-8") as card:
            return card.readline().rstrip("\n") == MODEL_CARD_TITLE
    except (OSError, UnicodeDecodeError):
        return False


def _finished_record(output: Path) -> dict[str, Any] | None:
    record = output / ADAPT_RECORD
    if not record.is_file():
        return None
    try:
        return json.loads(record.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _calibration_method(output: Path) -> str | None:
    try:
        return json.loads((output / CALIBRATION_FILE).read_text(encoding="utf-8")).get("method")
    except (OSError, ValueError, AttributeError):
        return None


def _check_resumable(checkpoints: Path, settings: dict[str, Any], overwrite: bool) -> None:
    """Checkpoints of another run (other data or settings) must not be resumed into this one."""
    run_file = checkpoints / RUN_FILE
    if run_file.is_file() and json.loads(run_file.read_text(encoding="utf-8")) != settings:
        if not overwrite:
            raise AdaptOutputError(
                f"{checkpoints} holds checkpoints of a run with other settings or another knowledge base: "
                "give another --output, or --overwrite to start again"
            )
        shutil.rmtree(checkpoints)  # adapt's own checkpoints (run.json says so) of the run being replaced
    checkpoints.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")


def _train(
    cfg: DictConfig, options: AdaptOptions, output: Path, mined: MinedPairs, settings: dict[str, Any], say
) -> AdaptResult:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )
    from transformers import set_seed
    from transformers.trainer_utils import get_last_checkpoint

    checkpoints = output / CHECKPOINTS
    _check_resumable(checkpoints, settings, options.overwrite)
    set_seed(options.seed)  # before the model loads: anything it initialises draws from the seeded generators
    model = SentenceTransformer(resolve_model(cfg.embedder.model), device=cfg.embedder.device)
    dataset = Dataset.from_dict(
        {
            "anchor": [p.anchor for p in mined.pairs],
            "positive": [p.positive for p in mined.pairs],
            "negative": [p.negative for p in mined.pairs],
        }
    )
    steps = planned_steps(len(mined.pairs), options)
    resume = get_last_checkpoint(str(checkpoints))
    counts = ", ".join(f"{kind} {count}" for kind, count in mined.counts().items())
    say(
        f"Adapting {cfg.embedder.model} to {settings['kb_path']} ({mined.documents} documents, {mined.chunks} chunks): "
        f"{len(mined.pairs)} pairs ({counts}), {steps} steps of {options.batch_size}"
    )
    say(
        f"  estimated training time: {_format_duration(estimate_seconds(model, mined, options, steps))} on this machine"
    )
    if resume:
        say(f"  resuming from {resume}")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(checkpoints),
        num_train_epochs=options.epochs,
        max_steps=options.max_steps if options.max_steps else -1,
        per_device_train_batch_size=options.batch_size,
        learning_rate=options.learning_rate,
        warmup_steps=max(1, steps // 10),
        seed=options.seed,
        data_seed=options.seed,
        full_determinism=True,
        batch_sampler=BatchSamplers.NO_DUPLICATES,  # a duplicate text in a batch would be a false negative
        save_strategy="steps",
        save_steps=max(1, min(50, steps // 4)),
        save_total_limit=1,
        logging_steps=max(1, steps // 10),
        report_to="none",
        use_cpu=True,
        disable_tqdm=not options.progress_bar,
        dataloader_num_workers=0,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        loss=MultipleNegativesRankingLoss(model),
        callbacks=[*options.callbacks, *([] if options.progress_bar else [_ProgressLines(say)])],
    )
    _quiet(trainer)
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    seconds = round(time.perf_counter() - started, 1)
    record = {
        "settings": settings,
        "documents": mined.documents,
        "chunks": mined.chunks,
        "steps": trainer.state.global_step,
        "resumed_from": Path(resume).name if resume else None,
        "train_seconds": seconds,
        "final_loss": _last_loss(trainer.state.log_history),
        "finished_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    model.save(str(output), create_model_card=False)
    (output / "README.md").write_text(model_card(record), encoding="utf-8")
    (output / ADAPT_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(checkpoints, ignore_errors=True)  # the model is complete: checkpoints only served a resume
    say(f"Adapted model written to {output} in {_format_duration(seconds)} ({record['steps']} steps)")
    say(f"  use it with: embedder.model={output}  (then `knowledge index` re-embeds the knowledge base)")
    return AdaptResult(str(output), record)


def _quiet(trainer) -> None:
    """
    Drop the trainer's own printing: its log dicts on stdout (PrinterCallback, active without the
    progress bar) and the model-card callback, which only feeds a card we write ourselves.
    """
    from sentence_transformers.sentence_transformer.model_card import ModelCardCallback
    from transformers.trainer_callback import PrinterCallback

    for callback in (PrinterCallback, ModelCardCallback):
        trainer.remove_callback(callback)


def planned_steps(pair_count: int, options: AdaptOptions) -> int:
    per_epoch = max(1, -(-pair_count // options.batch_size))
    total = per_epoch * options.epochs
    return min(total, options.max_steps) if options.max_steps else total


def estimate_seconds(model, mined: MinedPairs, options: AdaptOptions, steps: int) -> float:
    """
    Steps x the time of one forward pass over a batch of training texts x 3: a training step is a
    forward and a backward pass over the anchors, positives and negatives, and the backward pass
    costs about twice the forward one.
    """
    batch = mined.pairs[: options.batch_size]
    texts = [text for pair in batch for text in (pair.anchor, pair.positive, pair.negative)]
    model.encode(texts[:2], show_progress_bar=False)  # the first call pays one-off set-up costs
    started = time.perf_counter()
    model.encode(texts, batch_size=len(texts), show_progress_bar=False)
    return (time.perf_counter() - started) * 3 * steps


def _last_loss(history: list[dict[str, Any]]) -> float | None:
    losses = [entry["loss"] for entry in history if "loss" in entry]
    return round(float(losses[-1]), 4) if losses else None


def _format_duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class _ProgressLines(TrainerCallback):
    """Without a terminal (no progress bar): one line at each logging step, with the loss."""

    def __init__(self, say) -> None:
        self.say = say

    def on_log(self, _args, state, _control, logs=None, **kwargs) -> None:
        if logs and "loss" in logs:
            self.say(f"  step {state.global_step}/{state.max_steps}: loss {logs['loss']:.4f}")


def model_card(record: dict[str, Any]) -> str:
    """The model folder's README.md: what the model was trained on, and how it was made."""
    settings = record["settings"]
    pairs = settings["pairs"]
    lines = [
        MODEL_CARD_TITLE,
        "",
        trained_on(settings),
        "",
        "| | |",
        "| --- | --- |",
        f"| knowledge base | `{settings['kb_path']}` |",
        f"| knowledge base fingerprint | `{settings['kb_fingerprint']}` (source paths and content hashes) |",
        f"| documents, chunks | {record['documents']}, {record['chunks']} |",
        f"| pairs | {sum(pairs.values())}: title -> section {pairs['title']}, heading path -> section "
        f"{pairs['heading']}, first sentence -> rest {pairs['sentence']} (each with a sibling's hard negative)"
        f"{label_pairs_note(pairs)} |",
        f"| loss | {settings['loss']} (in-batch negatives), batches without duplicate texts |",
        f"| epochs, steps, batch size, learning rate | {settings['epochs']}, {record['steps']}, "
        f"{settings['batch_size']}, {settings['learning_rate']} |",
        f"| seed | {settings['seed']} |",
        f"| chunking (max/overlap/min tokens) | {'/'.join(str(v) for v in settings['chunking'])} |",
        f"| training time | {record['train_seconds']} s"
        + (f" (this run, resumed from {record['resumed_from']})" if record.get("resumed_from") else "")
        + " |",
        f"| final training loss | {record['final_loss']} |",
        f"| finished | {record['finished_at']} |",
        "",
        "Use it with `embedder.model=<this folder>` (`knowledge index` then re-embeds the knowledge base). "
        "`adapt.json` holds the same facts for programs.",
        "",
    ]
    return "\n".join(lines)
