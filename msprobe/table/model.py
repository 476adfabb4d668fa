"""The judged result table that every writer takes: named columns of equal length, nothing computed here."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ResultTable:
    columns: list                            # column names in output order
    cells: dict                              # column name -> list of cell values (str, float, int, bool, None)
    numeric_columns: frozenset = field(default_factory=frozenset)  # written as numbers in xlsx when they are
    # Columns holding text taken from the dumps, checked for spreadsheet formulas before writing; None = all.
    text_columns: frozenset | None = None
    # The numbers of numeric columns as their maker read them (compare/error_origin.cell_floats): column name ->
    # (float64 per cell, the rows whose cell is not a float); the writers spell the finite floats from them at once.
    numbers: dict = field(default_factory=dict)

    def columns_to_check(self) -> list:
        return [c for c in self.columns if c in self.text_columns] if self.text_columns is not None \
            else [c for c in self.columns if c not in self.numeric_columns]

    def __len__(self) -> int:
        return len(self.cells[self.columns[0]]) if self.columns else 0

    def column(self, name: str) -> list:
        return self.cells[name]
