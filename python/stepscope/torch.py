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
             would leave the phase open); with gradients off
             (``torch.no_grad()``, ``torch.inference_mode()``: an
             evaluation pass) it is the phase forward_no_grad, so that an
             evaluation inside the step is not read as the training
             forward; ``submodules=True`` adds one phase
             per named submodule, "forward.<name>" (kind compute), nested in
             it. The wrapper sits on the module's class and times only the
             instrumented instances: nothing is added to the model itself, so
             ``torch.save(model)`` and ``copy.deepcopy(model)`` work as without
             stepscope (a copy is not timed);
  backward   each ``torch.autograd.backward`` (``loss.backward()``) made
             while instrumented after a forward of the model, on the calling
             thread;
  optimizer  each ``optimizer.step()``;
  ddp.allreduce  on a DistributedDataParallel model: the time the step is
             blocked on DDP's gradient all-reduce at the end of backward
             (kind communication, nested in backward; a communication hook,
             see below and docs/multi-rank.md);
  rpc.wait   each torch.distributed.rpc round trip the step blocks on
             (rpc_sync, an rpc_async future's wait, a remote RRef's
             to_here; kind communication, nested in the phase that waits).
Returns a handle; ``handle.remove()`` takes everything back out (DDP cannot
take a communication hook back: it stops timing and passes through).

torch.distributed jobs: steps() and instrument() make the end of the job —
destroy_process_group(), stepscope.torch.finish() or the exit — hand each
rank's report to rank 0 through the process group's store; rank 0 writes the
job report (stepscope-report.merged.json beside its own, or
STEPSCOPE_MERGED_OUT) with the straggler named by its cause.

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


__all__ = ["steps", "instrument", "finish"]


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


def _record_threads():
    # torch's intra-op threads: a knob `stepscope diff` names, and what the
    # cpu_contention finding weighs against the cores (ranks x threads).
    _stepscope.set_config("intra_op_threads", int(_torch.get_num_threads()))


def steps(loader):
    """``for batch in stepscope.torch.steps(loader):`` — see the module's help."""
    _record_loader_config(loader)
    _record_threads()
    _stepscope._record_process_group()
    _gather_at_group_end()
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


def instrument(model, optimizer=None, submodules=False, name=None):
    """Times the model's forward, the backward pass and optimizer.step() as
    the phases forward (forward_no_grad with gradients off), backward and
    optimizer; with ``name``, its forward and optimizer phases are
    ``<name>.forward`` and ``<name>.optimizer`` (a second model: a loss
    network, a GAN's discriminator). See the module's help."""
    if not isinstance(model, _torch.nn.Module):
        raise TypeError("stepscope.torch.instrument: model must be a torch.nn.Module, got " + type(model).__name__)
    if optimizer is not None and not callable(getattr(optimizer, "step", None)):
        raise TypeError(
            "stepscope.torch.instrument: optimizer must have a step() method (a torch.optim.Optimizer), got "
            + type(optimizer).__name__
        )
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError("stepscope.torch.instrument: name must be a non-empty str, got " + repr(name))
    _stepscope._record_process_group()  # a DDP model: init_process_group ran before it was wrapped
    _record_threads()
    handle = _Instrumentation()
    prefix = name + "." if name else ""
    forward = _stepscope.phase(prefix + "forward", "compute")
    # A forward with gradients off (torch.no_grad, inference_mode): an
    # evaluation pass, not the training step's forward (pytorch/examples' gat
    # evaluates twice inside every step: two of its three forwards).
    forward_no_grad = _stepscope.phase(prefix + "forward_no_grad", "compute")
    backward = _stepscope.phase("backward")
    bind_stream = _cuda_stream_binder(model)

    # The model's forward, wrapped rather than hooked so that an exception in
    # it still closes the phase (torch 1.13 skips the forward hook then).
    def timed_model(original, module, args, kwargs):
        if bind_stream is not None:
            bind_stream()
        grad = _torch.is_grad_enabled()
        timer = forward if grad else forward_no_grad
        timer.__enter__()
        try:
            return original(module, *args, **kwargs)
        finally:
            timer.__exit__(None, None, None)
            if grad:
                _local.forward_seen = True
            else:
                _core.note_evaluation()

    _time_forward(model, timed_model, handle)

    if submodules:
        for child_name, child in model.named_modules():
            if child is model or not child_name:
                continue
            _time_forward(
                child, _timed_submodule(_stepscope.phase(prefix + "forward." + child_name, "compute")), handle
            )

    # The backward pass: torch.Tensor.backward calls torch.autograd.backward,
    # so wrapping that one function times loss.backward() whole, on the
    # calling thread (autograd's own threads never open a scope).
    original_backward = _torch.autograd.backward

    def timed_backward(*args, **kwargs):
        if handle.removed or not getattr(_local, "forward_seen", False):
            return original_backward(*args, **kwargs)
        _local.forward_seen = False
        _core.note_training()
        _backward_thread[0] = _threading.get_ident()
        with backward:
            try:
                return original_backward(*args, **kwargs)
            finally:
                timer = _open_communication[0]
                if timer is not None:  # backward raised before its last callback: closed here
                    timer.close()

    _torch.autograd.backward = timed_backward

    def restore_backward():
        if _torch.autograd.backward is timed_backward:
            _torch.autograd.backward = original_backward

    handle._restore.append(restore_backward)
    _time_distributed_backward(backward, handle)
    _time_rpc(handle)
    _time_communication(model, handle)
    _gather_at_group_end()

    if optimizer is not None:
        optimizer_phase = _stepscope.phase(prefix + "optimizer", "compute")
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
            _core.note_training()
            with optimizer_phase:
                return original_step(*args, **kwargs)

        # A bound method, as optimizer.step was: torch's LR schedulers wrap it
        # through its __self__ / __func__ (torch 1.13 with_counter, 2.x
        # patch_track_step_called); a plain function there broke the user's
        # StepLR(optimizer, ...) with an AttributeError.
        _replace_attribute(optimizer, "step", _types.MethodType(timed_step, optimizer), handle)
    return handle


