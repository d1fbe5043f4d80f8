// A thread started ahead of the work it will be handed, for the second core
// of `stepscope analyze`: the split parse's helper, then the report's device
// analyses. Internal.
//
// Why ahead: on the VMs this project measures on, a thread created while its
// parent is busy first ran a median 2.4 ms later (p90 4.8 ms), most of a
// 12 ms half-document parse, while waking a thread already blocked on a
// condition variable took 0.05 ms (docs/benchmarks-import.md, "The second
// core, started ahead"). So the importer starts the worker when it knows the
// document is large enough to split, before it inflates it, and hands it the
// parse afterwards; analyze_trace_file keeps the same worker for the report.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace stepscope {
inline namespace v1 {
namespace detail {

class Worker {
 public:
  Worker() = default;
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();  // after the task in hand, if any
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Starts the thread unless it runs already. False when none can start
  // (the caller then does the work on its own thread).
  bool start() noexcept {
    if (thread_.joinable()) return true;
    try {
      thread_ = std::thread([this] { loop(); });
      return true;
    } catch (const std::system_error&) {
      return false;
    }
  }
  bool started() const noexcept { return thread_.joinable(); }

  // Runs `task` on the worker (starting it if needed). False when it cannot:
  // no thread, or a task still in hand. `task` must not throw.
  bool post(std::function<void()> task) noexcept {
    if (!start()) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (busy_) return false;
      task_ = std::move(task);
      busy_ = true;
    }
    wake_.notify_all();
    return true;
  }

  // Until the posted task, if any, has returned.
  void wait() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return !busy_; });
  }

 private:
  void loop() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || task_ != nullptr; });
      if (task_ == nullptr) return;  // stopping, nothing in hand
      std::function<void()> task = std::move(task_);
      task_ = nullptr;
      lock.unlock();
      task();
      task = nullptr;  // what it captured goes before the caller hears it is done
      lock.lock();
      busy_ = false;
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;  // a task or the stop
  std::condition_variable done_;  // the task returned
  std::function<void()> task_;
  bool busy_ = false;  // posted and not yet returned
  bool stopping_ = false;
  std::thread thread_;  // last: started after the members it uses exist
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
