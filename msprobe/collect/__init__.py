"""The framework-free base of the data collectors (msprobe.pytorch, msprobe.mindspore): configuration, the step
folders, the crash-safe writer, statistics of host arrays, error handling and the life cycle. Nothing here imports
a framework. The interface (kept stable; additions only):

config.py
    DumpConfigError(MsprobeError)
    ConfigSpec(framework, tasks, levels, ignored_keys, section_ignored, other_sections): what one framework
        accepts; PYTORCH is the default, a framework derives its own with dataclasses.replace.
    load_config(config_path=None, spec=PYTORCH, **overrides) -> DumpConfig: config.json (the reference's format:
        task sections, rank, step, async_dump...) merged with keyword arguments (None ignored), validated in full:
        unknown keys (top level, task sections, keywords) name the closest known one; config_path must be str or
        os.PathLike; dump_path is created and must be writable (no NUL).
    DumpConfig(task, level, dump_path, step, rank, scope, api_list, data_mode, summary_mode, async_dump,
        framework, risk_level), frozen; wants_step(n), wants_rank(r).
    Ranges: step/rank sets kept as inclusive ranges ("0-100000000000" is two integers): `n in r`, bool(r),
        iter(r), r.intervals; Ranges.parse(name, config_list).

paths.py
    step_directory(dump_path, step, rank, pid=None) -> "<dump_path>/step<N>/rank<R>" or ".../proc<pid>".
    tensor_file_name(name, suffix=".pt") -> a file name for a tensor: '%', '/', '\\', control characters and lone
        surrogates escaped as %XX; over 255 bytes, cut and ended by '~' + 16 hex digits of a SHA-256 of the name.
    escape_file_name(name), NAME_MAX.

writer.py
    StepWriter(framework, task, level, save=None, suffix=".pt", errors=None): one process's steps.
        open(directory): start a step, or continue the step closed there (start() after stop() in one step);
        add(name, body, stack_lines_tuple_or_None): a complete entry, in call order (streamed to disk);
        reserve(name, body) -> Slot, then complete(slot): an entry whose place is taken before its data is in;
        add_construct(name, parent): construct.json (ignored at level L1, which writes {});
        save_tensor(name, tensor) -> data_name: `save(tensor, temporary_path)` then renamed into
            dump_tensor_data/<tensor_file_name(name, suffix)>; raises what save raised;
        close(incomplete=None) -> dump.json path or None: writes construct.json, stack.json, dump.json (with
            "incomplete": reason when given or when a write failed); never raises;
        call_soon(job): for signal handlers (run now, or when this thread leaves the writer);
        forget(): in a forked child, drop the step without touching the parent's files;
        directory, tensor_dir, is_open, failure, lost.
        Space is allocated (posix_fallocate) ahead of what is written, so that close() fits on a full disk.
    encode(value) -> bytes: a dump value as JSON (orjson; ints beyond 64 bits as exact numbers, lone surrogates as
        \\xNN text, other objects as str()); text_of(str).

stats.py
    array_statistics(numpy_array) -> {"Max", "Min", "Mean", "Norm"}: float64 reductions; integers give exact
        Max/Min; bool any/all with Mean/Norm None; complex: of the magnitudes; empty: all None.
    array_crc32(numpy_array) -> 8 hex digits of the bytes in row-major order.
    value_record(value) -> record of a plain Python value (bool, int, float, str, Ellipsis, slice) or None.
    NO_STATISTICS.

guard.py
    ErrorLog(prefix="msprobe dump"): once(key, message, *args) logs a warning the first time a key is seen;
        failed(what, name, exc, consequence) logs once per (exception type, what) and returns the one-line reason
        "what: Type: message" stored as dump_error.
    one_line(exc, limit=300).

debugger.py
    DebuggerBase(config, model=None): start(model=None), stop(), step(), step_scope(model=None) (a context
        manager: start; stop and step at exit; an exception is re-raised after the step is written, marked
        incomplete), running, current_step, config, writer, errors. A framework sets `framework` and `suffix`
        and overrides the hooks _models(model) -> list (usage errors raise), _rank(), _install(models),
        _uninstall() (any thread), _flush_pending(), _new_step(), _tidy(), _save(tensor, path).
        One debugger records at a time: a second start() stops the first (marked incomplete). At exit (atexit) and
        on SIGTERM (handler installed from the main thread while recording, the previous one called after) the
        recording step is written, marked incomplete. In the child of a fork made while recording nothing is
        recorded (_uninstall is called there) and the parent's files are left alone.
    Patches(errors): set(owner, name, replacement), restore() - only what still holds our replacement.
    active_debugger().
"""
