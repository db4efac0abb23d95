"""
The app factory uvicorn imports in each worker process of `knowledge serve --workers N`. It
imports nothing heavy itself: the worker's config is read first, so that with an ONNX embedding
backend torch is kept out of the process before Haystack loads (a few hundred MB per worker).
"""


def worker_app():
    from components.common.embedding_models import keep_torch_out
    from pipelines.config.logs import configure_logging

    configure_logging(0)  # a spawned worker logs (masked) as the parent process does
    from pipelines.serving.service import served_config

    cfg = served_config()
    keep_torch_out(cfg.embedder.backend)
    from pipelines.serving.app import worker_app as build_worker_app

    return build_worker_app(cfg)
