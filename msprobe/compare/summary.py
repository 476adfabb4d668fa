"""The end-of-run summary printed to the console: rows, verdicts, the culprit, where the outputs are."""

from __future__ import annotations

from msprobe.log import get_logger
from msprobe.names import printable


def summary_line(summary) -> str:
    """One line, whatever the names of the dump hold (control characters escaped: names.printable)."""
    counts = ", ".join(f"{summary.results.get(k, 0)} {k}" for k in ("pass", "warning", "error"))
    label = summary.label.strip("[] ") or "compare"
    line = (f"{label}: {summary.rows} rows ({summary.matched} matched, {summary.rows - summary.matched} without "
            f"golden partner): {counts}")
    if summary.first_error is not None:
        # the row the user opens in the table file (its header is row 1: compare/advisor.file_row)
        line += f"; culprit: {summary.first_error} (row {summary.first_error_row + 1})"
    if summary.tensor_problems:
        line += f"; {summary.tensor_problems} tensor pairs not comparable (see Err_message)"
    if summary.output:
        line += f" -> {summary.output}"
    return printable(line)


def print_summary(summaries: list, failures: list = (), problems: list = (), advice: bool = True) -> None:
    logger = get_logger()
    for summary in summaries:
        logger.info("%s", summary_line(summary))
    if advice and len(summaries) == 1 and summaries[0].advice is not None:
        advice = summaries[0].advice
        logger.info("Advice: %s", printable(advice.text))
        if summaries[0].advisor_file:
            logger.info("Advisor file: %s", summaries[0].advisor_file)
    if len(summaries) + len(failures) > 1 or problems:
        logger.info("Compared %d of %d dump pairs; %d failed; %d skipped.", len(summaries),
                    len(summaries) + len(failures), len(failures), len(problems))
    for failure in failures:
        logger.error("%sfailed: %s", failure.label, failure.message)
