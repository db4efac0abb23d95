"""
An adapted model's calibration (docs/adapt.md#calibration), one of two methods:

- `packaged_decides` (the default): the base model keeps deciding answer vs no evidence, with the
  configured thresholds on its own scale, while the adapted model ranks (the file names the
  decision model; `load_config` sets `embedder.decision_model` from it). Nothing is fitted.
- `score_map`: a score map from the adapted model's similarity scale to the base model's.

The score map:

Fine-tuning moves similarities up for everything that looks like the knowledge base, off-topic
texts of the same shape included, so a threshold chosen for the base model means something else
for the adapted one. The map matches quantiles: each texts' best similarity to the knowledge
base's chunks is computed with both models, over texts made from the knowledge base (the pairs'
anchors) and the guard sets' texts (what must be rejected), the two groups weighted alike; a base
threshold `t` that a share `p` of the texts falls under becomes the adapted similarity under which
the same share `p` falls. The thresholds are written to the model folder's `calibration.json`,
which `load_config` applies (pipelines/config/model_calibration.py). Design notes: docs/adapt.md#calibration.
"""

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from components.common.embedding_models import load_onnx_encoder, model_revision
from components.common.model_folder import CALIBRATION_FILE
from pipelines.adapt.pairs import MinedPairs
from pipelines.config.model_calibration import CALIBRATED_KEYS, PACKAGED_DECIDES, SCORE_MAP

METHOD = SCORE_MAP  # the score map's


def best_similarities(spec: str, texts: list[str], chunks: list[str], cfg: DictConfig) -> np.ndarray:
    """Each text's best cosine similarity to the chunks (the pipeline's similarity for unit vectors)."""
    encoder = load_onnx_encoder(spec, "onnx", cfg.embedder.onnx_cache_dir)
    queries = encoder.encode(texts, batch_size=cfg.embedder.batch_size)
    documents = encoder.encode(chunks, batch_size=cfg.embedder.batch_size)
    return (queries @ documents.T).max(axis=1)


def share_below(scores: np.ndarray, weights: np.ndarray, threshold: float) -> float:
    return float(weights[scores < threshold].sum())


def value_at_share(scores: np.ndarray, weights: np.ndarray, share: float) -> float:
    """The smallest score with at least `share` of the weight strictly below it (the inverse of `share_below`)."""
    order = np.argsort(scores)
    cumulative = np.concatenate([[0.0], np.cumsum(weights[order])])
    position = int(np.searchsorted(cumulative, share - 1e-12, side="left"))
    return float(scores[order][min(position, len(scores) - 1)])


def map_threshold(base: np.ndarray, adapted: np.ndarray, weights: np.ndarray, threshold: float) -> float:
    share = share_below(base, weights, threshold)
    return round(min(1.0, max(0.0, value_at_share(adapted, weights, share))), 4)


def fit_calibration(
    cfg: DictConfig, model_dir: str, mined: MinedPairs, guard_texts: list[str], guard_sets: list[str]
) -> dict[str, Any]:
    """Map each of the config's thresholds (those of the base model) to the adapted model's scale."""
    chunks = sorted({pair.positive for pair in mined.pairs if pair.kind == "title"})
    kb_texts = sorted({pair.anchor for pair in mined.pairs})
    texts = kb_texts + guard_texts
    weights = np.array(
        [0.5 / len(kb_texts)] * len(kb_texts) + [0.5 / len(guard_texts)] * len(guard_texts)
        if guard_texts
        else [1.0 / len(kb_texts)] * len(kb_texts)
    )
    base = best_similarities(cfg.embedder.model, texts, chunks, cfg)
    adapted = best_similarities(model_dir, texts, chunks, cfg)
    base_thresholds = {key: float(OmegaConf.select(cfg, key)) for key in CALIBRATED_KEYS}
    return {
        "method": METHOD,
        "model_revision": model_revision(model_dir),
        "base_model": cfg.embedder.model,
        "base_thresholds": base_thresholds,
        "thresholds": {key: map_threshold(base, adapted, weights, value) for key, value in base_thresholds.items()},
        "fitted_on": {
            "kb_texts": len(kb_texts),
            "chunks": len(chunks),
            "guard_texts": len(guard_texts),
            "guard_sets": guard_sets,
        },
        "fitted_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def packaged_decides(cfg: DictConfig, model_dir: str, guard_sets: list[str]) -> dict[str, Any]:
    """The base model decides with the configured thresholds (no bar moves); the adapted model ranks."""
    base_thresholds = {key: float(OmegaConf.select(cfg, key)) for key in CALIBRATED_KEYS}
    return {
        "method": PACKAGED_DECIDES,
        "model_revision": model_revision(model_dir),
        "base_model": cfg.embedder.model,
        "decision_model": cfg.embedder.model,
        "base_thresholds": base_thresholds,
        "thresholds": {},
        "fitted_on": {"guard_sets": guard_sets},
        "fitted_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def calibration_lines(calibration: dict[str, Any]) -> str:
    """What the calibration does, in one line."""
    if calibration["method"] == PACKAGED_DECIDES:
        return (
            f"{calibration['decision_model']} decides answer vs no evidence with the configured thresholds, "
            "the adapted model ranks"
        )
    return ", ".join(
        f"{key.split('.')[-1]} {calibration['base_thresholds'][key]:g} -> {value:g}"
        for key, value in calibration["thresholds"].items()
    )


def write_calibration(model_dir: str | Path, calibration: dict[str, Any]) -> Path:
    """Write the file whole, then move it in place: a lookup never reads half a calibration."""
    path = Path(model_dir) / CALIBRATION_FILE
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(calibration, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path
