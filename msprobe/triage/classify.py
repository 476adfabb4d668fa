"""What the triage names and why, from the compare core's answer and the evidence of the rounds, never a judgement of
its own: the culprit is the compare's verdict (-da's culprit record: the row, its cause, the API inside a module
culprit where the runs first part), the dtype-aware answer says whether anything lies beyond what the dtypes
explain; this module only reads them (judge), then the two dumps' records of the culprit, the tensor compare and
the replay for the category of cause (classify)."""

from __future__ import annotations

from dataclasses import dataclass, field

from msprobe.compare.verdict import CAUSE_ENTERS, CAUSE_EXTRA, CAUSE_PARTED, CAUSE_PRECISION  # noqa: F401
from msprobe.triage import evidence

# advice of particular causes within a category
EXTRA_OP, PRIMITIVE, BUILT = "extra op", "primitive attributes", "built module"
DTYPE, ARGUMENT, KERNEL, NONDETERMINISM, CONVENTION, NON_FINITE, INPUT, MODULE_CODE = (
    "dtype/cast", "argument", "kernel precision", "nondeterminism", "framework convention", "nan/inf", "input",
    "module code")
CATEGORIES = (NON_FINITE, NONDETERMINISM, INPUT, MODULE_CODE, ARGUMENT, DTYPE, CONVENTION, KERNEL)

# what triage answers after round 1 (Findings.outcome)
AGREE, CULPRIT, DIFFER, DTYPE_ONLY = "agree", "culprit", "differ", "dtype"

# {where}: "at the source line above" when a source line is shown, else how to find the call
ADVICE = {
    DTYPE: "The op runs in another dtype than in the golden run (a cast, autocast or a low-precision accumulator): "
           "if that is not intended, run it in the golden's dtype (or upcast its inputs and accumulate in float32); "
           "check the cast {where}.",
    ARGUMENT: "The op is called differently from the golden run (another argument value, a missing or extra "
              "argument such as a bias, another axis, or an op the golden does not call): compare the call {where} "
              "with the golden's.",
    KERNEL: "Same op, same dtypes, same arguments, different result: the kernel itself differs (its precision or "
            "summation order). Check it against the replay's benchmark; if the error is within what its dtype allows, "
            "it is rounding that later ops amplify.",
    NONDETERMINISM: "The same command gives different numbers at this op: it is nondeterministic (an unseeded random "
                    "op, atomics in a parallel reduction, an unordered scatter). Seed it, or enable deterministic "
                    "algorithms (torch.use_deterministic_algorithms(True) / mindspore.set_context(deterministic='ON')).",
    CONVENTION: "The two frameworks implement this op by different conventions (a default eps, an approximation, a "
                "layout): map the argument or accept the difference (docs/cross_framework.md).",
    NON_FINITE: "This op turns finite inputs into NaN/Inf (log or sqrt of a negative, a division by zero, an "
                "overflow in a low-precision dtype): guard its inputs or compute it in a wider dtype.",
    INPUT: "An input of this op differs while everything dumped before it is identical: no dumped op made the "
           "difference. Find where the two runs make that input: the data (another dataset, preprocessing, order "
           "or seed), a weight or buffer no module entry records, or a tensor the code builds without a dumped op "
           "(a constant, a NumPy or Python value, a random draw); the call is {where}.",
    EXTRA_OP: "The target run calls this op and the golden run does not: an added scale, activation or step. Remove "
              "it {where}, or add it to the golden script if it is intended.",
    PRIMITIVE: "A MindSpore Primitive's attributes (epsilon, momentum, axis, ...) are set where its cell is built and "
               "are not recorded in the dump: compare how the two runs build this cell (its constructor's "
               "arguments, the call is {where}).",
    BUILT: "Nothing inside this {kind} is recorded (a framework's {kind}: in GRAPH_MODE, or at level L0, the ops it "
           "runs are not in the dump), so how it is built is not in the dump either: compare how the two runs build "
           "it (its constructor's arguments: an epsilon, a momentum, an axis, a flag) and its parameters; its call is "
           "{where}.",
    MODULE_CODE: "No op dumped inside this module differs, only its output: the difference lies in the module's "
                 "own code between its children (an operation the collector does not record: a residual or scale "
                 "written in Python, an in-place change, indexing; or an op one run calls and the other does not). "
                 "Compare its {method} {where} between the two runs.",
}
ADVICE_DTYPE_ONLY = ("If the lower precision is intended (autocast, AMP, a cast), nothing is wrong beyond it: the "
                     "runs agree within what that dtype allows (compare against a golden in the same dtype to judge "
                     "the rest). If it is not, the precision drops {where}: remove the cast or run it in the golden's "
                     "dtype.")
WHERE_SHOWN = "at the source line above"
WHERE_NOT_SHOWN = "where the op is called (the dump records no source line for it: dump with stack information)"


@dataclass(frozen=True)
class Cause:
    category: str | None
    reason: str                 # one sentence of evidence
    key: str = ""               # its advice (ADVICE): the category's, or a particular cause's within it

    def advice(self, has_source: bool, culprit: str = "") -> str:
        return advice(self.key or self.category, has_source, culprit)


