"""Tracing: the TraceWriter component, the `tool_invocation` store and the MLflow trace export."""

import sys
from typing import TYPE_CHECKING

from lazy_imports import LazyImporter

_import_structure = {
    "trace_writer": ["TraceWriter"],
}

if TYPE_CHECKING:
    from .trace_writer import TraceWriter as TraceWriter
else:
    sys.modules[__name__] = LazyImporter(name=__name__, module_file=__file__, import_structure=_import_structure)
