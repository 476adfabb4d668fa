"""The training monitor's configuration: the reference's monitor config.json keys (plus `golden` and `action`),
validated in full when the monitor is made. A wrong value is one `MonitorConfigError` line; a key the reference knows
but msprobe does not honour, and a key nobody knows, are one warning each (the reference accepts both), so that a
config written for the reference runs unchanged."""

from __future__ import annotations

import difflib
import os
import types
from dataclasses import dataclass, field

from msprobe.collect.config import DumpConfigError, read_config_file
from msprobe.errors import MsprobeError
from msprobe.monitor.anomaly import RULE_ARGS, AlertConfigError, parse_rules
from msprobe.monitor.records import OPS

FORMATS = ("csv", "tensorboard", "api")
ACTIONS = ("stop",)
# ops the reference accepts that are not statistics: shape and dtype are always CSV columns here, id is not written
SILENT_OPS = ("shape", "dtype")
UNSUPPORTED_OPS = ("id",)
DEFAULT_COLLECT_TIMES = 100_000_000

# reference keys that are accepted and not honoured: key -> (value that changes nothing, what the user loses)
NOT_HONOURED = {
    "monitor_mbs_grad": (False, "gradients are recorded per step (after the last micro-batch), not per micro-batch"),
    "cc_distribution": (None, "collective communication is not monitored"),
    "l2_targets": (None, "L2 features (attention entropy, stable rank) are not recorded"),
    "recording_l2_features": (False, "L2 features (attention entropy, stable rank) are not recorded"),
    "sa_order": (None, "L2 features are not recorded"),
    "mg_direction": (False, "the gradient/momentum direction agreement is not recorded"),
    "stack_info": (False, "module stacks are not written"),
    "append_output": ([], "every run writes its own folder"),
    "squash_name": (False, "names are written in full"),
    "opt_ty": (None, "the optimizer's type is read from the optimizer"),
}

BOOL_KEYS = ("xy_distribution", "all_xy", "forward_only", "backward_only", "wg_distribution", "mv_distribution",
             "ur_distribution", "param_distribution", "dynamic_on", "print_struct")
KNOWN_KEYS = ("targets", "ops", "eps", "ndigits", "format", "start_step", "step_interval", "collect_times",
              "step_count_per_record", "module_ranks", "alert", "golden", "action", *BOOL_KEYS, *NOT_HONOURED)
# per-target selectors of the reference ("input": "tuple[2]:0"): accepted, every tensor of the module is recorded
TARGET_KEYS = ("input", "output", "input_grad", "output_grad")


class MonitorConfigError(MsprobeError):
    """The monitor's config file is missing, not JSON, or holds a value that cannot be used."""


@dataclass(frozen=True)
class Target:
    """One `targets` key: a module or parameter name of named_modules()/named_parameters(), optionally prefixed with
    a model chunk ("0:layers.1"); `vpp_stage` None matches every chunk."""

    name: str
    vpp_stage: int | None = None

    def matches(self, name: str, vpp_stage: int) -> bool:
        return self.name == name and self.vpp_stage in (None, vpp_stage)

    def covers(self, name: str, vpp_stage: int) -> bool:
        """The target itself or something inside it (a sub-module, a parameter)."""
        if self.vpp_stage not in (None, vpp_stage):
            return False
        return self.name in ("", name) or name.startswith(self.name + ".")


@dataclass(frozen=True)
class AlertConfig:
    rules: tuple = ()          # (rule_name, read-only mapping of its args), in the config's order
    dump: bool = False         # the reference's anomaly.json is also written (anomaly.jsonl always is)


