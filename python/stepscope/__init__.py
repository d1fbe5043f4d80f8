"""stepscope — what holds your training step back, measured from Python.

    import stepscope

    stepscope.set_config("batch_size", 64)
    for batch in stepscope.torch.steps(loader):   # one step per batch; the fetch is its "data" phase
        with stepscope.phase("forward"):
            loss = model(batch)
        with stepscope.phase("backward"):
            loss.backward()
        with stepscope.phase("optimizer"):
            opt.step()
    # at exit: stepscope-report.json and the summary with the verdict on stderr

The same C++ run time as the library's STEPSCOPE_PHASE: the same rings,
collector, analyzer, report, environment variables (STEPSCOPE=0,
STEPSCOPE_OUT, STEPSCOPE_WARMUP, ...) and the `stepscope` command line
afterwards (show, diff, ...). A phase costs a few hundred nanoseconds from
Python (bench/python_bench.py; docs/python.md).

Phases: ``with stepscope.phase(name):``, ``stepscope.phase(name, kind="memory")``,
``@stepscope.phase(name)`` on a function. Steps: ``with stepscope.step():``,
``stepscope.next_step()`` (ends the step it opened last on this thread and
opens the next, like ``torch.profiler``'s ``prof.step()``), or
``stepscope.torch.steps(iterable)``. The kind of a phase, when not given,
comes from its name as in C++: data → input; forward, backward, optimizer →
compute; h2d, d2h, copy → memory; comm, allreduce → communication; else other.

Wrong types raise TypeError / ValueError at the call; a phase used after
``finish()`` records nothing and warns (RuntimeWarning). Nothing here raises
into the training loop once a phase is open.
"""

import atexit as _atexit
import functools as _functools
import json as _json
import os as _os
import sys as _sys

from . import _core

__all__ = [
    "phase",
    "step",
    "next_step",
    "steps",
    "set_config",
    "note_collectives",
    "set_rank",
    "finish",
    "snapshot",
    "enabled",
    "KINDS",
]

__version__ = _core.__version__

# The report says the run came from Python (run.build["frontend"]) and the
# analyzer words its advice in this package's calls, not the C++ macros.
_core.set_frontend("python")

KINDS = _core.KINDS  # ("input", "compute", ...): the native library's one table of the kinds

# One native Phase per (name, kind), for the whole process: a `with` reuses
# it, so a phase costs a dict lookup and two native calls, no allocation. The
# number of distinct names is bounded by the native site table (4096; past
# it, names share "(other run-time names)" and the report counts them).
_by_name = {}
_by_name_and_kind = {}


def _make(name, kind):
    p = _core.make_phase(name, kind)
    if kind is None:
        _by_name[name] = p
    else:
        _by_name_and_kind[(name, kind)] = p
    return p


def phase(name, kind=None):
    """The phase called `name`: a context manager (``with``) and a decorator.

    `kind` is one of KINDS; None takes it from the name (see the module's
    help). Raises TypeError for a name that is not a str or a kind that is not
    a str, ValueError for an empty name or an unknown kind.
    """
    try:
        if kind is None:
            return _by_name[name]
        return _by_name_and_kind[(name, kind)]
    except KeyError:
        return _make(name, kind)
    except TypeError:  # unhashable: make_phase says what was wrong
        return _core.make_phase(name, kind)


def _decorate(self, fn):
    """``@stepscope.phase("forward")``: each call of fn is one occurrence."""
    if not callable(fn):
        raise TypeError(
            "stepscope.phase(...) used as a decorator needs a function, got " + type(fn).__name__
        )

    @_functools.wraps(fn)
    def timed(*args, **kwargs):
        with self:
            return fn(*args, **kwargs)

    return timed


_core.Phase.__call__ = _decorate

_step = None


def step():
    """``with stepscope.step():`` — one training step (its phases are its critical path)."""
    global _step
    if _step is None:
        _step = _core.make_phase("step", None, True)
    return _step


def next_step():
    """Ends the step the previous call opened on this thread and opens the next."""
    _core.next_step()


def steps(iterable):
    """``for item in stepscope.steps(iterable):`` — each iteration one step, each
    fetch (``iter()`` for the first item, ``next()`` after) that step's ``data``
    phase. A fetch that ends the iteration is a data phase outside any step;
    the last step closes when the loop ends (break and exceptions included:
    when the iterator is dropped or its ``close()`` is called). The same
    semantics as the C++ ``stepscope::steps``."""
    _record_process_group()
    return _core.StepIterator(iterable)


def set_rank(rank, world_size):
    """This process's rank among world_size: it names the report
    (``stepscope-report.rank<N>.json``) and lets ``stepscope merge`` line the
    ranks up. Taken from RANK / WORLD_SIZE (torchrun, mpirun, srun) and from an
    initialised ``torch.distributed`` at ``steps()`` / ``instrument()``; call it
    where neither knows (a launcher of your own)."""
    for value in (rank, world_size):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("stepscope.set_rank: rank and world_size must be ints, got " + type(value).__name__)
    _core.set_rank(rank, world_size)


