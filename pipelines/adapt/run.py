"""
`knowledge adapt`: fine-tune the embedding model on the knowledge base alone, without labels.

Pairs come from `pipelines.adapt.pairs` (title -> section, heading path -> section, first
sentence -> rest, each with a sibling's hard negative); the model is trained with
sentence-transformers' `SentenceTransformerTrainer` and `MultipleNegativesRankingLoss` (in-batch
negatives plus the hard one), batches without duplicate texts. A run writes into
`OUTPUT.partial/` (checkpoints in `OUTPUT.partial/checkpoints/`, so an interrupted run resumes where
it stopped); the finished model, its model card (`README.md`), `adapt.json` saying what it was
trained on and its calibration are moved to `OUTPUT` only at the end, so `embedder.model=OUTPUT`
never names a half-written folder. Design notes: docs/adapt.md.

Usage example:

```python
from pipelines.adapt.run import AdaptOptions, adapt_model
from pipelines.config.settings import load_config

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

from components.common.embedding_models import model_revision, resolve_model
from components.common.model_folder import ADAPT_RECORD, CALIBRATION_FILE
from components.errors import BadInputError
from pipelines.adapt.folder import (
    CHECKPOINTS,
    MODEL_CARD_TITLE,
    AdaptOutputError,
    check_output_folder,
    check_resumable,
    finished_record,
    publish,
    trained_record,
    work_folder,
)
from pipelines.adapt.labels import LabelSplit, chosen_labels, label_pairs_note, trained_on, with_label_pairs
from pipelines.adapt.pairs import MinedPairs, check_training_source, pairs_from, read_kb
from pipelines.adapt.split import HeldOutSplit, split_held_out
from pipelines.adapt.verdict import checked_guard_sets

LOSS_NAME = "MultipleNegativesRankingLoss"


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
    calibration_method: str = "packaged_decides"  # or "score_map" (pipelines/adapt/calibrate.py)


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
    say(f"Reading {kb_path} and mining its training pairs ...")  # a while before the estimate: say so first
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
    done = finished_record(output)
    if done is not None and not (options.overwrite and done.get("settings") != settings):
        if done.get("settings") != settings:
            raise AdaptOutputError(
                f"{output} holds a model adapted with other settings or another knowledge base: "
                "give another --output, or --overwrite to replace it"
            )
        say(f"{output} already holds this adapted model (same knowledge base and settings): nothing to do")
        if options.calibrate and not _calibrated_for(output, options.calibration_method):
            _refuse_not_recommended(calibrate_and_judge(cfg, options, output, split, kb_path, say, labels), output)
        return AdaptResult(str(output), done, already_done=True)
    work = work_folder(output)
    judged = _verdict_queries(cfg, options, split, labels)
    record = trained_record(work, settings, options.overwrite) or _train(
        cfg, options, work, mined, settings, say, judged
    )
    verdict = (
        calibrate_and_judge(cfg, options, work, split, kb_path, say, labels, published=output)
        if options.calibrate
        else None
    )
    publish(work, output)
    say(f"Adapted model written to {output}")
    say(f"  use it with: embedder.model={output}  (then `knowledge index` re-embeds the knowledge base)")
    _refuse_not_recommended(verdict, output)
    return AdaptResult(str(output), record)


def calibrate_and_judge(
    cfg: DictConfig,
    options: AdaptOptions,
    output: Path,
    split: HeldOutSplit,
    kb_path: str,
    say,
    labels: LabelSplit | None = None,
    published: Path | None = None,
):
    """
    Write the model's calibration (docs/adapt.md#calibration), then judge it against the base model
    (on the labels' check split when given, else on the KB's held-out anchors) and record the verdict
    in its card and calibration; returns the verdict (None without one). `published`: the folder the
    model moves to at the end, which the verdict names (the user's `embedder.model=`), not the work folder.
    """
    from pipelines.adapt.calibrate import calibration_lines, fit_calibration, packaged_decides, write_calibration
    from pipelines.adapt.verdict import guard_texts, judge, judged_queries

    guard_sets = checked_guard_sets(cfg, options.guard_sets)
    names = [query_set.path for query_set in guard_sets]
    if options.calibration_method == "score_map":
        calibration = fit_calibration(cfg, str(output), split.training, guard_texts(guard_sets), names)
    else:
        calibration = packaged_decides(cfg, str(output), names)
    write_calibration(output, calibration)
    say(f"Calibration ({calibration['method']}): {calibration_lines(calibration)}")
    if not options.verdict:
        return None
    sets = {**judged_queries(split, labels), **{s.name: s.queries for s in guard_sets}}
    say(f"Judging base against adapted model on {', '.join(f'{n} ({len(q)})' for n, q in sets.items())} ...")
    verdict = judge(cfg, options.overrides, str(output), kb_path, sets, named=str(published or output))
    for line in verdict.lines():
        say(line)
    write_calibration(output, {**calibration, "verdict": verdict.as_dict()})
    card = output / "README.md"
    head = (
        card.read_text(encoding="utf-8").split(VERDICT_HEADING, 1)[0].rstrip("\n") + "\n"
    )  # a new verdict replaces the last
    card.write_text(head + verdict_section(verdict.lines()), encoding="utf-8")
    return verdict


def _refuse_not_recommended(verdict, output: Path) -> None:
    """A model that is not recommended stays in its folder, and the run ends with NotRecommendedError."""
    from pipelines.adapt.verdict import NotRecommendedError

    if verdict is not None and not verdict.recommended:
        raise NotRecommendedError(
            f"the adapted model is not recommended: {verdict.reason} "
            f"(it stays in {output}, marked as not recommended in its model card)"
        )


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


def _calibrated_for(output: Path, method: str) -> bool:
    """The folder's calibration is of `method` and fitted for its model (none yet, another or a stale one: no)."""
    try:
        data = json.loads((output / CALIBRATION_FILE).read_text(encoding="utf-8"))
        return data.get("method") == method and data.get("model_revision") == model_revision(str(output))
    except (OSError, ValueError, AttributeError):
        return False


def _verdict_queries(cfg: DictConfig, options: AdaptOptions, split: HeldOutSplit, labels) -> int:
    """How many queries the verdict asks each model (0: no verdict)."""
    from pipelines.adapt.verdict import judged_queries

    if not (options.calibrate and options.verdict):
        return 0
    guards = checked_guard_sets(cfg, options.guard_sets)
    return sum(len(q) for q in judged_queries(split, labels).values()) + sum(len(s.queries) for s in guards)


def _train(
    cfg: DictConfig,
    options: AdaptOptions,
    output: Path,
    mined: MinedPairs,
    settings: dict[str, Any],
    say,
    verdict_queries: int = 0,
) -> dict[str, Any]:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import (
        BatchSamplers,
        SentenceTransformerTrainingArguments,
    )
    from transformers import set_seed
    from transformers.trainer_utils import get_last_checkpoint

    checkpoints = output / CHECKPOINTS
    check_resumable(checkpoints, settings, options.overwrite)
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
    per_text = seconds_per_text(model, mined, options)
    texts_per_step = 3 * min(options.batch_size, len(mined.pairs))  # anchor, positive and negative of each pair
    # A step is a forward and a backward pass, and the backward pass costs about twice the forward one.
    say(f"  estimated training time: {_format_duration(per_text * texts_per_step * 3 * steps)} on this machine")
    if verdict_queries:
        # Base and adapted model each embed the chunks into an index of their own, and each query.
        embedded = 2 * (mined.chunks + verdict_queries)
        say(
            f"  then the verdict: base and adapted model each index {mined.chunks} chunks and answer {verdict_queries} "
            f"queries (two indexes): about {_format_duration(per_text * embedded)} of embedding on this machine, "
            "plus the model loads and the searches"
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
    trainer = _trainer_without_model_card()(
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
    say(f"Trained in {_format_duration(seconds)} ({record['steps']} steps)")
    return record


def _trainer_without_model_card():
    """
    The trainer without its model-card callback (sentence-transformers' documented way: override
    `add_model_card_callback`). That callback only feeds a card we write ourselves, and at init it
    computes the card's widget examples under a progress bar, printed even without a terminal.
    """
    from sentence_transformers import SentenceTransformerTrainer

    class TrainerWithoutModelCard(SentenceTransformerTrainer):
        def add_model_card_callback(self, *_args: Any) -> None:
            pass

    return TrainerWithoutModelCard


def _quiet(trainer) -> None:
    """Drop the trainer's log dicts on stdout (PrinterCallback, active without the progress bar)."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)


def planned_steps(pair_count: int, options: AdaptOptions) -> int:
    per_epoch = max(1, -(-pair_count // options.batch_size))
    total = per_epoch * options.epochs
    return min(total, options.max_steps) if options.max_steps else total


def seconds_per_text(model, mined: MinedPairs, options: AdaptOptions) -> float:
    """The time of one forward pass per text, measured on a batch of training texts."""
    batch = mined.pairs[: options.batch_size]
    texts = [text for pair in batch for text in (pair.anchor, pair.positive, pair.negative)]
    model.encode(texts[:2], show_progress_bar=False)  # the first call pays one-off set-up costs
    started = time.perf_counter()
    model.encode(texts, batch_size=len(texts), show_progress_bar=False)
    return (time.perf_counter() - started) / len(texts)


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