def _time_distributed_backward(backward, handle):
    """torch.distributed.autograd.backward (an RPC model's backward pass, as
    pytorch/examples' rpc/parameter_server runs it) as the backward phase: it
    is not torch.autograd.backward, and its time read as time in no phase
    (55% of the trainer's step)."""
    try:
        import torch.distributed.autograd as dist_autograd
    except ImportError:  # a torch built without distributed support
        return
    original = getattr(dist_autograd, "backward", None)
    if original is None:
        return

    def timed_distributed_backward(*args, **kwargs):
        if handle.removed or not getattr(_local, "forward_seen", False):
            return original(*args, **kwargs)
        _local.forward_seen = False
        _core.note_training()
        with backward:
            return original(*args, **kwargs)

    dist_autograd.backward = timed_distributed_backward

    def restore():
        if dist_autograd.backward is timed_distributed_backward:
            dist_autograd.backward = original

    handle._restore.append(restore)


# ---- communication: torch.distributed.rpc's round trips ---------------------
#
# A trainer of an RPC job (pytorch/examples' distributed/rpc: a parameter
# server, a pipeline, a RemoteModule) blocks in its forward and optimizer on
# calls to other processes: rpc_sync, the wait of an rpc_async future,
# RRef.to_here. Read as the compute of the phase around them, that wait made
# the step look compute-bound, or unknown. Each such wait is the phase
# "rpc.wait" (kind communication, nested in the phase that made the call):
# the futures that rpc_sync/rpc_async create (rpc.api._invoke_rpc, which
# RemoteModule and DistributedOptimizer go through) and RRef proxies
# (rref_proxy._invoke_rpc: rref.rpc_async().f()) are marked,
# and a Future.wait() on a marked one -- or on a collect_all/wait_all of
# them -- is timed. dist_autograd.backward's own waits are inside torch's
# C++ and stay in backward.

_RPC_PHASE = "rpc.wait"
_MAX_MARKED_FUTURES = 4096  # futures marked and not yet waited for: the oldest is dropped beyond this
_rpc_state = {"users": 0, "restore": None}  # handles that time RPC; how to take it back


