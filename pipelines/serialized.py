"""
The committed YAML pipelines: what the default configuration builds, serialized by Haystack.

Regenerate after changing a builder or a default: `python -m pipelines.serialized` from the
repository root (so paths keep their relative defaults). Tests fail while a file is stale.
"""

from pathlib import Path

from pipelines.settings import load_config

PIPELINES_DIR = Path(__file__).resolve().parent
HEADER = """\
# The {name} pipeline of the default configuration, as Haystack serializes it: the output of
# {builder}(load_config()).dumps() (run from the repository root) below this header.
# Do not edit by hand: regenerate with `python -m pipelines.serialized`; tests fail when it is stale.
# Load it with Pipeline.loads(text, allowed_modules=["components"]).
"""


def serialized_pipelines() -> dict[str, str]:
    """File name -> YAML text (with its header) for every committed pipeline."""
    from pipelines.indexing import build_indexing_pipeline
    from pipelines.lookup import build_lookup_pipeline

    cfg = load_config()
    builders = {
        "indexing.yml": ("indexing", "build_indexing_pipeline", build_indexing_pipeline),
        "lookup_knowledge.yml": ("lookup_knowledge", "build_lookup_pipeline", build_lookup_pipeline),
    }
    return {
        file_name: HEADER.format(name=name, builder=builder_name) + builder(cfg).dumps()
        for file_name, (name, builder_name, builder) in builders.items()
    }


def main() -> None:
    for file_name, text in serialized_pipelines().items():
        (PIPELINES_DIR / file_name).write_text(text, encoding="utf-8")
        print(f"wrote pipelines/{file_name}")


if __name__ == "__main__":
    main()
