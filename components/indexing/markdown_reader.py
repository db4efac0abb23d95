import errno
import hashlib
import logging
import os
import stat
from pathlib import Path
from typing import Any

import frontmatter
import yaml
from haystack import Document, component

from components.common.choices import check_named
from components.common.markdown_sections import first_heading, is_blank_document
from components.common.text import clean
from components.contracts import SkippedFile
from components.errors import BadInputError, first_line
from components.stores.milvus_collection import MAX_CATEGORY_CHARS

logger = logging.getLogger(__name__)

MARKDOWN_SUFFIXES = (".md", ".markdown")


class KnowledgeBaseError(BadInputError):
    """The knowledge base path cannot be indexed at all (missing, not a folder, no markdown)."""


def check_knowledge_base(kb_path: str) -> Path:
    """
    Fail fast, before any model loads, when a knowledge base cannot be indexed at all.

    :raises KnowledgeBaseError: The folder is missing, not a folder, or holds no markdown file.
    """
    root = Path(kb_path)
    if not root.exists():
        raise KnowledgeBaseError(f"knowledge base {kb_path} does not exist (give one with --kb DIR)")
    if not root.is_dir():
        raise KnowledgeBaseError(f"knowledge base {kb_path} is not a folder")
    for _directory, _dirs, filenames in os.walk(root, followlinks=False):
        if any(name.lower().endswith(MARKDOWN_SUFFIXES) for name in filenames):
            return root
    raise KnowledgeBaseError(f"knowledge base {kb_path} holds no markdown (.md) file")


@component
class MarkdownKnowledgeReader:
    """
    Reads a markdown knowledge base into one Haystack `Document` per file.

    Frontmatter gives `title`, `category`, `keywords` and `entities`; without it the title comes
    from the first heading (else the file name) and the category from the top-level folder.
    Files that cannot be used are skipped with a reason, never silently: unreadable files,
    invalid UTF-8, broken YAML frontmatter or frontmatter that is not a mapping, a category that
    is a list or longer than the `category` column, empty documents, FIFOs and other files that
    are not regular, symlink loops, and symlinks that lead outside the knowledge base.

    Usage example:

    ```python
    >>> import pathlib, tempfile
    >>> kb = pathlib.Path(tempfile.mkdtemp())
    >>> (kb / "disk").mkdir()
    >>> _ = (kb / "disk" / "full.md").write_text("# Disk Full\\n\\nFree space on the volume.\\n")
    >>> result = MarkdownKnowledgeReader(kb_path=str(kb)).run()
    >>> [(d.meta["source"], d.meta["title"], d.meta["category"]) for d in result["documents"]], result["skipped"]
    ([('disk/full.md', 'Disk Full', 'disk')], [])

    ```
    """

    def __init__(self, kb_path: str = "knowledge/", default_category: str = "general") -> None:
        """
        :param kb_path: The knowledge base folder.
        :param default_category: Category of files at the top level of the folder without one.
        """
        check_named(kb_path=kb_path, default_category=default_category)
        self.kb_path = kb_path
        self.default_category = default_category

    @component.output_types(documents=list[Document], skipped=list[SkippedFile])
    def run(self) -> dict[str, Any]:
        """
        Scan the knowledge base.

        :returns: `documents` (content = markdown body without frontmatter; meta = source,
            title, category, keywords, entities, doc_hash, has_frontmatter) and `skipped`.
        :raises KnowledgeBaseError: The folder is missing or holds no markdown file.
        """
        root = check_knowledge_base(self.kb_path).resolve()

        documents: list[Document] = []
        skipped: list[SkippedFile] = []
        seen_markdown = False
        for path, source in self._markdown_files(root, skipped):
            seen_markdown = True
            document, problem = self._read(root, path, source)
            if problem:
                skipped.append(SkippedFile(source=source, reason=problem))
                logger.warning("Skipping %s: %s", source, problem)
            else:
                documents.append(document)
        if not seen_markdown:
            raise KnowledgeBaseError(f"knowledge base {self.kb_path} holds no markdown (.md) file")
        return {"documents": documents, "skipped": skipped}

    def _markdown_files(self, root: Path, skipped: list[SkippedFile]):
        for directory, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            base = Path(directory)
            for name in list(dirnames):
                if name.startswith("."):
                    dirnames.remove(name)
                elif (base / name).is_symlink():
                    dirnames.remove(name)
                    target = (base / name).resolve()
                    if not _is_within(target, root):
                        skipped.append(
                            SkippedFile(_relative(root, base / name), "symlink points outside the knowledge base")
                        )
            for name in sorted(filenames):
                if not name.lower().endswith(MARKDOWN_SUFFIXES) or name.startswith("."):
                    continue
                path = base / name
                source = _relative(root, path)
                if path.is_symlink():
                    problem = _symlink_problem(path, root)
                    if problem:
                        skipped.append(SkippedFile(source, problem))
                        continue
                yield path, source

    def _read(self, root: Path, path: Path, source: str) -> tuple[Document | None, str | None]:
        try:
            # A FIFO would block the read for good, a device could be endless.
            if not stat.S_ISREG(path.stat().st_mode):
                return None, "not a regular file (a FIFO, socket or device)"
            raw = path.read_bytes()
        except OSError as exc:
            return None, f"unreadable: {exc.strerror or exc}"
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return None, f"invalid UTF-8 at byte {exc.start}"
        # A byte-order mark (as some editors write) would hide the frontmatter fence.
        text = text.removeprefix("\ufeff")
        try:
            post = frontmatter.loads(text)
            problem = _frontmatter_problem(text)
        except yaml.YAMLError as exc:
            return None, f"invalid YAML frontmatter: {first_line(exc, lines=2)}"
        if problem or not isinstance(post.metadata, dict):
            return None, f"invalid YAML frontmatter: {problem or 'frontmatter is not a mapping'}"
        body = post.content
        if not body.strip() or is_blank_document(body):
            return None, "empty document"
        problem = _category_problem(post.metadata.get("category"))
        if problem:
            return None, problem
        meta = self._metadata(post.metadata, body, path, source, raw)
        return Document(id=meta["doc_hash"], content=body, meta=meta), None

    def _metadata(self, front: dict, body: str, path: Path, source: str, raw: bytes) -> dict[str, Any]:
        parts = Path(source).parts
        folder_category = parts[0] if len(parts) > 1 else self.default_category
        title = _text(front.get("title")) or first_heading(body) or path.stem.replace("-", " ").replace("_", " ")
        return {
            "source": source,
            "title": clean(title),
            "category": clean(_text(front.get("category")) or folder_category),
            "keywords": _string_list(front.get("keywords")),
            "entities": _entities(front.get("entities")),
            "has_frontmatter": bool(front),
            "doc_hash": hashlib.sha256(raw).hexdigest(),
        }


