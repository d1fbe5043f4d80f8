// stepscope._core — the Python module's native part: the C++ run time's scopes,
// steps() loop and finish()/snapshot(), driven from Python (pybind11).
//
// The Python package (python/stepscope/__init__.py) is the public API; this
// module is what it calls. A phase from Python is the same ScopedPhase as
// STEPSCOPE_PHASE, on a run-time-named site (<stepscope/site.hpp>), opened by
// __enter__ and closed by __exit__: same rings, collector, report and CLI.
//
// Why a Phase object holds scopes in raw storage: ScopedPhase is meant for the
// stack (its operator new is deleted, so no scope outlives the region it
// times). A Python `with` block is such a region, but its ends are two calls,
// so the scope is constructed in place at __enter__ and destroyed at __exit__,
// on the same thread (a scope's bookkeeping is per thread). One Phase object
// per (name, kind) is cached by the package and shared by every `with` of that
// name: nested and concurrent uses each get a slot, and __exit__ closes the
// newest slot this thread opened.
//
// Python calls hold the GIL, so the slots need no lock; finish() releases it
// while the collector drains and writes the report.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stepscope/merge.hpp>
#include <stepscope/stepscope.hpp>
#if STEPSCOPE_WITH_CUDA
#include <stepscope/cuda.hpp>
#endif

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace py = pybind11;

namespace stepscope {
inline namespace v1 {
namespace detail {
// src/run/runtime.hpp (not an installed header): finish() with how the run
// ended, for the package's exit hook (finish_at_python_exit below).
std::string finish_run(const char* ended_by) noexcept;
void note_uncaught_exception(const char* type, const char* message) noexcept;
}  // namespace detail
}  // namespace v1
}  // namespace stepscope

namespace {

using stepscope::PhaseKind;
using stepscope::detail::PhaseSite;
using stepscope::detail::ThreadState;

// File of the steps()/next_step() call sites made from Python: one site for
// all of them (the report's per-site rows are for C++ call sites).
constexpr const char* kPythonCallSite = "(python)";

bool g_finished = false;  // finish() was called from Python (under the GIL)

// A phase opened after finish() records nothing: say so (Python's warnings
// registry shows it once per calling line).
void warn_after_finish(const std::string& what) {
  if (!g_finished) return;
  const std::string message = "stepscope.finish() was called: " + what + " is not recorded (after finish() nothing is)";
  if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 2) != 0) throw py::error_already_set();
}
void warn_if_finished(const PhaseSite* site) {
  if (g_finished) warn_after_finish(std::string("phase '") + site->name + "'");
}

// One open scope: constructed in place at __enter__, destroyed at __exit__.
struct ScopeSlot {
  alignas(stepscope::ScopedPhase) unsigned char storage[sizeof(stepscope::ScopedPhase)];
  const ThreadState* owner = nullptr;  // the opening thread's state (its identity); null: free
  stepscope::ScopedPhase* scope() { return std::launder(reinterpret_cast<stepscope::ScopedPhase*>(storage)); }
};

class Phase {
 public:
  explicit Phase(const PhaseSite* site) : site_(site) {}
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;
  ~Phase() {
    // Scopes still open when the object goes (the package keeps its
    // objects for the process, so only at interpreter exit): closed here if
    // this thread opened them, otherwise left unrecorded.
    for (ScopeSlot& slot : first_)
      if (slot.owner == &stepscope::detail::t_thread_state) slot.scope()->~ScopedPhase();
    for (auto& slot : more_)
      if (slot->owner == &stepscope::detail::t_thread_state) slot->scope()->~ScopedPhase();
  }

  void enter() {
    if (stepscope::detail::g_mode.load(std::memory_order_relaxed) == stepscope::detail::kModeDisabled)
      warn_if_finished(site_);
    ScopeSlot& slot = free_slot();
    slot.owner = &stepscope::detail::t_thread_state;
    ::new (slot.storage) stepscope::ScopedPhase(site_);
  }

  // False when this thread has no open scope of this phase (an __exit__
  // without __enter__, or one on another thread than its __enter__).
  bool exit() {
    const ThreadState* self = &stepscope::detail::t_thread_state;
    for (std::size_t i = more_.size(); i-- > 0;)
      if (more_[i]->owner == self) return close(*more_[i]);
    for (std::size_t i = kInline; i-- > 0;)
      if (first_[i].owner == self) return close(first_[i]);
    return false;
  }

  const PhaseSite* site() const { return site_; }
  std::size_t open() const {
    std::size_t n = 0;
    for (const ScopeSlot& s : first_) n += s.owner != nullptr;
    for (const auto& s : more_) n += s->owner != nullptr;
    return n;
  }

 private:
  static constexpr std::size_t kInline = 4;