@dataclass(frozen=True)
class MonitorConfig:
    """A validated monitor config. `ops` keeps the config's order (the CSV columns); `record_ops` is the same set in
    OPS order (StepRecords.ops)."""

    targets: tuple = ()                # of Target; empty: every module and parameter
    xy_distribution: bool = False      # module inputs/outputs (actv) and their gradients (actv_grad)
    all_xy: bool = False               # with targets: every module's activations besides the targets'
    forward_only: bool = False
    backward_only: bool = False
    wg_distribution: bool = False      # weight gradients, before (grad_unreduced) and after (grad_reduced) reduction
    mv_distribution: bool = False      # optimizer moments (exp_avg, exp_avg_sq)
    ur_distribution: bool = False      # update ratio (update_ratio: statistics of dw / |w|)
    param_distribution: bool = False   # parameters before (param_origin) and after (param_updated) the update
    ops: tuple = ("norm",)
    eps: float = 1e-8
    ndigits: int = 6
    format: str = "csv"
    start_step: int = 0
    step_interval: int = 1
    collect_times: int = DEFAULT_COLLECT_TIMES
    step_count_per_record: int = 1
    dynamic_on: bool = False
    print_struct: bool = False
    module_ranks: tuple = ()           # ranks that record module activations; empty: all
    alert: AlertConfig = AlertConfig()
    golden: str | None = None          # MONITOR_OUTPUT_DIR of a monitored golden run (the live golden watch)
    action: str | None = None          # "stop": end training at the step boundary after the first anomaly
    warnings: tuple = field(default=(), compare=False)   # one line per key not honoured, for the monitor to log

    @property
    def record_ops(self) -> tuple:
        return tuple(op for op in OPS if op in self.ops)

    @property
    def activations(self) -> bool:
        return self.xy_distribution and not (self.forward_only and self.backward_only)

    @property
    def records_anything(self) -> bool:
        return self.activations or self.wg_distribution or self.mv_distribution or self.ur_distribution or \
            self.param_distribution

    def xy_target(self, module_name: str, vpp_stage: int) -> bool:
        """Whether this module's activations are recorded (targets name modules exactly; all_xy adds the rest)."""
        if not self.targets or self.all_xy:
            return True
        return any(t.matches(module_name, vpp_stage) for t in self.targets)

    def param_target(self, param_name: str, vpp_stage: int) -> bool:
        """Whether this parameter is recorded (a target module covers its parameters and its sub-modules')."""
        return not self.targets or any(t.covers(param_name, vpp_stage) for t in self.targets)


def _closest(key: str, known) -> str:
    found = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{found[0]}'?)" if found else ""


def _integer(data: dict, key: str, default: int, low: int) -> int:
    value = data.get(key, default)
    if isinstance(value, float) and value.is_integer():      # the reference writes collect_times as 1e8
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise MonitorConfigError(f"monitor config '{key}' must be an integer >= {low}, got {value!r}")
    return value


