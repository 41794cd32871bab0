"""``--help`` that fits an 80-column terminal with nothing cut: typer draws the options of a command
as a rich table whose columns end a text that does not fit with "…" (``--global-batch-size,-…``,
``tensor_model_parallel…``); here every such column folds the text onto the next line instead."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup


class FoldingTable(Table):
    """A rich table whose columns fold a text too wide for them onto the next line (rich's default
    for a column is to end it with "…")."""

    def add_row(self, *renderables: Any, **kw: Any) -> None:
        super().add_row(*renderables, **kw)
        for column in self.columns:  # the columns ``add_row`` creates take rich's default
            column.overflow = "fold"

    def add_column(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("overflow", "fold")
        super().add_column(*args, **kw)


def _folding(parameter_help: Callable[..., Any]) -> Callable[..., Any]:
    """typer's builder of an option's help cell, its texts folding (the cell is a ``Columns`` of
    texts, drawn in a grid of its own whose columns would end them with "…")."""

    def build(*args: Any, **kw: Any) -> Any:
        cell = parameter_help(*args, **kw)
        for item in getattr(cell, "renderables", ()):
            if isinstance(item, Text):
                item.overflow = "fold"
        return cell

    build.folds = True  # type: ignore[attr-defined]
    return build


def fold_help_tables() -> None:
    """Make typer's help tables :class:`FoldingTable` and its option help texts fold (idempotent).
    typer's rich help module is loaded here, when help is printed, not at start-up: it imports rich's
    Markdown (about 0.1 s on every other command)."""
    rich_utils: Any = importlib.import_module("typer.rich_utils")
    rich_utils.Table = FoldingTable
    if not getattr(rich_utils._get_parameter_help, "folds", False):
        rich_utils._get_parameter_help = _folding(rich_utils._get_parameter_help)


class FoldingHelpCommand(TyperCommand):
    """A command whose ``--help`` folds instead of cutting (:func:`fold_help_tables`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        fold_help_tables()
        super().format_help(ctx, formatter)


class FoldingHelpGroup(TyperGroup):
    """The command group whose ``--help`` folds instead of cutting (:func:`fold_help_tables`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        fold_help_tables()
        super().format_help(ctx, formatter)


__all__ = ["FoldingHelpCommand", "FoldingHelpGroup", "FoldingTable", "fold_help_tables"]
