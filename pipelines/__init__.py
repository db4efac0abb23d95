"""The YAML pipelines (yaml/), their loader and the two pipeline modules; the rest in wings (config/ lowest, cli/ the top)."""

import os

import components

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

DISTRIBUTION = "lookup-knowledge"


def _check_components_package() -> None:
    """
    Fail at import, in one line, when the top-level `components` package is another
    distribution's: otherwise the first component import would fail far from the cause, or worse,
    load someone else's module of the same name.
    """
    if getattr(components, "DISTRIBUTION", None) != DISTRIBUTION:
        where = getattr(components, "__file__", None) or list(getattr(components, "__path__", []))
        raise ImportError(
            f"the package 'components' imported from {where} is not {DISTRIBUTION}'s: another "
            f"distribution installs a top-level 'components' package that shadows it; uninstall "
            f"that one or install {DISTRIBUTION} in a virtualenv of its own"
        )


_check_components_package()