  static bool close(ScopeSlot& slot) {
    slot.scope()->~ScopedPhase();
    slot.owner = nullptr;
    return true;
  }
  ScopeSlot& free_slot() {
    for (ScopeSlot& s : first_)
      if (s.owner == nullptr) return s;
    for (auto& s : more_)
      if (s->owner == nullptr) return *s;
    // Deeper nesting of one name (recursion) or many threads at once: a
    // heap slot, kept for reuse.
    more_.push_back(std::make_unique<ScopeSlot>());
    return *more_.back();
  }

  const PhaseSite* site_;
  ScopeSlot first_[kInline];
  std::vector<std::unique_ptr<ScopeSlot>> more_;
};

// What stepscope.torch.instrument() saw on this thread since the last fetch
// of a steps() loop: a forward with gradients off (an evaluation), a
// backward or optimizer step (training); and whether the thread trained
// before. A step with the first and not the second, on a thread that
// trained, is an evaluation step (StepLoop::evaluation): minGPT-ddp's trainer
// runs its test loader through the same steps() loop as its training data
// (619 steps of ~730 ms, 70 of 313 ms), which read as 687 ms per step. On a
// thread that never trained (an inference run) its steps are the steps.
struct StepWork {
  bool evaluated = false, trained = false, trained_before = false;
};
thread_local StepWork t_step_work;
// for x in steps(iterable): the C++ steps() loop (stepscope::detail::StepLoop),
// one step per item, the fetch (iter() for the first, next() after) the step's
// data phase. Same semantics as the C++ adaptor (include/stepscope/steps.hpp).
class StepIterator {
 public:
  explicit StepIterator(py::object iterable)
      : iterable_(std::move(iterable)),
        loop_(std::make_unique<stepscope::detail::StepLoop>(stepscope::detail::step_call_site(kPythonCallSite, 0))),
        owner_(&stepscope::detail::t_thread_state) {
    warn_after_finish("the steps() loop");
  }
  ~StepIterator() { close(); }

  const py::object& iterable() const { return iterable_; }

  py::object next() {
    if (loop_ == nullptr) throw py::stop_iteration();
    if (owner_ != &stepscope::detail::t_thread_state) {
      // The loop's step belongs to the thread that started it; another thread
      // may iterate on, untimed.
      PyErr_WarnEx(PyExc_RuntimeWarning,
                   "stepscope.torch.steps(): iterated from another thread than the one that started it; "
                   "the rest of the loop is not timed",
                   2);
      close();
      return next_item_untimed();
    }
    StepWork& work = t_step_work;
    work.trained_before = work.trained_before || work.trained;
    if (!iterator_) {
      // Gradients off at the first fetch (`with torch.no_grad(): for b in
      // steps(test_loader)`, pytorch/examples' mnist): an evaluation loop.
      if (stepscope::detail::evaluates_from_start(work.trained_before)) loop_->evaluation_loop();
    } else if (work.evaluated && !work.trained && work.trained_before) {
      loop_->evaluation();
    }
    work.evaluated = work.trained = false;
    loop_->fetch_starts();
    PyObject* item = nullptr;
    if (!iterator_) {
      PyObject* it = PyObject_GetIter(iterable_.ptr());
      if (it == nullptr) return fail();
      iterator_ = py::reinterpret_steal<py::object>(it);
    }
    item = PyIter_Next(iterator_.ptr());
    if (item == nullptr) {
      if (PyErr_Occurred()) return fail();
      loop_->fetched(false);
      close();
      throw py::stop_iteration();
    }
    loop_->fetched(true);
    loop_->dereferenced();
    return py::reinterpret_steal<py::object>(item);
  }

  // Ends the loop's open step (break, an exception, the iterator dropped).
  void close() {
    if (loop_ == nullptr) return;
    if (owner_ == &stepscope::detail::t_thread_state)
      loop_->end_loop();
    else
      (void)loop_.release();  // its state belongs to another thread: dropped, not closed (a small leak, once)
    loop_.reset();
  }

 private:
  py::object fail() {
    loop_->fetched(false);  // a fetch that raised: a data phase outside any step
    close();
    throw py::error_already_set();
  }
  py::object next_item_untimed() {
    if (!iterator_) iterator_ = py::reinterpret_steal<py::object>(PyObject_GetIter(iterable_.ptr()));
    if (!iterator_) throw py::error_already_set();
    PyObject* item = PyIter_Next(iterator_.ptr());
    if (item == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      throw py::stop_iteration();
    }
    return py::reinterpret_steal<py::object>(item);
  }

  py::object iterable_;
  py::object iterator_;
  std::unique_ptr<stepscope::detail::StepLoop> loop_;
  const ThreadState* owner_;
};

// "input, compute, ...": the kinds' names from the one table (stepscope::kPhaseKindNames).
std::string kind_names() {
  std::string names;
  for (const char* n : stepscope::kPhaseKindNames) names += (names.empty() ? "" : ", ") + std::string(n);
  return names;
}

