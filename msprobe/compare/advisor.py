"""The advisor: name the culprit row (compare/verdict.py: the first row of the highest level, an error or a warning
made at that op) and its likely cause (DECISIONS 6)."""

from __future__ import annotations

from dataclasses import dataclass

from msprobe.compare import rules
from msprobe.compare.verdict import (
    MSG_ENTERS,
    MSG_EXTRA_CHANGE,
    MSG_EXTRA_OP,
    MSG_FIRST_CAST,
    MSG_HIDDEN_CAST,
    MSG_INTRODUCED,
    MSG_PARAMETER,
    MSG_PARTED,
    culprit_row,
)
from msprobe.frameworks.dtypes import canonical

_DETERMINISM_OPS = ("conv2d", "conv3d", "matmul", "nll_loss", "layer_norm", "lstm")

ADVICE_OK = "All data in comparison result meets the accuracy requirements."
ADVICE_ONLY_CARRIED = ("No op makes an error or a warning of its own: the {count} warning/error rows carry a "
                       "difference from their inputs or lie within the dtypes' rounding.")
ADVICE_NOTHING_MATCHED = ("No target item found a golden partner: check that both dumps come from the same model, "
                          "step and dump level, or try fuzzy matching (-fm) when call counts differ.")
ADVICE_DTYPE = ("The two runs use different dtypes here (for example bfloat16 against float32): a cast in the "
                "model code, autocast/AMP settings or a different default dtype. If the precision change is "
                "intended, judge this op by its statistics; otherwise align the dtypes and dump again.")
ADVICE_SHAPE = ("The tensor shapes differ: the two runs do not execute the same computation here (different "
                "model configuration, batch, sequence length or parallel split). Align the set-ups first.")
ADVICE_FORWARD_INPUT = ("The input of this forward op already differs. Look upstream: the op that produced it, "
                        "an in-place overwrite between the two calls, or memory corruption.")
ADVICE_FORWARD_OUTPUT = ("The inputs agree but the output differs: the forward computation of this op is "
                         "suspect. Reproduce it alone (same inputs, both devices) to confirm.")
ADVICE_BACKWARD_INPUT = ("The incoming gradient of this op differs. Check first whether the forward results "
                         "of the ops after it already differ.")
ADVICE_BACKWARD_OUTPUT = ("The incoming gradient agrees but the outgoing gradient differs: the backward "
                          "computation of this op is suspect.")
ADVICE_DETERMINISM = ("This op has non-deterministic implementations on some devices. Enable deterministic "
                      "computation in both runs and compare again before suspecting its precision.")
ADVICE_BATCH_NORM = ("The running statistics of batch norm differ: check that both runs start from the same "
                     "checkpoint and use the same momentum and training/eval mode.")
ADVICE_PARAMETERS = ("The parameters differ: check weight loading and initialisation, or the optimizer update "
                     "of the previous step.")
ADVICE_NAN = ("The target produced NaN or Inf where the golden did not: look for an overflow (float16/bfloat16 "
              "range), a division by zero or a log of zero in this op or just before it.")
ADVICE_OTHER = "The values of this row differ beyond the thresholds; compare its inputs and outputs."
ADVICE_HIDDEN_CAST = ("The module's inputs are identical but its output differs by the rounding of a lower precision: "
                      "something inside it runs in bfloat16/float16 (autocast, a .to() or .half()). If intended, "
                      "the difference is expected; otherwise find the cast inside the module (a mix-level dump "
                      "shows its APIs).")
ADVICE_EXTRA_OP = ("The target run calls this op and the golden run does not (no golden op matches it), and its output "
                   "is the first tensor the runs differ on: an added scale, activation or cast. Remove it, or add "
                   "it to the golden script if it is intended.")
ADVICE_EXTRA_CHANGE = ("The target run calls this op and the golden run does not (no golden op matches it), and it "
                       "changes the values that the golden run passes on unchanged: an added scale, activation or "
                       "cast. Remove it, or add it to the golden script if it is intended.")
ADVICE_PARTED = ("The two runs part here: from this row on their tensors differ in shape. Either they call different "
                 "ops here, or one run makes an extra call (or misses one) and every later call of its API is paired "
                 "with the wrong partner. Compare again with -fm (pairs calls by their order under each module) to "
                 "see which op the other run does not call; if the shapes differ because the set-ups do (batch, "
                 "sequence length, parallel split), align them first.")
ADVICE_OP_INTRODUCED = ("The inputs of this op explain only a part of its output error: the op itself computes "
                        "differently (a kernel, an argument, an implementation). Reproduce it alone with the dumped "
                        "inputs (msprobe op_generate) or dump its real tensors.")
# op_generate writes PyTorch scripts only: a MindSpore target is checked alone by acc_check
ADVICE_OP_INTRODUCED_MINDSPORE = ("The inputs of this op explain only a part of its output error: the op itself "
                                  "computes differently (a kernel, an argument, an implementation). Check it alone "
                                  "against its CPU/float64 benchmark with msprobe acc_check on a real-data dump of "
                                  "this API, or dump its real tensors.")
ADVICE_INTRODUCED = ("First introduced error (Error_Origin, beyond what its inputs and the dtypes' precision "
                     "explain): row {row}, {node}. Start there; rows marked inherited or dtype after it follow "
                     "from it or from the lower precision.")
ADVICE_NONE_INTRODUCED = ("Error_Origin: no row is introduced - every difference is carried from the inputs or within "
                          "the rounding of the lower-precision dtype.")
ADVICE_NONE_INTRODUCED_CULPRIT = ("Error_Origin: no output is introduced (beyond what its inputs and the dtypes' "
                                  "rounding explain); the culprit above is named by its own Err_message (an error "
                                  "its inputs do not explain, or the precision dropping there), and the rows after "
                                  "it carry its difference.")