def _time_rpc(handle):
    """Marks RPC futures and times the step's waits on them (once per process,
    taken back when the last handle that wants it is removed)."""

    def release():
        _rpc_state["users"] -= 1
        if _rpc_state["users"] == 0 and _rpc_state["restore"] is not None:
            _rpc_state["restore"]()

    if _rpc_state["restore"] is not None:
        _rpc_state["users"] += 1
        handle._restore.append(release)
        return
    try:
        import torch.distributed.rpc as rpc

        if not rpc.is_available():
            return
        from torch.distributed.rpc import api, rref_proxy

        future_type = _torch._C.Future
        original_invoke, original_proxy, original_wait = api._invoke_rpc, rref_proxy._invoke_rpc, future_type.wait
        original_collect, original_to_here = _torch._C._collect_all, rpc.PyRRef.to_here
    except (ImportError, AttributeError):  # a torch without RPC, or another version's internals
        return
    phase = _stepscope.phase(_RPC_PHASE, "communication")
    marked = {}  # id -> future: the futures an RPC returned, until waited for

    def mark(future):
        if len(marked) >= _MAX_MARKED_FUTURES:  # the oldest, never waited for (fire and forget), goes
            try:
                del marked[next(iter(marked))]
            except (StopIteration, KeyError, RuntimeError):  # another thread changed it meanwhile
                pass
        marked[id(future)] = future
        return future

    def invoke(*args, **kwargs):
        return mark(original_invoke(*args, **kwargs))

    def invoke_proxy(*args, **kwargs):  # rref.rpc_async().f(): a future of its own
        return mark(original_proxy(*args, **kwargs))

    def collect(futures, *args, **kwargs):
        out = original_collect(futures, *args, **kwargs)
        return mark(out) if any(id(f) in marked for f in futures) else out

    def wait(self, *args, **kwargs):
        if marked.pop(id(self), None) is None or not _rpc_state["users"]:
            return original_wait(self, *args, **kwargs)
        with phase:
            return original_wait(self, *args, **kwargs)

    def to_here(self, *args, **kwargs):
        if not _rpc_state["users"] or self.is_owner():
            return original_to_here(self, *args, **kwargs)
        with phase:
            return original_to_here(self, *args, **kwargs)

    places = [
        (api, "_invoke_rpc", original_invoke, invoke),
        (rref_proxy, "_invoke_rpc", original_proxy, invoke_proxy),
        (future_type, "wait", original_wait, wait),
        (_torch._C, "_collect_all", original_collect, collect),
        (rpc.PyRRef, "to_here", original_to_here, to_here),
    ]

    def restore():
        for owner, name, original, _ in places:
            try:
                setattr(owner, name, original)
            except (AttributeError, TypeError):
                pass
        marked.clear()
        _rpc_state["restore"] = None

    try:
        for owner, name, _, replacement in places:
            setattr(owner, name, replacement)
    except (AttributeError, TypeError):  # a type that takes no new attribute: nothing timed, nothing left changed
        restore()
        return
    _rpc_state["users"], _rpc_state["restore"] = 1, restore
    handle._restore.append(release)


# ---- communication: DDP's gradient all-reduce (issue 30) -------------------
#
# DDP all-reduces gradient buckets from hooks inside backward(): the step
# blocks on them at the end of backward (the reducer's finalize_backward). A
# communication hook wrapping the bucket's all-reduce (DDP's default, or the
# user's own hook) notes each bucket's future. The phase "ddp.allreduce" (kind
# communication, nested in "backward") opens at the last bucket's hook — the
# local gradients are done — and closes in a callback that autograd runs at
# the end of the backward pass (queued before DDP's own, so it runs first)
# once the futures are done. That phase is the time the step spent blocked on its
# collectives: the collective's tail that did not overlap with the backward
# compute, plus waiting for slower ranks (the job report tells the two apart
# across ranks). Only on the thread that called backward and for CPU buckets
# (gloo): with NCCL the wait is a stream dependency, not a host block, and the
# collective's device time comes from CUPTI's NCCL kernels.

_backward_thread = [None]  # the thread of the last instrumented backward()
_open_communication = [None]  # the timer whose ddp.allreduce phase is open (backward's thread)
_COMM_PHASE = "ddp.allreduce"


