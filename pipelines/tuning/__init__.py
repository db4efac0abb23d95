"""The tuning loop: evaluation runs in MLflow, Hydra sweeps over query-time settings, an Optuna search."""