def _symlink_problem(path: Path, root: Path) -> str | None:
    """Why a symlinked markdown file cannot be read (a loop, or a target outside the knowledge base), if so."""
    try:
        target = path.resolve(strict=True)
    except (RuntimeError, OSError) as exc:  # Python 3.11 raises RuntimeError on a loop, later ones OSError
        looped = isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP
        return "symlink loop" if looped else f"broken symlink: {getattr(exc, 'strerror', None) or exc}"
    return None if _is_within(target, root) else "symlink points outside the knowledge base"


def _frontmatter_problem(text: str) -> str | None:
    """
    python-frontmatter reads a fenced block that is a list or a scalar as no metadata at all;
    such a file is skipped rather than indexed without what its author wrote.
    """
    handler = frontmatter.YAMLHandler()
    if not handler.detect(text):
        return None
    try:
        fm, _content = handler.split(text)
    except ValueError:
        return None
    loaded = yaml.safe_load(fm)
    if loaded is None or isinstance(loaded, dict):
        return None
    return f"frontmatter is not a mapping (a {type(loaded).__name__})"


def _category_problem(value: Any) -> str | None:
    """A category must be one value that fits the `category` column."""
    if isinstance(value, (list, tuple, dict, set)):
        return f"category must be a single value, not a {type(value).__name__}"
    if value is not None and len(_text(value)) > MAX_CATEGORY_CHARS:
        return f"category longer than {MAX_CATEGORY_CHARS} characters"
    return None


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix() if _is_within(path, root) else path.as_posix()


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _text(value: Any) -> str:
    return "" if value is None else clean(str(value))


def _string_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [part for part in value.split(",")]
    if not isinstance(value, (list, tuple)):
        value = [value]
    return [clean(str(item)) for item in value if item is not None and clean(str(item))]


def _entities(value: Any) -> list[dict[str, Any]]:
    """Entities as `{name, aliases}`; plain strings are entities without aliases."""
    result = []
    for item in value if isinstance(value, list) else ([value] if value else []):
        if isinstance(item, dict) and item.get("name"):
            result.append({"name": clean(str(item["name"])), "aliases": _string_list(item.get("aliases"))})
        elif isinstance(item, (str, int, float)) and clean(str(item)):
            result.append({"name": clean(str(item)), "aliases": []})
    return result