class _CommunicationTimer:
    """The communication hook instrument() registers on a DDP model."""

    def __init__(self, model):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        self.inner = (model.process_group, default_hooks.allreduce_hook)  # DDP's default all-reduce
        self.wire = 1.0  # bytes on the wire per bucket byte: 0.5 where a hook sends 16-bit gradients
        self.pending = []  # this backward's bucket futures
        self.buckets = self.bytes = 0  # this backward's buckets so far (note_collectives)
        self.active = True
        self.phase = _stepscope.phase(_COMM_PHASE, "communication")

    def hook(self, state, bucket):
        inner_state, inner = self.inner
        opened = False
        try:
            if self.active:
                # Every bucket, CPU or GPU: what each all-reduce moves decides the advice.
                buffer, last = bucket.buffer(), bucket.is_last()
                self.buckets += 1
                self.bytes += buffer.numel() * buffer.element_size()
                if last:
                    _core.note_collectives(self.buckets, int(self.bytes * self.wire))
                    self.buckets = self.bytes = 0
                if (
                    buffer.device.type == "cpu"
                    and _threading.get_ident() == _backward_thread[0]
                    and _stepscope.enabled()
                ):
                    if not self.pending:
                        _torch.autograd.Variable._execution_engine.queue_callback(self._wait)
                    self.pending.append(None)  # its future, below
                    if last:
                        # The local gradients are done: from here the step waits.
                        self.phase.__enter__()
                        _open_communication[0] = self
                        opened = True
        except Exception:  # outside a backward pass (no graph task to queue on): untimed
            self.pending.clear()
        try:
            future = inner(inner_state, bucket)
        except BaseException:
            if opened:
                self.close()
            raise
        if self.pending and self.pending[-1] is None:
            self.pending[-1] = future
        return future

    def use(self, state, hook):
        """The hook the user registered (register_comm_hook), wrapped from now
        on. DDP's fp16/bf16 compression hooks send half the bucket's bytes;
        the hook's name is the run's `ddp_comm_hook` setting (diff names a
        change of it, and the advice does not suggest what it already does)."""
        self.inner = (state, hook)
        name = getattr(hook, "__name__", type(hook).__name__)
        self.wire = 0.5 if name in ("fp16_compress_hook", "bf16_compress_hook") else 1.0
        _stepscope.set_config("ddp_comm_hook", name)

    def close(self):
        if _open_communication[0] is self:
            _open_communication[0] = None
            self.phase.__exit__(None, None, None)

    def _wait(self):
        # Autograd's last callbacks run on the thread that called backward()
        # for a CPU graph: the one the phase was opened on.
        pending, self.pending = self.pending, []
        try:
            for future in pending:
                if future is not None:
                    future.wait()
        except Exception:  # DDP's own wait, next, raises it to the user
            pass
        self.close()


def _ddp_class():
    dist = getattr(_torch, "distributed", None)
    if dist is None or not dist.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel


def _time_communication(model, handle):
    """Registers the timing communication hook on a DDP model, or on each DDP
    module inside the model (a wrapper that holds its DDP part, as
    pytorch/examples' rpc/ddp_rpc's HybridModel does: `self.fc = DDP(...)`);
    the DDP's register_comm_hook then sets the hook it wraps (a DDP takes one)."""
    ddp = _ddp_class()
    if type(model).__name__ == "FullyShardedDataParallel":
        _warn("stepscope.torch.instrument: FSDP's all-gathers and reduce-scatters are not timed as communication "
              "(this torch has no hook for them); time the step's waits with stepscope.phase(..., 'communication')")
        return
    if ddp is None:
        return
    if isinstance(model, ddp):
        _time_ddp(model, handle)
        return
    # The module tree by its _modules, not modules(): a RemoteModule in it
    # (ddp_rpc's embedding on the parameter server) raises on modules().
    stack, seen = [model], set()
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if isinstance(m, ddp):
            _time_ddp(m, handle)
            continue
        children = getattr(m, "_modules", None)
        if isinstance(children, dict):
            stack.extend(c for c in children.values() if c is not None)


