"""The result table: its columns per mode (columns.py), its model (model.py), cell texts (cells.py), the csv and
xlsx writers, the readers of result tables, and the formula check of cells (safety.py)."""
