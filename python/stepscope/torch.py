"""stepscope.torch — the PyTorch idioms (torch >= 1.13), without editing the loop body.

    import stepscope.torch

    stepscope.torch.instrument(model, optimizer)        # forward, backward, optimizer phases
    for x, y in stepscope.torch.steps(loader):          # one step per batch, the fetch its "data" phase
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

steps(loader): each iteration is one step; each fetch (``iter(loader)`` for
the first batch — a DataLoader starts its workers there — and ``next()``
after) is that step's ``data`` phase (kind input). A fetch that finds the end
is a data phase outside any step; the last step ends with the loop (break and
exceptions included). For a DataLoader (also inside a progress bar:
``steps(tqdm(loader))``; ``tqdm(steps(loader))`` shows the loader's length) it also records its num_workers,
batch_size, pin_memory and persistent_workers with set_config, so ``stepscope diff`` names the change
between two runs; instrument() records the optimizer's class.

instrument(model, optimizer): phases from the model's own hooks, as a
hand-instrumented loop would have them:
  forward    each call of the model's forward (wrapped, not hooked: in
             torch 1.13 an exception in forward skips the forward hook and
             would leave the phase open); ``submodules=True`` adds one phase
             per named submodule, "forward.<name>" (kind compute), nested in
             it. The wrapper sits on the module's class and times only the
             instrumented instances: nothing is added to the model itself, so
             ``torch.save(model)`` and ``copy.deepcopy(model)`` work as without
             stepscope (a copy is not timed);
  backward   each ``torch.autograd.backward`` (``loss.backward()``) made
             while instrumented after a forward of the model, on the calling
             thread;
  optimizer  each ``optimizer.step()``.
Returns a handle; ``handle.remove()`` takes everything back out.

DataLoader workers: with num_workers > 0 the batches are produced in worker
processes (forked or spawned); their time is not in this process's report.
What the step waits for — the main thread's fetch — is the data phase, and
that is what decides the verdict. STEPSCOPE_CHILDREN=1 lets forked workers
write their own reports (docs/report-schema.md).

GPU: when the model's parameters are on a CUDA device and the native module
was built with CUDA, the forward pre-hook binds torch's current stream to
this thread's phases (stepscope::set_stream), so phases get device times from
CUDA events on that stream; nothing synchronises. Not yet run on a GPU
(docs/python.md).
"""

import functools as _functools
import threading as _threading
import types as _types
import weakref as _weakref

import torch as _torch

import stepscope as _stepscope
from stepscope import _core

__all__ = ["steps", "instrument"]


def _data_loader_in(loader):
    # A progress bar keeps what it wraps: steps(tqdm(loader)) is still a
    # DataLoader's loop (tqdm and its subclasses: .iterable).
    for _ in range(4):
        if isinstance(loader, _torch.utils.data.DataLoader):
            return loader
        inner = getattr(loader, "iterable", None)
        if inner is None or inner is loader:
            return None
        loader = inner
    return None


def _record_loader_config(loader):
    loader = _data_loader_in(loader)
    if loader is None:
        return
    _stepscope.set_config("num_workers", int(loader.num_workers))
    if loader.batch_size is not None:
        _stepscope.set_config("batch_size", int(loader.batch_size))
    _stepscope.set_config("pin_memory", bool(loader.pin_memory))
    # What an epoch's iter(loader) restarts (the loop_restart finding). Recorded
    # whatever num_workers is, so that 0 -> 4 workers stays one config change.
    _stepscope.set_config("persistent_workers", bool(getattr(loader, "persistent_workers", False)))
    # Likewise prefetch_factor (None, the default, is 2 batches per worker).
    prefetch = getattr(loader, "prefetch_factor", None)
    _stepscope.set_config("prefetch_factor", int(prefetch) if prefetch is not None else 2)


def steps(loader):
    """``for batch in stepscope.torch.steps(loader):`` — see the module's help."""
    _record_loader_config(loader)
    _stepscope._record_process_group()
    return _core.StepIterator(loader)


class _Instrumentation:
    """What instrument() installed; remove() takes it back out."""

    def __init__(self):
        self._hooks = []
        self._restore = []
        self.removed = False

    def remove(self):
        if self.removed:
            return
        self.removed = True
        for h in self._hooks:
            h.remove()
        for restore in reversed(self._restore):
            restore()
        self._hooks.clear()
        self._restore.clear()


# Per thread: whether a forward of an instrumented model ran since the last backward.
_local = _threading.local()


class _ClassForward:
    """The forward of one module class, wrapped once for the process: the
    instances instrument() registered are timed, every other instance runs
    the original untouched (one weak-dictionary lookup).

    Why the class and not the instance: an instance attribute (or a hook) is
    part of the model's __dict__, so ``torch.save(model)`` (word_language_model
    checkpoints the whole model) failed to pickle it, and ``copy.deepcopy(model)``
    gave a copy whose forward still ran the original model's weights. A class
    attribute is neither pickled nor copied, and a copy is not registered.
    """

    def __init__(self, cls):
        self.cls = cls
        self.had_own = "forward" in vars(cls)
        self.original = original = vars(cls)["forward"] if self.had_own else cls.forward
        self.timed = timed = _weakref.WeakKeyDictionary()  # module -> how(original, module, args, kwargs)

        @_functools.wraps(original)  # inspect.signature(model.forward) stays the model's (ONNX export, tracing)
        def forward(module, *args, **kwargs):
            how = timed.get(module)
            if how is None:
                return original(module, *args, **kwargs)
            return how(original, module, args, kwargs)

        self.wrapper = forward
        cls.forward = forward

    def release(self, module):
        self.timed.pop(module, None)
        if self.timed:
            return
        _class_forwards.pop(self.cls, None)
        if vars(self.cls).get("forward") is not self.wrapper:
            return  # replaced again since: leave it
        if self.had_own:
            self.cls.forward = self.original
        else:
            delattr(self.cls, "forward")


