"""
One line for a failed composition of the config: Hydra's, OmegaConf's and YAML's errors shaped into
what `knowledge: error: ...` prints (pipelines/config/settings.py's `load_config` raises it as a ConfigError).
"""

from components.errors import first_line


def config_message(exc: Exception) -> str:
    """The one line of a composition error: where it is, what the choices are, what to do."""
    return _with_hint(_one_line(exc))


def _one_line(exc: Exception) -> str:
    cause = exc.__cause__ or exc
    if _is_yaml_error(cause):  # the problem is on its first line, the file and line on the second
        return first_line(cause, lines=2)
    message = first_line(exc, from_cause=True)
    options = _available_options(str(cause))
    if options:
        message = f"{message}; the choices are {options}"
    # OmegaConf's error names the key it failed on apart from its message.
    full_key = getattr(exc.__cause__, "full_key", None)
    if full_key and full_key not in message:
        message = f"{full_key}: {message}"
    return message


def _is_yaml_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("yaml.")


def _available_options(message: str) -> str:
    """Hydra's "Could not find 'guard/nosuch'" lists the group's options below its first line: keep them."""
    _, found, rest = message.partition("Available options in ")
    if not found:
        return ""
    options = rest.split("\n", 1)[1].split("Config search path:")[0].split()
    return ", ".join(options)


def _with_hint(message: str) -> str:
    """Hydra's "Ambiguous value" for `a=1,2` says neither what it means nor what to do: name `-m`."""
    if message.startswith("Ambiguous value for argument"):
        return (
            f"{message}: a comma list is a sweep, run with -m (knowledge eval --queries FILE -m ...); "
            "for a list write key=[a,b], for a string key='a,b'"
        )
    return message
