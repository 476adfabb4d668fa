"""`msprobe monitor analyse` and `msprobe monitor report`: read a training monitor's output (ours or the reference's),
name the first anomaly and write the dump that looks at it, or draw the run as one HTML page."""

from __future__ import annotations

import argparse

DESCRIPTION = ("Read the output of the training monitor (TrainerMon, MONITOR_OUTPUT_DIR: a folder per rank of CSVs and "
               "anomaly_detected/) of msprobe or of the reference msprobe. `analyse` orders every rank's anomalies "
               "as they happened (step, micro-step, stage, call order), names the first (the origin), groups what "
               "follows, and writes the PrecisionDebugger config that dumps exactly that step, rank and module. "
               "`report` writes one self-contained HTML page: a plot per metric and module over the steps, the "
               "anomalies and the first divergence marked.")
EPILOG = """examples:
  # the first anomaly of a monitored run, and the dump config that looks at it (./monitor_analyse/)
  msprobe monitor analyse -d monitor_output

  # as one JSON object (for CI): {"anomalies": 12, "first": {"step": 20, "rank": 0, "module": ..., "kind": ...}}
  msprobe monitor analyse -d monitor_output --json -o out

  # a run of the reference's monitor: its CSVs read again with the alert rules of a config
  msprobe monitor analyse -d ref_monitor_output --source csv -c monitor_config.json

  # compare a finished run with a golden run, step by step, after the fact
  msprobe monitor analyse -d monitor_output --golden golden_monitor_output

  # the HTML page of a run
  msprobe monitor report -d monitor_output -o monitor_report.html

See docs/monitor.md."""

ANALYSE_DESCRIPTION = ("Order every rank's anomalies by step, micro-step, stage and call order, name the first (the "
                       "origin), group what follows by step, and write the PrecisionDebugger config that dumps exactly "
                       "that step, rank and module (dump_config.json), with analyse.json, under -o.")
REPORT_DESCRIPTION = ("Write one self-contained HTML page of a monitored run: a plot per metric and module over the "
                      "steps (paged, filterable), the anomalies and the first divergence marked. No network is needed.")
SOURCE_HELP = ("where the anomalies come from: auto (the monitor's anomaly files when there are any, else the CSVs "
               "read again), anomalies (anomaly_detected/rank*/anomaly.jsonl), csv (the CSVs read again through the "
               "alert rules), reference (the reference's anomaly.json)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="<action>", parser_class=type(parser))
    analyse = actions.add_parser("analyse", aliases=["analyze"], help="name the first anomaly and write its dump config",
                                 description=ANALYSE_DESCRIPTION, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(analyse)
    analyse.add_argument("-o", "--output", metavar="DIR", default="monitor_analyse",
                         help="directory for analyse.json and dump_config.json (default: ./monitor_analyse)")
    analyse.add_argument("--json", action="store_true", help="print the analysis as one JSON object instead of the "
                                                             "summary")
    analyse.add_argument("--dump-path", metavar="DIR", default="./monitor_dump",
                         help="dump_path written into dump_config.json (default: ./monitor_dump)")
    report = actions.add_parser("report", help="write the run as one HTML page", description=REPORT_DESCRIPTION,
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(report)
    report.add_argument("-o", "--output", metavar="PATH", default="monitor_report.html",
                        help="the .html file, or a directory for monitor_report.html (default: ./monitor_report.html)")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-d", "--dir", required=True, metavar="DIR",
                        help="a MONITOR_OUTPUT_DIR (or one rank folder of it)")
    parser.add_argument("--source", choices=("auto", "anomalies", "csv", "reference"), default="auto",
                        help=SOURCE_HELP)
    parser.add_argument("-c", "--config", metavar="JSON",
                        help="a monitor config whose alert rules read the CSVs (default: AnomalyTurbulence with "
                             "threshold 0.5 and AnomalyNan)")
    parser.add_argument("--golden", metavar="DIR",
                        help="the MONITOR_OUTPUT_DIR of a golden run: every step is compared with it (divergences)")


def run(args: argparse.Namespace) -> int:
    from msprobe.errors import UsageError

    if args.action is None:
        raise UsageError("msprobe monitor needs an action: analyse or report (see msprobe monitor -h)")
    rules = _rules(args.config)
    golden = None
    if args.golden:
        from msprobe.dump.paths import check_input_dir

        golden = check_input_dir(args.golden, "golden monitor output directory")
    if args.action == "report":
        from msprobe.monitor.report import write_report

        path = write_report(args.dir, args.output, source=args.source, rules=rules, golden=golden)
        print(f"msprobe monitor report: {path}")
        return 0
    return _analyse(args, rules, golden)


def _rules(config: str | None):
    from msprobe.monitor.analyse import DEFAULT_RULES

    if not config:
        return DEFAULT_RULES
    from msprobe.dump.paths import check_input_file
    from msprobe.monitor.config import load_config

    return load_config(check_input_file(config, "monitor config")).alert.rules


def _analyse(args: argparse.Namespace, rules, golden: str | None) -> int:
    import json
    import os

    from msprobe.dump.paths import prepare_output_dir
    from msprobe.io import write_text
    from msprobe.monitor.analyse import dump_config, load, summary, to_json
    from msprobe.names import printable

    analysis = load(args.dir, args.source, rules, golden)
    output = prepare_output_dir(args.output)
    config_path = None
    if analysis.first is not None:
        config_path = os.path.join(output, "dump_config.json")
        write_text(config_path, json.dumps(dump_config(analysis.first, analysis.framework, args.dump_path), indent=2,
                                           ensure_ascii=False) + "\n")
    result = to_json(analysis, config_path)
    text = json.dumps(result, indent=1, ensure_ascii=False, allow_nan=False)
    write_text(os.path.join(output, "analyse.json"), text + "\n")
    if args.json:
        print(text)
    else:
        lines = summary(analysis, config_path)
        lines[0] = f"msprobe monitor analyse: {lines[0]}"
        for line in lines:
            print(printable(line))
    return 0