def _record_process_group():
    # mp.spawn and hand-rolled launchers give init_process_group the rank as
    # an argument, not RANK in the environment: without this, every rank
    # wants ./stepscope-report.json. Only when the program uses
    # torch.distributed already (this package never imports torch).
    dist = _sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            _core.set_rank(int(dist.get_rank()), int(dist.get_world_size()))
    except Exception:  # a half-torn-down group: the environment's rank stays
        pass


def set_config(key, value):
    """Records one setting of the run in the report's run.config (str, int, float or bool)."""
    if not isinstance(key, str):
        raise TypeError("stepscope.set_config: the key must be a str, got " + type(key).__name__)
    _core.set_config(key, value)


def note_collectives(count, bytes):
    """Collectives the step ran (all-reduces, broadcasts...) and the bytes they moved: the communication
    advice tells a collective too small for bandwidth to matter (its latency is the cost) from one whose
    volume is. stepscope.torch.instrument() notes a DDP model's gradient buckets itself."""
    _core.note_collectives(int(count), int(bytes))


def finish():
    """Stops recording, writes the report and prints the summary. Returns the
    report's path ("" when disabled). Idempotent; also done at exit."""
    return _core.finish()


def snapshot():
    """The report as it stands now, as a dict (the JSON report's structure,
    docs/report-schema.md); the run goes on."""
    return _json.loads(_core.snapshot_json())


def enabled():
    """True while stepscope records (not STEPSCOPE=0, not finished, not in a forked child)."""
    return _core.enabled()


def _finish_at_python_exit():
    # Ctrl-C: an uncaught KeyboardInterrupt ends Python by re-raising SIGINT
    # after this hook, so the native exit handler never runs; the report is
    # written here, with ended_by "SIGINT". Python sets sys.last_value (3.12:
    # also sys.last_exc) to the uncaught exception before the atexit hooks.
    last = getattr(_sys, "last_exc", None) or getattr(_sys, "last_value", None)
    try:
        _note_uncaught_exception(last)
    except BaseException:  # the report is still written below
        pass
    # What the program printed comes before the report and the summary
    # (STEPSCOPE_OUT=/dev/stdout, `2>&1`): Python flushes its buffers only
    # after this hook.
    for stream in (_sys.stdout, _sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    try:
        _core.finish_at_python_exit(isinstance(last, KeyboardInterrupt))
    except BaseException:  # nothing may change how the program ends
        pass


def _note_uncaught_exception(last):
    # A script that died of an exception (a CUDA out-of-memory, a bad batch)
    # still exits through here: without this its report read as a whole run
    # that ended normally.
    if not _ended_by_exception(last):
        return
    kind = type(last)
    module = getattr(kind, "__module__", "builtins")
    name = getattr(kind, "__qualname__", kind.__name__)
    try:
        # Lone surrogates (bytes decoded with surrogateescape) cannot cross to C++ as UTF-8: escaped.
        message = str(last).encode("utf-8", "backslashreplace").decode("utf-8")
    except BaseException:  # a __str__ that raises: the type alone
        message = ""
    qualified = name if module in ("builtins", None) else module + "." + name
    _core.note_uncaught_exception(qualified.encode("utf-8", "backslashreplace").decode("utf-8"), message)


def _ended_by_exception(last):
    # sys.last_value is also the last exception an interactive session
    # (python -i, the REPL, IPython, Jupyter) printed and then went on from.
    if last is None or isinstance(last, (KeyboardInterrupt, SystemExit)):
        return False
    if _sys.flags.interactive or hasattr(_sys, "ps1"):
        return False
    ipython = _sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    try:
        return not (get_ipython is not None and get_ipython() is not None)
    except BaseException:
        return False


_atexit.register(_finish_at_python_exit)


# multiprocessing's forked children (DataLoader workers, Pool workers) end by
# os._exit(): no atexit hook and no native exit handler runs in them. With
# STEPSCOPE_CHILDREN=1 each writes its report from multiprocessing's own exit
# step instead (its finalizers, which run before that os._exit); a child that
# does not record returns at once. A child that is killed (SIGKILL, a
# terminate() of a hung worker) keeps its last snapshot.
def _finish_in_multiprocessing_child():
    try:
        _core.finish_at_python_exit(False)
    except BaseException:  # nothing may change how the worker ends
        pass


def _register_child_finish(_token):
    util = _sys.modules.get("multiprocessing.util")
    if util is not None:
        util.Finalize(None, _finish_in_multiprocessing_child, exitpriority=-100)  # after the worker's own


class _ForkToken:  # multiprocessing's after-fork registry holds its objects weakly
    pass


_fork_token = _ForkToken()


def _after_fork_in_child():
    # Runs in every forked child, before multiprocessing's bootstrap clears
    # the finalizers it inherited and runs its after-fork callbacks: the
    # finalizer is registered by one of those callbacks.
    util = _sys.modules.get("multiprocessing.util")
    if util is not None:
        try:
            util.register_after_fork(_fork_token, _register_child_finish)
        except BaseException:
            pass


_os.register_at_fork(after_in_child=_after_fork_in_child)


# stepscope.torch is imported on first use (it imports torch).
def __getattr__(name):
    if name == "torch":
        from . import torch as _torch_module

        return _torch_module
    raise AttributeError("module 'stepscope' has no attribute " + repr(name))
