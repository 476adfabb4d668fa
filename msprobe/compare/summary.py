"""The end-of-run summary printed to the console: rows, verdicts, first error, where the outputs are."""

from __future__ import annotations

from msprobe.log import get_logger


def print_summary(summaries: list) -> None:
    logger = get_logger()
    for summary in summaries:
        counts = ", ".join(f"{summary.results.get(k, 0)} {k}" for k in ("pass", "warning", "error"))
        label = summary.label.strip("[] ") or "result"
        logger.info("%s: %d rows (%d matched, %d without golden partner): %s.", label, summary.rows,
                    summary.matched, summary.rows - summary.matched, counts)
        if summary.tensor_problems:
            logger.warning("%s: %d tensor pairs could not be compared; their rows say why (Err_message).",
                           label, summary.tensor_problems)
        if summary.advice is not None and summary.first_error is not None:
            logger.info("First error in execution order: %s (table row %d).", summary.first_error,
                        summary.first_error_row)
            logger.info("Advice: %s", summary.advice.text)
        elif summary.advice is not None:
            logger.info("No error rows. %s", summary.advice.text)
        if summary.output:
            logger.info("Result table: %s", summary.output)
        if summary.advisor_file:
            logger.info("Advisor: %s", summary.advisor_file)
