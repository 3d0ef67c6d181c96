"""Writing rows for people to open in spreadsheets, safely: the CSV helpers of the export-format
registry (workers.ingest.export_formats), where every export format is described."""

from workers.ingest.export_formats import FORMULA_PREFIXES, csv_lines, spreadsheet_safe

__all__ = ["FORMULA_PREFIXES", "csv_lines", "spreadsheet_safe"]
