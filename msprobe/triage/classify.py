"""The category of cause of a culprit, from the evidence of the rounds (never a judgement of its own: the culprit
is the compare's verdict; this only reads the two dumps' records of it, the tensor compare and the replay)."""

from __future__ import annotations

from dataclasses import dataclass

from msprobe.triage import evidence

DTYPE, ARGUMENT, KERNEL, NONDETERMINISM, CONVENTION, NON_FINITE = (
    "dtype/cast", "argument", "kernel precision", "nondeterminism", "framework convention", "nan/inf")

ADVICE = {
    DTYPE: "The op runs in another dtype than in the golden run (a cast, autocast or a low-precision accumulator): "
           "run it in the golden's dtype (or upcast its inputs and accumulate in float32) and check the cast in the "
           "source line above.",
    ARGUMENT: "The op is called differently from the golden run (another argument value, a missing or extra "
              "argument such as a bias, another axis, or an op the golden does not call): compare the call at the "
              "source line above with the golden's.",
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
}


@dataclass(frozen=True)
class Cause:
    category: str | None
    reason: str                 # one sentence of evidence
    advice: str


def classify(same_command: bool, target_record, golden_record, frameworks: tuple, replayed: dict | None,
             inputs_differ: bool | None, non_finite: bool = False, culprit: str = "") -> Cause:
    """target_record/golden_record: the culprit's forward entry in each dump (golden None when the golden has no
    such op); replayed: round 3's target replay ({"status": ...}) or None; inputs_differ: round 2's finding."""
    if non_finite:
        return _cause(NON_FINITE, "its outputs hold NaN/Inf although its inputs are finite")
    if same_command:
        return _cause(NONDETERMINISM, "the same command, run twice, gives different outputs at this op")
    if golden_record is None:
        made = _cast(target_record)
        if made:
            return _cause(DTYPE, f"the golden run does not call this op at this point: a cast to {made} the golden "
                                 "does not make")
        return _cause(ARGUMENT, "the golden run does not call this op at this point")
    target_args, golden_args = evidence.signature(target_record), evidence.signature(golden_record)
    target_dtypes, golden_dtypes = evidence.tensor_dtypes(target_record), evidence.tensor_dtypes(golden_record)
    cross = bool(frameworks[0] and frameworks[1] and frameworks[0] != frameworks[1])
    dtypes = (f"its tensors are {_list(target_dtypes)} in the target and {_list(golden_dtypes)} in the golden")
    if cross:
        if set(target_dtypes) != set(golden_dtypes):
            return _cause(DTYPE, dtypes)
        return _cause(CONVENTION, "the same op in two frameworks, with the same dtypes")
    differences = _argument_differences(target_args, golden_args)
    structural = len(target_args) != len(golden_args) or any(
        t[1] != g[1] for t, g in zip(target_args, golden_args))
    if structural:
        return _cause(ARGUMENT, "its arguments differ: " + "; ".join(differences[:3]))
    if target_dtypes != golden_dtypes:
        return _cause(DTYPE, dtypes)
    if differences:
        return _cause(ARGUMENT, "its arguments differ: " + "; ".join(differences[:3]))
    if culprit.startswith("Primitive.") and inputs_differ is False:
        return _cause(ARGUMENT, "same inputs and dtypes, different outputs; a Primitive's attributes (epsilon, axis, "
                                "...) are not recorded in the dump: compare how its cell is built")
    if replayed and replayed.get("status") in ("error", "warning"):
        return _cause(KERNEL, f"replayed on the target's inputs it fails the CPU high-precision benchmark "
                              f"({replayed['status']})")
    if inputs_differ:
        return _cause(KERNEL, "same dtypes and arguments; its inputs already differ slightly and its output "
                              "differs more than they explain")
    return _cause(KERNEL, "same inputs, dtypes and arguments, different outputs")


def _cast(record) -> str:
    """The dtypes an op's outputs have that none of its tensor inputs has (a cast: `Tensor.to(float16)` of a float32
    tensor), '' when none."""
    inputs = {str(leaf[2]).rpartition(".")[2].lower() for leaf in evidence.signature(record) if leaf[3] is not None}
    outputs = [str(d).rpartition(".")[2].lower() for d in evidence.output_dtypes(record) if d]
    made = [d for d in dict.fromkeys(outputs) if d not in inputs]
    return "/".join(made) if inputs and made else ""


def _cause(category: str, reason: str) -> Cause:
    return Cause(category, reason, ADVICE[category])


def _list(dtypes) -> str:
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