def _time_ddp(model, handle):
    if getattr(model, "reducer", None) is None:
        return
    if any(getattr(m, "sparse", False) is True for m in model.modules()):
        # Sparse gradients (nn.Embedding(sparse=True)): DDP's own path, untouched.
        _warn("stepscope.torch.instrument: a model with sparse gradients: DDP's communication is not timed; time "
              "it with stepscope.phase(..., 'communication') where the step waits for it")
        return
    try:
        timer = _CommunicationTimer(model)
        model.register_comm_hook(None, timer.hook)
    except Exception as e:  # the user registered a hook before instrument() (DDP takes one), another torch
        _warn("stepscope.torch.instrument: DDP's communication is not timed (%s); call instrument() before "
              "register_comm_hook, which then keeps working" % (str(e).splitlines() or [""])[0])
        return

    def register_comm_hook(state, hook):
        check = getattr(model, "_check_comm_hook", None)
        if check is not None:
            check(hook)  # the user's mistakes raise as without stepscope
        timer.use(state, hook)

    def register_builtin_comm_hook(comm_hook_type):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        fp16 = comm_hook_type == _torch.distributed.BuiltinCommHookType.FP16_COMPRESS
        timer.use(model.process_group, default_hooks.fp16_compress_hook if fp16 else default_hooks.allreduce_hook)

    _replace_attribute(model, "register_comm_hook", register_comm_hook, handle)
    _replace_attribute(model, "_register_builtin_comm_hook", register_builtin_comm_hook, handle)

    def stop_timing():  # DDP cannot take a hook back: it goes on as a plain pass-through
        timer.active = False

    handle._restore.append(stop_timing)


def _warn(message):
    import warnings

    warnings.warn(message, RuntimeWarning, stacklevel=3)


# ---- one job report through the job's own process group (issue 30) ---------
#
# At the end of a torch.distributed job — when the program destroys the
# default process group (what PyTorch's DDP examples do last), calls
# stepscope.torch.finish(), or exits with the group still up — every rank
# finishes (its own report, as always) and hands its report to rank 0
# through the group's store (the rendezvous key-value store every process
# group has: no shared file system, no collective that a dead rank could
# hang). Rank 0 waits for them at most STEPSCOPE_GATHER_TIMEOUT_S seconds
# (default 30), merges what came and writes the job report; ranks that sent
# nothing are named in a warning, their own files stay. docs/multi-rank.md.

_GATHER_KEY = "stepscope/job-report/"
_MAX_PAYLOAD = 16 << 20  # bytes per rank, compressed: a report is tens to hundreds of KiB
_gather_state = {"installed": False, "done": False}


def _gather_at_group_end():
    """Makes destroy_process_group and the interpreter's exit hand this rank's
    report to rank 0 first (once, when a default group exists)."""
    if _gather_state["installed"]:
        return
    dist = getattr(_torch, "distributed", None)
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return
    except Exception:
        return
    _gather_state["installed"] = True
    # destroy_process_group() of the default group (also when the program
    # imported it by name before: PyTorch's ddp-tutorial-series does) resets
    # the default group through distributed_c10d._update_default_pg(None),
    # with the group's store still there: the report goes first.
    c10d = dist.distributed_c10d
    original = getattr(c10d, "_update_default_pg", None)
    if callable(original):

        @_functools.wraps(original)
        def update_default_pg(pg):
            if pg is None and not _gather_state["done"]:
                finish()
            return original(pg)

        c10d._update_default_pg = update_default_pg
    import atexit

    atexit.register(_finish_at_exit)  # runs before stepscope's own exit hook (registered earlier)


def _finish_at_exit():
    # The report says how the run ended (exit, SIGINT, the uncaught
    # exception), as stepscope's own exit hook writes it; then the gather.
    import sys

    _stepscope._finish_at_python_exit()
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    _finish_and_gather(_core.finish(), crashed=_stepscope._ended_by_exception(last))


def _timeout_s():
    import os

    text = os.environ.get("STEPSCOPE_GATHER_TIMEOUT_S", "")
    if not text:
        return 30.0
    try:
        value = float(text)
        if value >= 0 and value == value:
            return value
    except ValueError:
        pass
    _warn("stepscope: STEPSCOPE_GATHER_TIMEOUT_S=%r is not a number of seconds >= 0; using 30" % text)
    return 30.0


