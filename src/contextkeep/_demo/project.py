"""The demo's workload: a small project on disk and real tools over it."""

from __future__ import annotations

import random
import re
from pathlib import Path

from contextkeep._agent.tools import Tool, ToolError

__all__ = ["create_project", "project_tools"]

_MODULES = ("billing", "inventory", "shipping", "accounts", "reports")


def create_project(root: Path, *, seed: int = 7) -> Path:
    """Write a deterministic toy service: source files, a config, and a long log with one real error."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for name in _MODULES:
        lines = [
            f'"""The {name} service."""',
            "",
            "import logging",
            "",
            f"log = logging.getLogger({name!r})",
            "",
        ]
        for i in range(40):
            lines += [
                f"def {name}_step_{i}(value: int) -> int:",
                f'    """Step {i} of the {name} pipeline."""',
                f"    return value * {rng.randint(2, 97)} % {rng.randint(101, 997)}",
                "",
            ]
        if name == "shipping":
            lines += [
                "def quote(weight_kg: float) -> float:",
                "    # TODO: rates below 1 kg are wrong",
                "    return 4.5",
                "",
            ]
        (root / f"{name}.py").write_text("\n".join(lines))
    (root / "settings.toml").write_text('[service]\nregion = "eu-west-3"\nmax_batch = 512\nretry_limit = 4\n')
    log = []
    for n in range(1, 1201):
        module = rng.choice(_MODULES)
        millis = rng.randint(5, 90)
        log.append(
            f"2026-11-29T08:{n // 60 % 60:02d}:{n % 60:02d} INFO {module}: processed batch {n} in {millis} ms"
        )
    log.insert(
        1107, "2026-11-29T08:18:27 ERROR shipping: QuoteError: negative rate for order 88412 (weight 0.4 kg)"
    )
    (root / "service.log").write_text("\n".join(log) + "\n")
    return root


def project_tools(root: Path) -> list[Tool]:
    """list_files, read_file, grep, count_lines and write_file, confined to `root`."""
    base = root.resolve()

    def inside(path: str) -> Path:
        target = (base / path).resolve()
        if not target.is_relative_to(base):
            raise ToolError(f"{path!r} is outside the project")
        return target

    def list_files(directory: str = ".") -> str:
        """List the files of a project directory with their sizes."""
        folder = inside(directory)
        return "\n".join(
            f"{p.name}\t{p.stat().st_size} bytes" for p in sorted(folder.iterdir()) if p.is_file()
        )

    def read_file(path: str) -> str:
        """Return a file's whole content."""
        target = inside(path)
        if not target.is_file():
            raise ToolError(f"no such file: {path}")
        return target.read_text()

    def grep(pattern: str, path: str) -> str:
        """Lines of a file matching a regular expression, with line numbers."""
        regex = re.compile(pattern)
        lines = inside(path).read_text().splitlines()
        return (
            "\n".join(f"{n}: {line}" for n, line in enumerate(lines, 1) if regex.search(line)) or "no match"
        )

    def count_lines(path: str) -> int:
        """How many lines a file has."""
        return len(inside(path).read_text().splitlines())

    def write_file(path: str, content: str) -> str:
        """Write a file (creating or replacing it)."""
        inside(path).write_text(content)
        return f"wrote {len(content)} characters to {path}"

    return [Tool.from_function(f) for f in (list_files, read_file, grep, count_lines, write_file)]