ROW_TEXT = "the row of the table file; its header is row 1"
ADVICE_ENTERS = ("Error_Origin: no op introduces error - the difference enters at row {row}, {node}, which no dumped "
                 "op makes (a parameter or an input: the weights, the data); the rows after it carry it.")


@dataclass(frozen=True)
class Advice:
    row: int | None     # 1-based data row of the culprit, None when there is none
    node: str           # its item name, "NA" when there is none
    text: str
    judged: bool = False                # Error_Origin was judged (statistics and tensor modes)
    introduced_row: int | None = None   # 1-based data row of the first `introduced` output
    introduced_node: str = "NA"
    enters: bool = False                # the culprit is a parameter or input where the difference enters

    def lines(self) -> list:
        """The advisor file's lines; every row named is the row the user opens in the table file (the header is
        its row 1, the first data row row 2: file_row)."""
        where = f"{file_row(self.row)} ({ROW_TEXT})" if self.row is not None else "NA"
        lines = [f"Line: {where}", f"Suspect Nodes: {self.node}", f"Expert Advice: {self.text}"]
        if self.judged:
            lines.append(self.origin_text())
        return lines

    def origin_text(self) -> str:
        if self.introduced_row is None:
            if self.enters:
                return ADVICE_ENTERS.format(row=file_row(self.row), node=self.node)
            return ADVICE_NONE_INTRODUCED if self.row is None else ADVICE_NONE_INTRODUCED_CULPRIT
        return ADVICE_INTRODUCED.format(row=file_row(self.introduced_row), node=self.introduced_node)


def file_row(row: int | None) -> int | None:
    """The row of the table file (csv, or an xlsx sheet: the header is row 1) holding 1-based data row `row`."""
    return None if row is None else row + 1


def advise(names: list, states: list, results: list, messages: list, matched: int = 1,
           origins: list | None = None, culprit: int | None = -1, dtypes: tuple | None = None,
           framework: str = "pytorch") -> Advice:
    """The culprit row (given, or found from the cells: compare/verdict.culprit_row) and its likely cause; with
    origins (the Error_Origin column), also the first `introduced` row. dtypes: (target, golden) dtype per row, the
    structured fields the dtype advice reads (None: read from the messages' dtype error); framework: the target's
    (MindSpore: no op_generate advice)."""
    extra: dict = {}
    if origins is not None:
        first = next((row for row, origin in enumerate(origins) if origin == "introduced"), None)
        extra = {"judged": True, "introduced_row": None if first is None else first + 1,
                 "introduced_node": "NA" if first is None else names[first]}
    if not matched:
        return Advice(None, "NA", ADVICE_NOTHING_MATCHED)
    if culprit == -1:
        culprit = culprit_row(states, results, messages, origins)
    if culprit is not None:
        if dtypes is not None:
            differ = _dtypes_differ(dtypes[0][culprit], dtypes[1][culprit])
        else:
            differ = rules.MSG_DTYPE in messages[culprit]
        text = _advice_for(names[culprit], states[culprit], messages[culprit], differ, framework)
        enters = MSG_PARAMETER in messages[culprit] or MSG_ENTERS in messages[culprit] or states[culprit] == "input"
        return Advice(culprit + 1, names[culprit], text, enters=enters, **extra)
    flagged = sum(1 for result in results if result in ("warning", "error"))
    return Advice(None, "NA", ADVICE_ONLY_CARRIED.format(count=flagged) if flagged else ADVICE_OK, **extra)


def _dtypes_differ(target, golden) -> bool:
    """The two runs' dtypes of a row differ (canonical names: torch.float32 is Float32 is float32); a row without
    a dtype on a side (no partner, a null) has none to differ."""
    if not isinstance(target, str) or not isinstance(golden, str) or target in ("N/A", "") or golden in ("N/A", ""):
        return False
    return canonical(target) != canonical(golden)


def _advice_for(name: str, state: str, message: str, dtypes_differ: bool, framework: str = "pytorch") -> str:
    if MSG_HIDDEN_CAST in message:
        return ADVICE_HIDDEN_CAST
    if MSG_EXTRA_OP in message:
        return ADVICE_EXTRA_OP
    if MSG_EXTRA_CHANGE in message:
        return ADVICE_EXTRA_CHANGE
    if MSG_PARTED in message:
        return ADVICE_PARTED
    if dtypes_differ or MSG_FIRST_CAST in message:
        return ADVICE_DTYPE
    if MSG_INTRODUCED in message and "error:" not in message:
        return ADVICE_OP_INTRODUCED_MINDSPORE if framework == "mindspore" else ADVICE_OP_INTRODUCED
    if rules.MSG_SHAPE in message:
        return ADVICE_SHAPE
    if "nan/inf" in message or "inf or nan" in message:
        return ADVICE_NAN
    lowered = name.lower()
    determinism = any(op in lowered for op in _DETERMINISM_OPS)
    if state in ("parameters", "parameters_grad"):
        return ADVICE_PARAMETERS
    if ".forward" in name:
        if "batch_norm" in lowered and name.endswith(".input.1"):
            return ADVICE_BATCH_NORM
        if state == "output":
            return ADVICE_DETERMINISM if determinism else ADVICE_FORWARD_OUTPUT
        return ADVICE_FORWARD_INPUT
    if ".backward" in name:
        if state == "output":
            return ADVICE_DETERMINISM if determinism else ADVICE_BACKWARD_OUTPUT
        return ADVICE_BACKWARD_INPUT
    return ADVICE_OTHER