def _report_bytes(path):
    import zlib

    data = b""
    if path:
        try:
            with open(path, "rb") as f:
                data = f.read(_MAX_PAYLOAD * 8 + 1)
        except OSError:
            data = b""
    if not data.lstrip().startswith(b"{"):  # not written, or written where it cannot be read back (/dev/null)
        data = _core.snapshot_json().encode("utf-8")
    packed = zlib.compress(data, 1)
    return packed if len(packed) <= _MAX_PAYLOAD else b""


def _merged_path(own_path):
    import os

    configured = os.environ.get("STEPSCOPE_MERGED_OUT", "")
    if configured:
        return configured
    directory = os.path.dirname(own_path) if own_path and own_path != os.devnull else ""
    return os.path.join(directory, "stepscope-report.merged.json")


def finish():
    """Finishes this rank (its own report, as stepscope.finish()) and, in a
    torch.distributed job, hands the report to rank 0, which writes the job
    report. Every rank calls it (destroy_process_group() and the exit do).
    Returns rank 0's job report path, else this rank's report path."""
    return _finish_and_gather(_stepscope.finish())


def _finish_and_gather(own, crashed=False):
    if _gather_state["done"]:
        return own
    _gather_state["done"] = True
    try:
        dist = _torch.distributed
        if not _gather_state["installed"] or not dist.is_initialized():
            return own
        rank, world = dist.get_rank(), dist.get_world_size()
        store = dist.distributed_c10d._get_default_store()
    except Exception:
        return own
    if world < 2 or not own:
        return own  # one rank, or stepscope disabled (STEPSCOPE=0): nothing to merge
    import sys

    try:
        payload = _report_bytes(own)
        if not payload:
            sys.stderr.write("stepscope: warning: rank %d's report is over %d MiB compressed: not handed to rank 0 "
                             "(it is in %s)\n" % (rank, _MAX_PAYLOAD >> 20, own))
        if rank == 0 and crashed:
            # The others may be blocked in a collective waiting for this rank:
            # waiting for their reports would only stall this exit.
            sys.stderr.write("stepscope: warning: rank 0 ended by an exception: no job report is gathered; each "
                             "rank's report is in its own file\n")
            return own
        if rank != 0:
            store.set(_GATHER_KEY + str(rank), payload)
            # A set gets no answer: this add does (same connection, after the
            # set), so a store that is gone (rank 0 died) raises here.
            store.add(_GATHER_KEY + "handed", 1)
            return own
        return _write_job_report(store, world, payload, own, _timeout_s()) or own
    except Exception as e:  # a group that is gone, a store rank 0 closed: the per-rank files stay
        sys.stderr.write("stepscope: warning: the job report was not gathered (%s: %s); each rank's report is in its "
                         "own file\n" % (type(e).__name__, e))
        return own


def _write_job_report(store, world, own_payload, own_path, timeout_s):
    """Rank 0: the others' reports from the store (for at most timeout_s), merged."""
    import os
    import sys
    import time
    import zlib
    from datetime import timedelta

    deadline = time.monotonic() + timeout_s
    texts = [b""] * world
    texts[0] = own_payload
    waiting = []
    for r in range(1, world):
        key = _GATHER_KEY + str(r)
        try:  # once the deadline has passed, a rank still gets 10 ms
            store.wait([key], timedelta(seconds=max(0.01, deadline - time.monotonic())))
            texts[r] = store.get(key)
            store.delete_key(key)
        except Exception:  # not there in time (or the store failed): this rank is missing
            waiting.append(r)
    # As the core reads its switches (1/0, on/off, true/false, yes/no, any case; else off).
    quiet = os.environ.get("STEPSCOPE_QUIET", "").lower() in ("1", "on", "true", "yes")
    if waiting:
        sys.stderr.write("stepscope: warning: no report from rank(s) %s within %.0f s (STEPSCOPE_GATHER_TIMEOUT_S): "
                         "the job report covers the others; a rank that died or never finished keeps its own "
                         "file\n" % (", ".join(map(str, waiting)), timeout_s))
    for r in range(world):
        if texts[r]:
            try:
                texts[r] = zlib.decompress(texts[r])
            except zlib.error:
                texts[r] = b""
    path, text = _core.merge_and_write(texts, _merged_path(own_path))
    if not path:
        sys.stderr.write("stepscope: warning: %s; each rank's report is in its own file\n" % text)
        return ""
    if not quiet:
        sys.stderr.write(text)
    return path
