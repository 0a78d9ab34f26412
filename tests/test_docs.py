"""The documentation site builds with `mkdocs build --strict`, and its configuration reference,
generated at build time, lists every `ContextConfig` field with its docstring."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contextkeep._config import ContextConfig

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built the way CI builds it (any warning fails the build)."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's banner about MkDocs 2.0
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return out


def text_of(fragment: str) -> str:
    """Visible text: line breaks become spaces, other tags are dropped, entities decoded."""
    text = re.sub(r"<[^>]+>", "", re.sub(r"<br\s*/?>", " ", fragment))
    return " ".join(html.unescape(text).split())


@pytest.fixture(scope="module")
def configuration(site: Path) -> str:
    return (site / "configuration" / "index.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def rows(configuration: str) -> dict[str, list[str]]:
    """The reference's table rows by key: the text of each cell after the key."""
    found = re.findall(r'<tr>\s*<td><a href="#(\w+)" id="\1">.*?</td>(.*?)</tr>', configuration, re.S)
    return {key: [text_of(cell) for cell in re.findall(r"<td>(.*?)</td>", rest, re.S)] for key, rest in found}


def test_every_page_of_the_docs_folder_is_built(site: Path) -> None:
    docs = ROOT / "docs"
    for source in docs.rglob("*.md"):
        page = source.relative_to(docs).with_suffix("")
        folder = page.parent if page.name == "index" else page
        assert (site / folder / "index.html").is_file(), source


def test_the_configuration_page_lists_every_field_with_its_docstring(rows: dict[str, list[str]]) -> None:
    assert list(rows) == list(ContextConfig.model_fields)  # every field, once, in the source's order
    for name, field in ContextConfig.model_fields.items():
        assert field.description, f"{name} has no docstring"
        paragraphs = [" ".join(p.replace("`", "").split()) for p in field.description.split("\n\n")]
        assert rows[name][2] == " ".join(paragraphs), name


def test_types_and_defaults_are_shown_as_contextkeep_toml_spells_them(
    rows: dict[str, list[str]], configuration: str
) -> None:
    assert rows["layers"][:2] == ["tuple[str, ...]", '["L1", "L2", "L3"]']
    assert rows["usage_mode"][:2] == ['"combined" or "confirmed_only" or "local_only"', '"combined"']
    assert rows["max_context_tokens"][:2] == ["int or None, > 0", "unset"]
    assert rows["pin_first_user"][:2] == ["bool", "true"]
    assert rows["compression_prompt"][1] == "in full below"
    assert ContextConfig().compression_prompt in text_of(configuration)


def test_the_api_reference_documents_every_public_class_and_function(site: Path) -> None:
    import contextkeep

    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    public = [name for name in contextkeep.__all__ if callable(getattr(contextkeep, name))]
    assert len(public) > 50
    assert [name for name in public if f'id="contextkeep.{name}"' not in page] == []
