"""The recording steps both collectors share (msprobe.pytorch, msprobe.mindspore): the config's filters, one guarded
recording step, and the input/output/gradient sections of an entry. A collector mixes `Recording` in and supplies
`config`, `errors` (guard.ErrorLog), `record(value, prefix)` (its framework's values into records) and, for
`list` at level mix, `enclosing()` (the module or cell calls open around the current call)."""

from __future__ import annotations

from msprobe.collect import filters


class Recording:
    output_sequences: tuple = (tuple,)     # the output types whose items are the call's outputs 0, 1, ...

    def enclosing(self):
        return ()

    def selected(self, name: str) -> bool:
        config = self.config
        if not config.scope and not config.api_list:      # no filter: everything (and no enclosing calls needed)
            return True
        return filters.selected(config, name, self.enclosing())

    def direction_ok(self, direction: str) -> bool:
        return filters.direction_ok(self.config, direction)

    def section_ok(self, section: str) -> bool:
        return filters.section_ok(self.config, section)

    def guard(self, name: str, body: dict, what: str, func):
        """Run one recording step; an error is logged once per kind and marks the entry (dump_error) instead of
        reaching the user's training."""
        try:
            return func()
        except Exception as exc:  # noqa: BLE001 - the user's training must go on
            body["dump_error"] = self.errors.failed(what, name, exc)
            return None

    def record_inputs(self, name: str, body: dict, args, kwargs) -> None:
        """The arguments, recorded before the call (in-place APIs change them)."""
        if not self.section_ok("input"):
            return

        def work():
            body["input_args"] = self.record(list(args), f"{name}.input")
            body["input_kwargs"] = {k: self.record(v, f"{name}.kwargs.{k}") for k, v in kwargs.items()}
        self.guard(name, body, "input", work)

    def record_outputs(self, name: str, body: dict, out) -> None:
        if not self.section_ok("output"):
            return
        values = list(out) if isinstance(out, self.output_sequences) else [out]
        self.guard(name, body, "output", lambda: body.__setitem__("output", self.record(values, f"{name}.output")))

    def record_backward(self, name: str, body: dict, grad_outputs, grad_inputs) -> None:
        """A backward entry: `input` = the gradients of the call's outputs, `output` = the gradients of its
        arguments (None: not known)."""
        if self.section_ok("input"):
            self.guard(name, body, "input",
                       lambda: body.__setitem__("input", self.record(list(grad_outputs), f"{name}.input")))
        if self.section_ok("output"):
            values = [] if grad_inputs is None else list(grad_inputs)
            self.guard(name, body, "output",
                       lambda: body.__setitem__("output", self.record(values, f"{name}.output")))
