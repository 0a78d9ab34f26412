"""MkDocs build hook: the configuration reference, generated from `ContextConfig` at build time.

A page holding :data:`MARKER` gets, in its place, one table per group of fields (the groups are
the comments that head them in `src/contextkeep/config.py`), each row a field's key, type and
constraints, default (as it is written in `contextkeep.toml`) and its attribute docstring, which
pydantic reads into the field's description (`use_attribute_docstrings`). Defaults too long for
a table cell follow the tables, in full.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import io
import json
import tokenize
import types
from collections.abc import Iterator
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from pydantic.fields import FieldInfo

MARKER = "<!-- contextkeep: configuration reference -->"
"""Where the generated reference goes."""

_LONG = 60
"""Defaults longer than this are shown in full after the tables."""

_BOUNDS: dict[type[Any], tuple[str, str]] = {
    annotated_types.Gt: (">", "gt"),
    annotated_types.Ge: ("≥", "ge"),
    annotated_types.Lt: ("<", "lt"),
    annotated_types.Le: ("≤", "le"),
}
"""Each bound pydantic keeps in a field's metadata: its sign, and the attribute holding its value."""


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace :data:`MARKER` with the reference (on every build: `mkdocs serve` sees edits)."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render_reference())


def render_reference() -> str:
    """The Markdown of the whole reference, from the current source of `contextkeep.config`."""
    module = importlib.reload(importlib.import_module("contextkeep._config"))
    model = module.ContextConfig
    fields: dict[str, FieldInfo] = model.model_fields
    out: list[str] = []
    long: list[tuple[str, Any]] = []
    for heading, names in _groups(inspect.getsource(model), list(fields)):
        title, _, origin = heading.partition(" (")
        out += ["", f"### {title}", ""]
        if origin:
            out += [f"Origin: {origin.removesuffix(')')}.", ""]
        out += ["| Key | Type | Default | Description |", "|---|---|---|---|"]
        for name in names:
            field = fields[name]
            default = _toml(field.default)
            if len(default) > _LONG:
                long.append((name, field.default))
                default = f"[in full below](#default-{name})"
            elif field.default is not None:
                default = f"`{default}`"
            key = f"[`{name}`](#{name}){{#{name}}}"
            out.append(f"| {key} | {_cell(_type_cell(field))} | {default} | {_cell(field.description)} |")
    if long:
        out += ["", "### Long defaults", ""]
        for name, value in long:
            out += [f"#### `{name}` {{#default-{name}}}", "", "```text", str(value), "```", ""]
    return "\n".join(out) + "\n"


def _groups(source: str, names: list[str]) -> Iterator[tuple[str, list[str]]]:
    """The fields under each comment heading the class body (those before any: "General")."""
    headings = {
        token.start[0]: token.string[1:].strip().rstrip(".")
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT and token.start[1] == 4
    }
    (cls,) = ast.parse(source).body
    assert isinstance(cls, ast.ClassDef)
    lines = {
        node.target.id: node.lineno
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    title, group = "General", list[str]()
    for name in names:
        above = [line for line in headings if line < lines[name]]
        current = headings[max(above)] if above else "General"
        if current != title and group:
            yield title, group
            group = []
        title = current
        group.append(name)
    if group:
        yield title, group


def _type_cell(field: FieldInfo) -> str:
    """The field's type (its alternatives, or an enumeration's values), then its bounds."""
    shown = " or ".join(f"`{t}`" for t in _alternatives(field.annotation))
    bounds = [
        f"{sign} {getattr(m, attribute)}"
        for m in field.metadata
        for kind, (sign, attribute) in _BOUNDS.items()
        if isinstance(m, kind)
    ]
    return f"{shown}, {', '.join(bounds)}" if bounds else shown


def _alternatives(annotation: Any) -> list[str]:
    """A type as a reader writes it, one entry per alternative; a literal or enumeration as its values."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return [t for a in get_args(annotation) for t in _alternatives(a)]
    if origin is Literal:
        return [json.dumps(v) for v in get_args(annotation)]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [json.dumps(m.value) for m in annotation]
    if annotation is type(None):
        return ["None"]
    if origin is None and isinstance(annotation, type):
        return [annotation.__name__]
    return [str(annotation).replace("typing.", "")]


def _toml(value: Any) -> str:
    """A default as `contextkeep.toml` spells it (`None`: the key is left out)."""
    if value is None:
        return "*unset*"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value, ensure_ascii=False)


def _cell(text: str | None) -> str:
    """Text fit for one table cell: paragraphs kept apart, pipes escaped."""
    paragraphs = [" ".join(p.split()) for p in (text or "").split("\n\n")]
    return "<br><br>".join(p for p in paragraphs if p).replace("|", "\\|")