PhaseKind kind_from(const py::object& kind, const std::string& name) {
  if (kind.is_none()) {
    return stepscope::default_phase_kind(name.c_str());
  }
  if (!py::isinstance<py::str>(kind))
    throw py::type_error("stepscope: kind must be a str (" + kind_names() + "), got " +
                         std::string(py::str(py::type::of(kind).attr("__name__"))));
  PhaseKind parsed{};
  const std::string text = kind.cast<std::string>();
  if (!stepscope::parse_phase_kind(text, parsed))
    throw py::value_error("stepscope: kind '" + text + "' is not one of " + kind_names());
  return parsed;
}

std::string name_from(const py::object& name) {
  if (!py::isinstance<py::str>(name))
    throw py::type_error("stepscope: a phase name must be a str, got " +
                         std::string(py::str(py::type::of(name).attr("__name__"))));
  std::string text = name.cast<std::string>();
  if (text.empty()) throw py::value_error("stepscope: a phase name must not be empty");
  return text;
}

void set_config(const std::string& key, const py::object& value) {
  if (key.empty()) throw py::value_error("stepscope.set_config: the key must not be empty");
  if (py::isinstance<py::bool_>(value)) {
    stepscope::set_config(key, value.cast<bool>() ? "true" : "false");
  } else if (py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) {
    stepscope::set_config(key, value.cast<double>());
  } else if (py::isinstance<py::str>(value)) {
    stepscope::set_config(key, value.cast<std::string>());
  } else {
    throw py::type_error("stepscope.set_config: the value must be a str, int, float or bool, got " +
                         std::string(py::str(py::type::of(value).attr("__name__"))));
  }
}