@dataclass
class Judged:
    """What the triage names after round 1 (judge): the outcome and, for a culprit, the entry whose tensors rounds
    2 and 3 dump and replay."""

    outcome: str                          # AGREE | CULPRIT | DIFFER | DTYPE_ONLY
    culprit: str | None = None            # the entry named: the verdict's, the API inside a module culprit, or the
    #                                       first NaN/Inf op when the verdict names none
    module: str | None = None             # its module (for a module culprit: the module itself)
    cause: str = ""                       # the verdict's cause of the culprit row (compare/verdict.CAUSE_*)
    non_finite: bool = False              # the culprit is the first op turning finite inputs into NaN/Inf
    inside: bool = False                  # the API inside the verdict's module culprit (its inputs already differ)
    module_level: bool = False            # a module culprit with no op inside it differing: its own code
    note: str = ""                        # DIFFER / DTYPE_ONLY: what the runs' differences are
    dtype_change: dict = field(default_factory=dict)   # DTYPE_ONLY: where the precision drops


def judge(first, same_command: bool) -> Judged:
    """The triage's answer after round 1, read from the compare core (`first`: rounds.Statistics)."""
    non_finite = first.non_finite if first.non_finite and not first.golden_non_finite else None
    if not first.differs and not non_finite:
        return Judged(AGREE)
    if first.culprit is None:
        if non_finite:
            return Judged(CULPRIT, non_finite, non_finite=True)
        return Judged(DIFFER, note=_differ_note(first))
    if first.cause == CAUSE_PRECISION and first.dtype_aware is None and not non_finite and not same_command:
        return Judged(DTYPE_ONLY, note=_dtype_note(first), dtype_change={"op": first.culprit, "module": first.module})
    if first.inside:
        return Judged(CULPRIT, first.inside, first.culprit, cause=CAUSE_ENTERS, inside=True,
                      non_finite=first.inside == non_finite)
    # a module whose own output differs (not one where the difference enters at its inputs: that is the input's)
    module_level = evidence.is_module(first.culprit) and first.cause != CAUSE_ENTERS
    return Judged(CULPRIT, first.culprit, first.culprit if module_level else first.module, cause=first.cause,
                  module_level=module_level, non_finite=first.culprit == non_finite)


def _differ_note(first) -> str:
    where = f"first at {first.first_divergence}"
    if first.first_inputs_differ:
        return (f"the runs differ ({where}, whose inputs already differ: made by no dumped op, by no more than the "
                "compare counts as rounding), but no op makes an error or warning of its own.")
    return f"the runs differ ({where}), but no op makes an error or warning of its own: rounding carried along."


def _dtype_note(first) -> str:
    return ("the runs differ in dtype, and every difference is what that dtype explains (the compare's dtype-aware "
            "answer: no op introduces error beyond its inputs and the dtypes' rounding).")


def advice(key: str | None, has_source: bool, module: str = "") -> str:
    """The advice of a category (or of a particular cause, ADVICE's keys); where it points at the call, it says
    whether a source line is shown."""
    if key is None:
        return ""
    where = WHERE_SHOWN if has_source else WHERE_NOT_SHOWN
    method = "construct (its definition)" if module.startswith("Cell.") else "forward (its definition)"
    return ADVICE[key].format(where=where, method=method, kind="cell" if module.startswith("Cell.") else "module")


def dtype_only_advice(has_source: bool) -> str:
    return ADVICE_DTYPE_ONLY.format(where=WHERE_SHOWN if has_source else "where the op is called")