_class_forwards = {}  # module class -> _ClassForward


def _time_forward(module, how, handle):
    """Times module's forward with how(original, module, args, kwargs)."""
    if "forward" in vars(module):
        # The instance has a forward of its own (patched by the user): wrap that one.
        original = vars(module)["forward"]

        @_functools.wraps(original)
        def timed_forward(*args, **kwargs):
            return how(lambda _m, *a, **k: original(*a, **k), module, args, kwargs)

        _replace_attribute(module, "forward", timed_forward, handle)
        return
    cls = type(module)
    entry = _class_forwards.get(cls)
    if entry is None:
        entry = _class_forwards[cls] = _ClassForward(cls)
    entry.timed[module] = how
    handle._restore.append(lambda: entry.release(module) if entry.timed.get(module) is how else None)


def _timed_submodule(phase):
    def timed(original, module, args, kwargs):
        with phase:
            return original(module, *args, **kwargs)

    return timed


def _cuda_stream_binder(model):
    if not _core.with_cuda or not _torch.cuda.is_available():
        return None
    try:
        device = next(model.parameters()).device
    except StopIteration:
        return None
    if device.type != "cuda":
        return None
    last = [None]

    def bind():
        stream = _torch.cuda.current_stream(device).cuda_stream
        if stream != last[0]:
            _core.set_stream(stream)
            last[0] = stream

    return bind


def _replace_attribute(obj, name, replacement, handle):
    """Sets obj.name (an instance attribute) and records how to undo it."""
    had_own = name in vars(obj)
    original = vars(obj)[name] if had_own else None
    setattr(obj, name, replacement)

    def restore():
        if vars(obj).get(name) is not replacement:
            return  # replaced again since: leave it
        if had_own:
            setattr(obj, name, original)
        else:
            delattr(obj, name)

    handle._restore.append(restore)


def instrument(model, optimizer=None, submodules=False):
    """Times the model's forward, the backward pass and optimizer.step() as
    the phases forward, backward and optimizer. See the module's help."""
    if not isinstance(model, _torch.nn.Module):
        raise TypeError("stepscope.torch.instrument: model must be a torch.nn.Module, got " + type(model).__name__)
    if optimizer is not None and not callable(getattr(optimizer, "step", None)):
        raise TypeError(
            "stepscope.torch.instrument: optimizer must have a step() method (a torch.optim.Optimizer), got "
            + type(optimizer).__name__
        )
    _stepscope._record_process_group()  # a DDP model: init_process_group ran before it was wrapped
    handle = _Instrumentation()
    forward = _stepscope.phase("forward")
    backward = _stepscope.phase("backward")
    bind_stream = _cuda_stream_binder(model)

    # The model's forward, wrapped rather than hooked so that an exception in
    # it still closes the phase (torch 1.13 skips the forward hook then).
    def timed_model(original, module, args, kwargs):
        if bind_stream is not None:
            bind_stream()
        forward.__enter__()
        try:
            return original(module, *args, **kwargs)
        finally:
            forward.__exit__(None, None, None)
            _local.forward_seen = True

    _time_forward(model, timed_model, handle)

    if submodules:
        for name, child in model.named_modules():
            if child is model or not name:
                continue
            _time_forward(child, _timed_submodule(_stepscope.phase("forward." + name, "compute")), handle)

    # The backward pass: torch.Tensor.backward calls torch.autograd.backward,
    # so wrapping that one function times loss.backward() whole, on the
    # calling thread (autograd's own threads never open a scope).
    original_backward = _torch.autograd.backward

    def timed_backward(*args, **kwargs):
        if handle.removed or not getattr(_local, "forward_seen", False):
            return original_backward(*args, **kwargs)
        _local.forward_seen = False
        with backward:
            return original_backward(*args, **kwargs)

    _torch.autograd.backward = timed_backward

    def restore_backward():
        if _torch.autograd.backward is timed_backward:
            _torch.autograd.backward = original_backward

    handle._restore.append(restore_backward)

    if optimizer is not None:
        optimizer_phase = _stepscope.phase("optimizer")
        original_step = optimizer.step
        # The run's configuration: `stepscope diff` names an optimizer change,
        # and the advice knows a full-batch one (LBFGS) from a mini-batch one.
        _stepscope.set_config("optimizer", type(optimizer).__name__)

        # wraps: also carries an LR scheduler's mark of the step it already
        # wrapped (_with_counter, _wrapped_by_lr_sched), or torch warns that
        # optimizer.step() "has been overridden after learning rate scheduler initialization".
        @_functools.wraps(getattr(original_step, "__func__", original_step))
        def timed_step(self, *args, **kwargs):
            if handle.removed:  # replaced again since (an LR scheduler): a plain call
                return original_step(*args, **kwargs)
            with optimizer_phase:
                return original_step(*args, **kwargs)

        # A bound method, as optimizer.step was: torch's LR schedulers wrap it
        # through its __self__ / __func__ (torch 1.13 with_counter, 2.x
        # patch_track_step_called); a plain function there broke the user's
        # StepLR(optimizer, ...) with an AttributeError.
        _replace_attribute(optimizer, "step", _types.MethodType(timed_step, optimizer), handle)
    return handle