// __enter__ and __exit__ as plain CPython methods (METH_NOARGS, METH_FASTCALL)
// on the pybind11 type: pybind11's general dispatch (argument conversion,
// overload resolution) was most of a phase's cost from Python.
PyObject* phase_enter(PyObject* self, PyObject*) noexcept {
  try {
    py::handle(self).cast<Phase&>().enter();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_INCREF(self);
  return self;
}

PyObject* phase_exit(PyObject* self, PyObject* const*, Py_ssize_t) noexcept {
  try {
    py::handle(self).cast<Phase&>().exit();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_FALSE;  // never swallows the exception of the with block
}

PyMethodDef g_phase_enter_def{"__enter__", reinterpret_cast<PyCFunction>(phase_enter), METH_NOARGS,
                              "Opens the phase on this thread"};
PyMethodDef g_phase_exit_def{"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(phase_exit)),
                             METH_FASTCALL, "Closes the newest scope this thread opened on the phase"};

void add_fast_method(py::handle type, PyMethodDef* def) {
  PyObject* descriptor = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(type.ptr()), def);
  if (descriptor == nullptr) throw py::error_already_set();
  const int rc = PyObject_SetAttrString(type.ptr(), def->ml_name, descriptor);
  Py_DECREF(descriptor);
  if (rc != 0) throw py::error_already_set();
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "stepscope's native part; use the stepscope package, not this module";
  m.attr("__version__") = STEPSCOPE_VERSION_STRING;
  m.attr("with_cuda") = static_cast<bool>(STEPSCOPE_WITH_CUDA);
  py::tuple kinds(stepscope::kPhaseKindCount);  // the kinds' names, in report order (stepscope.KINDS)
  for (std::size_t i = 0; i < stepscope::kPhaseKindCount; ++i) kinds[i] = stepscope::kPhaseKindNames[i];
  m.attr("KINDS") = kinds;

  py::class_<Phase> phase_type(m, "Phase");
  add_fast_method(phase_type, &g_phase_enter_def);
  add_fast_method(phase_type, &g_phase_exit_def);
  phase_type.def_property_readonly("name", [](const Phase& p) { return std::string(p.site()->name); })
      .def_property_readonly("kind", [](const Phase& p) { return std::string(stepscope::to_string(p.site()->kind)); })
      .def_property_readonly("is_step", [](const Phase& p) { return p.site()->is_step; })
      .def_property_readonly("open_scopes", &Phase::open, "Scopes of this phase open now, on every thread");

  // The Phase of a name: built once per (name, kind) by the package.
  m.def(
      "make_phase",
      [](const py::object& name, const py::object& kind, bool is_step) {
        const std::string text = name_from(name);
        const PhaseKind k = kind_from(kind, text);
        const PhaseSite* site = is_step ? stepscope::step_site(text).get() : stepscope::site(text, k).get();
        return std::make_unique<Phase>(site);
      },
      py::arg("name"), py::arg("kind") = py::none(), py::arg("is_step") = false);

  py::class_<StepIterator>(m, "StepIterator")
      .def(py::init<py::object>())
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &StepIterator::next)
      // len() of what it iterates (TypeError when that has none), so that
      // tqdm(stepscope.steps(loader)) shows its total as tqdm(loader) did.
      .def("__len__", [](StepIterator& self) { return py::len(self.iterable()); })
      .def("close", &StepIterator::close, "Ends the loop's open step now");

  // stepscope.torch.instrument()'s wrappers: what the step in progress did.
  m.def("note_collectives", &stepscope::note_collectives, py::arg("count"), py::arg("bytes"));
  m.def("note_evaluation", [] { t_step_work.evaluated = true; });
  m.def("note_training", [] { t_step_work.trained = true; });
  m.def(
      "next_step",
      [] {
        warn_after_finish("next_step()");
        stepscope::next_step(kPythonCallSite, 0);
      },
      "Ends the step the previous call opened on this thread and opens the next");
  m.def("set_config", &set_config, py::arg("key"), py::arg("value"));
  m.def(
      "set_rank",
      [](int rank, int world_size) {
        if (rank < 0 || world_size < 1 || rank >= world_size)
          throw py::value_error("stepscope.set_rank: need 0 <= rank < world_size, got rank " + std::to_string(rank) +
                                " of " + std::to_string(world_size));
        stepscope::set_rank(rank, world_size);
      },
      py::arg("rank"), py::arg("world_size"), "This process's rank: it names the report (stepscope-report.rankN.json)");
  m.def(
      "set_frontend", [](const std::string& name) { stepscope::set_frontend(name.c_str()); }, py::arg("name"));
  m.def("enabled", &stepscope::enabled);
  m.def("finish", [] {
    g_finished = true;
    py::gil_scoped_release release;  // the collector drains and the report is written without the GIL
    return stepscope::finish();
  });
  // The package's atexit hook: Python's own exit, before the interpreter is
  // torn down. After an uncaught KeyboardInterrupt (Ctrl-C) Python ends
  // itself by re-raising SIGINT, so the C exit handler never runs and the
  // report was lost; ended_by is "SIGINT" then, "exit" otherwise. Not
  // finish(): a phase an atexit handler opens later records nothing, without
  // the after-finish() warning.
  m.def(
      "finish_at_python_exit",
      [](bool interrupted) {
        py::gil_scoped_release release;
        return stepscope::detail::finish_run(interrupted ? "SIGINT" : "exit");
      },
      py::arg("interrupted"));
  // The exit hook, before finish_at_python_exit: the uncaught exception
  // Python printed (sys.last_value), for the report's `exception`.
  m.def(
      "note_uncaught_exception",
      [](const std::string& type, const std::string& message) {
        stepscope::detail::note_uncaught_exception(type.c_str(), message.c_str());
      },
      py::arg("type"), py::arg("message"));
  m.def("snapshot_json", [] {
    stepscope::Report report;
    {
      py::gil_scoped_release release;
      report = stepscope::snapshot();
    }
    return stepscope::report_to_json(report, -1);
  });
  // stepscope.torch's job report: the ranks' reports (JSON texts, b"" for a
  // rank that sent none) merged and written to `path`. Returns (path, the
  // text rank 0 prints) or ("", why not).
  m.def(
      "merge_and_write",
      [](const std::vector<py::bytes>& texts, const std::string& path) {
        std::vector<std::string> plain(texts.begin(), texts.end());
        py::gil_scoped_release release;
        std::string error;
        stepscope::Report job = stepscope::merge_report_texts(plain, error);
        if (!job.ranks) return std::make_pair(std::string(), "cannot merge the ranks' reports: " + error);
        const std::string written = stepscope::write_job_report(job, path, error);
        if (written.empty())
          return std::make_pair(std::string(), "cannot write the job report to '" + path + "': " + error);
        return std::make_pair(written, stepscope::format_job_written(job, written));
      },
      py::arg("texts"), py::arg("path"));
  m.def("runtime_site_counts", [] {
    const auto c = stepscope::detail::runtime_site_counts();
    py::dict d;
    d["sites"] = c.sites;
    d["overflow"] = c.overflow;
    d["truncated"] = c.truncated;
    return d;
  });
  m.def(
      "thread_depth", [] { return static_cast<int>(stepscope::detail::t_thread_state.depth); },
      "Open scopes on this thread (tests: the bookkeeping is balanced)");
#if STEPSCOPE_WITH_CUDA
  m.def(
      "set_stream", [](std::uintptr_t stream) { stepscope::set_stream(reinterpret_cast<void*>(stream)); },
      py::arg("cuda_stream"), "Binds a cudaStream_t (torch.cuda.current_stream().cuda_stream) to this thread's phases");
  m.def("clear_stream", [] { stepscope::clear_stream(); });
#endif
}