def classify(same_command: bool, target_record, golden_record, frameworks: tuple, replayed: dict | None,
             inputs_differ: bool | None, non_finite: bool = False, culprit: str = "", cause: str = "",
             module_calls: str = "", built_in: bool = False) -> Cause:
    """target_record/golden_record: the culprit's forward entry in each dump (golden None when the golden has no
    such op); replayed: round 3's target replay ({"status": ...}) or None; inputs_differ: round 2's finding (or the
    statistics' when round 2 compared none); cause: the verdict's cause of the culprit row (compare/verdict.CAUSE_*;
    "" when unknown: the category then follows the records alone); module_calls: for a module culprit, the ops one
    run calls inside it and the other does not (evidence.calls_inside); built_in: a module culprit inside which
    nothing is recorded and whose class the user's files do not define (a framework's LayerNorm cell in GRAPH_MODE).
    The advice is filled in by advice()."""
    if non_finite:
        return _cause(NON_FINITE, "its outputs hold NaN/Inf although its inputs are finite")
    if same_command:
        return _cause(NONDETERMINISM, "the same command, run twice, gives different outputs at this op")
    if cause == CAUSE_ENTERS:
        return _cause(INPUT, "its inputs already differ while everything dumped before it is identical: the "
                             "difference enters here, made by no dumped op")
    if evidence.is_module(culprit) and built_in:
        inputs = "while its inputs are identical" if inputs_differ is False else \
            "beyond what its inputs and dtypes explain"
        return _cause(ARGUMENT, f"nothing inside it is recorded and its output differs {inputs}: how it is built "
                                "(its constructor's arguments) or its parameters differ", BUILT)
    if evidence.is_module(culprit):
        return _cause(MODULE_CODE, "no op dumped inside it differs, only its output: the difference lies in the "
                                   "module's own code between its children" + (f" ({module_calls})" if module_calls
                                                                                else ""))
    made = _cast(target_record)
    if cause == CAUSE_EXTRA or (golden_record is None and not cause):
        if made:
            return _cause(DTYPE, f"the golden run does not call this op at this point: a cast to {made} the golden "
                                 "does not make")
        return _cause(ARGUMENT, "the golden run does not call this op at this point (an extra op: its output is "
                                "what first differs)", EXTRA_OP)
    if cause == CAUSE_PARTED:         # the golden's call of the same count is another op: its arguments are not
        if made:                      # this one's to compare with
            return _cause(DTYPE, f"a cast to {made} where the golden's call of the same count casts otherwise: the "
                                 "runs make other casts from here on (their tensors differ in shape)")
        return _cause(ARGUMENT, "the two runs' tensors differ in shape from here on: the runs call different ops "
                                "here, or one run makes an extra call that shifts the call counts (-fm pairs calls "
                                "by their order under each module)")
    if golden_record is None:
        golden_record = {}
    target_args, golden_args = evidence.signature(target_record), evidence.signature(golden_record)
    target_dtypes, golden_dtypes = evidence.tensor_dtypes(target_record), evidence.tensor_dtypes(golden_record)
    dtypes = f"its tensors are {dtype_list(target_dtypes)} in the target and {dtype_list(golden_dtypes)} in the golden"
    cross = bool(frameworks[0] and frameworks[1] and frameworks[0] != frameworks[1])
    if cross:
        if cause == CAUSE_PRECISION or (not cause and set(target_dtypes) != set(golden_dtypes)):
            return _cause(DTYPE, dtypes)
        return _cause(CONVENTION, "the same op in two frameworks" + (", with the same dtypes" if
                                                                      set(target_dtypes) == set(golden_dtypes) else
                                                                      f" ({dtypes}, which explain only part of it)"))
    differences = _argument_differences(target_args, golden_args)
    if differences:
        return _cause(ARGUMENT, "its arguments differ: " + "; ".join(differences[:3]))
    if target_dtypes != golden_dtypes and cause in ("", CAUSE_PRECISION):
        return _cause(DTYPE, dtypes)
    beyond = "" if target_dtypes == golden_dtypes else f" ({dtypes}: they explain only part of its error)"
    if culprit.startswith("Primitive.") and not (replayed and replayed.get("status") == "error"):
        same = "same inputs and dtypes, different outputs" if inputs_differ is False else \
            "its output differs beyond what its inputs and dtypes explain" + beyond
        return _cause(ARGUMENT, same + "; a Primitive's attributes (epsilon, axis, ...) are not recorded in the "
                                       "dump: compare how its cell is built", PRIMITIVE)
    if replayed and replayed.get("status") in ("error", "warning"):
        return _cause(KERNEL, f"replayed on the target's inputs it fails the CPU high-precision benchmark "
                              f"({replayed['status']})" + beyond)
    if inputs_differ:
        return _cause(KERNEL, "same arguments; its inputs already differ slightly and its output differs more than "
                              "they and the dtypes explain" + beyond)
    return _cause(KERNEL, "same inputs and arguments, different outputs" + beyond)


def _cast(record) -> str:
    """The dtypes an op's outputs have that none of its tensor inputs has (a cast: `Tensor.to(float16)` of a float32
    tensor), '' when none."""
    inputs = {str(leaf[2]).rpartition(".")[2].lower() for leaf in evidence.signature(record) if leaf[3] is not None}
    outputs = [str(d).rpartition(".")[2].lower() for d in evidence.output_dtypes(record) if d]
    made = [d for d in dict.fromkeys(outputs) if d not in inputs]
    return "/".join(made) if inputs and made else ""


def _cause(category: str, reason: str, key: str = "") -> Cause:
    return Cause(category, reason, key)


def dtype_list(dtypes) -> str:
    names = list(dict.fromkeys(dtypes))
    return "/".join(names) or "?"


def _argument_differences(target: list, golden: list) -> list:
    if len(target) != len(golden):
        return [f"{len(target)} arguments in the target, {len(golden)} in the golden"]
    found = []
    for (path, kind, _dtype, shape, value), (_, g_kind, _g_dtype, g_shape, g_value) in zip(target, golden):
        if (shape is None) != (g_shape is None) or kind == "None" or g_kind == "None":
            if kind != g_kind:
                found.append(f"{path} is {kind} in the target, {g_kind} in the golden")
        elif shape is not None and tuple(shape) != tuple(g_shape):
            found.append(f"{path} has shape {list(shape)} in the target, {list(g_shape)} in the golden")
        elif shape is None and value != g_value:
            found.append(f"{path} = {value!r} in the target, {g_value!r} in the golden")
    return found