def _boolean(data: dict, key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise MonitorConfigError(f"monitor config '{key}' must be true or false, got {value!r}")
    return value


def _targets(value) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise MonitorConfigError(f"monitor config 'targets' must be an object of module names, got {value!r}")
    targets = []
    for key, spec in value.items():
        if spec is not None and not isinstance(spec, dict):
            raise MonitorConfigError(f"monitor config 'targets' entry {key!r} must be an object ({{}} or the "
                                     f"reference's input/output selectors), got {spec!r}")
        vpp, _, name = key.rpartition(":") if ":" in key else ("", "", key)
        if vpp and not vpp.isdigit():
            vpp, name = "", key
        targets.append(Target(name, int(vpp) if vpp else None))
    if any(t.name == "" for t in targets):       # the whole model
        return ()
    return tuple(targets)


def _ops(value, warnings: list) -> tuple:
    if value is None:
        return ("norm",)
    if not isinstance(value, list) or not all(isinstance(op, str) for op in value):
        raise MonitorConfigError(f"monitor config 'ops' must be a list of statistic names, got {value!r}")
    ops = []
    for op in value:
        if op in OPS:
            if op not in ops:
                ops.append(op)
        elif op in UNSUPPORTED_OPS:
            warnings.append(f"op {op!r} is not recorded")
        elif op not in SILENT_OPS:
            warnings.append(f"op {op!r} is unknown{_closest(op, OPS)} and is left out; known ops: {', '.join(OPS)}")
    if not ops:
        warnings.append("no valid op in 'ops': 'norm' is recorded")
        ops = ["norm"]
    return tuple(ops)


def _alert(value, warnings: list) -> AlertConfig:
    if value is None:
        return AlertConfig()
    if not isinstance(value, dict):
        raise MonitorConfigError(f"monitor config 'alert' must be an object with 'rules' and 'dump', got {value!r}")
    for key in value:
        if key not in ("rules", "dump"):
            warnings.append(f"alert key {key!r} is unknown{_closest(str(key), ('rules', 'dump'))} and is ignored")
    dump = value.get("dump", False)
    if not isinstance(dump, bool):
        raise MonitorConfigError(f"monitor config 'alert.dump' must be true or false, got {dump!r}")
    rules = value.get("rules", [])
    if not isinstance(rules, list):
        raise MonitorConfigError(f"monitor config 'alert.rules' must be a list of rules, got {rules!r}")
    parsed = []
    for rule in rules:
        if not isinstance(rule, dict) or not isinstance(rule.get("rule_name"), str):
            raise MonitorConfigError(f"each alert rule must be an object with a 'rule_name', got {rule!r}")
        name = rule["rule_name"]
        if name not in RULE_ARGS:
            raise MonitorConfigError(f"alert rule {name!r} is not supported{_closest(name, RULE_ARGS)}; supported "
                                     f"rules: {', '.join(RULE_ARGS)}")
        args = rule.get("args") or {}
        if not isinstance(args, dict):
            raise MonitorConfigError(f"the args of alert rule {name} must be an object, got {args!r}")
        for arg, required in RULE_ARGS[name].items():
            if required and arg not in args:
                raise MonitorConfigError(f"alert rule {name} needs args.{arg}")
        for arg, number in args.items():
            if arg not in RULE_ARGS[name]:
                warnings.append(f"alert rule {name}: argument {arg!r} is unknown and is ignored")
            elif isinstance(number, bool) or not isinstance(number, (int, float)) or not number > 0:
                raise MonitorConfigError(f"alert rule {name}: args.{arg} must be a positive number, got {number!r}")
        parsed.append((name, types.MappingProxyType({k: v for k, v in args.items() if k in RULE_ARGS[name]})))
    try:
        parse_rules(parsed)         # the rules' own checks (whole numbers, ranges), before training starts
    except AlertConfigError as exc:
        raise MonitorConfigError(f"monitor config: {exc}") from None
    return AlertConfig(tuple(parsed), dump)


def parse_config(data, source: str = "the monitor config") -> MonitorConfig:
    """A MonitorConfig from the parsed JSON object of a config file."""
    if not isinstance(data, dict):
        raise MonitorConfigError(f"{source} must hold a JSON object, got {type(data).__name__}")
    warnings: list = []
    for key in data:
        if key not in KNOWN_KEYS:
            warnings.append(f"config key {key!r} is unknown{_closest(str(key), KNOWN_KEYS)} and is ignored")
        elif key in NOT_HONOURED and data[key] not in (NOT_HONOURED[key][0], None, {}, []) and \
                not (key == "cc_distribution" and isinstance(data[key], dict) and not data[key].get("enable")):
            warnings.append(f"config key {key!r} is not honoured: {NOT_HONOURED[key][1]}")
    flags = {key: _boolean(data, key) for key in BOOL_KEYS}
    if flags["forward_only"] and flags["backward_only"]:
        warnings.append("forward_only and backward_only are both true: no activation is recorded")
    targets_value = data.get("targets")
    if isinstance(targets_value, dict) and any(isinstance(spec, dict) and set(spec) & set(TARGET_KEYS)
                                                for spec in targets_value.values()):
        warnings.append("the input/output selectors of 'targets' are not honoured: every tensor of a target "
                        "module is recorded")
    eps = data.get("eps", 1e-8)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise MonitorConfigError(f"monitor config 'eps' must be a non-negative number, got {eps!r}")
    fmt = data.get("format", "csv")
    if fmt not in FORMATS:
        raise MonitorConfigError(f"monitor config 'format' must be one of {', '.join(FORMATS)}, got {fmt!r}"
                                 f"{_closest(fmt, FORMATS) if isinstance(fmt, str) else ''}")
    ranks = data.get("module_ranks") or []
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0
                                              for r in ranks):
        raise MonitorConfigError(f"monitor config 'module_ranks' must be a list of ranks, got {ranks!r}")
    golden = data.get("golden")
    if golden is not None:
        if not isinstance(golden, str) or not golden.strip() or "\x00" in golden:
            raise MonitorConfigError(f"monitor config 'golden' must be the path of a monitored run, got {golden!r}")
        golden = os.path.abspath(os.path.expanduser(golden))
        if not os.path.isdir(golden):
            raise MonitorConfigError(f"monitor config 'golden': {golden} is not a directory (give the "
                                     "MONITOR_OUTPUT_DIR of a monitored golden run)")
    action = data.get("action")
    if action is not None and action not in ACTIONS:
        raise MonitorConfigError(f"monitor config 'action' must be \"stop\" or absent, got {action!r}")
    alert = _alert(data.get("alert"), warnings)
    if action and not (alert.rules or golden):
        warnings.append("'action': 'stop' has nothing to act on: no alert rule and no golden run")
    return MonitorConfig(
        targets=_targets(targets_value), ops=_ops(data.get("ops"), warnings), eps=float(eps),
        ndigits=_integer(data, "ndigits", 6, 0), format=fmt, start_step=_integer(data, "start_step", 0, 0),
        step_interval=_integer(data, "step_interval", 1, 1),
        collect_times=_integer(data, "collect_times", DEFAULT_COLLECT_TIMES, 0),
        step_count_per_record=_integer(data, "step_count_per_record", 1, 1), module_ranks=tuple(ranks),
        alert=alert, golden=golden, action=action, warnings=tuple(warnings), **flags)


def load_config(path) -> MonitorConfig:
    """Read and validate a monitor config file."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path or "\x00" in path:
        raise MonitorConfigError(f"config_file_path must be the path of a JSON file, got {path!r}")
    try:
        data = read_config_file(path)
    except DumpConfigError as exc:
        raise MonitorConfigError(f"monitor {exc}") from None
    return parse_config(data, f"the monitor config {path}")
