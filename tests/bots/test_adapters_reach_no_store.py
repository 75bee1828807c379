"""The platforms (Slack, Discord, the terminal) reach conversations only through
`runner.conversations`.

import-linter holds the adapters' imports (pyproject.toml: they import no `storage`), but it
cannot see attribute access: `runner.store` would hand an adapter the whole store without an
import. This reads the adapters' source instead: no `.store` attribute, no `getattr(…, "store")`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
ADAPTERS = sorted((ROOT / "bots" / "platforms").rglob("*.py"))


def store_reaches(source: str) -> list[int]:
    """The lines where `source` reads an attribute named `store`."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source)) if _reaches_store(node))


def _reaches_store(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "store"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "setattr", "hasattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value == "store"
    )


def test_the_check_sees_every_way_an_adapter_could_reach_the_store() -> None:
    source = (
        "self.runner.store.usage_summary(0)\n"
        "ChannelConfigs(runner.store, settings)\n"
        "getattr(self._runner, 'store')\n"
        "self.runner.conversations.known(key)  # fine\n"
    )
    assert store_reaches(source) == [1, 2, 3]


def test_no_platform_reaches_runner_store() -> None:
    packages = {path.relative_to(ROOT / "bots" / "platforms").parts[0] for path in ADAPTERS}
    assert {"slack", "discord", "terminal"} <= packages and len(ADAPTERS) > 30
    reaches = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in ADAPTERS
        for line in store_reaches(path.read_text(encoding="utf-8"))
    }
    assert reaches == set(), "use runner.conversations (bots.runner.service) instead"
