// detail::Worker (src/import/worker.hpp): the importer's second thread,
// started before the work it is handed. Runs under TSan in CI.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "import/worker.hpp"

using stepscope::detail::Worker;

TEST_CASE("a worker runs what it is handed on its own thread, one task at a time", "[import][worker]") {
  Worker worker;
  CHECK_FALSE(worker.started());
  REQUIRE(worker.start());
  REQUIRE(worker.start());  // already running: the same thread
  CHECK(worker.started());

  std::thread::id ran_on;
  std::atomic<bool> release{false};
  REQUIRE(worker.post([&] {
    ran_on = std::this_thread::get_id();
    while (!release.load()) std::this_thread::yield();
  }));
  // Busy: a second task is refused (the caller does that work itself), not queued.
  int second = 0;
  CHECK_FALSE(worker.post([&] { second = 1; }));
  release = true;
  worker.wait();
  CHECK(ran_on != std::this_thread::get_id());
  CHECK(ran_on != std::thread::id());
  CHECK(second == 0);

  // Free again: the next task runs, and wait() sees its writes.
  int third = 0;
  REQUIRE(worker.post([&] { third = 3; }));
  worker.wait();
  CHECK(third == 3);
  worker.wait();  // nothing in hand: returns at once
}

TEST_CASE("a worker posted to without start() starts itself; its end waits for the task in hand", "[import][worker]") {
  std::atomic<int> done{0};
  auto owned = std::make_shared<int>(7);
  std::weak_ptr<int> watch = owned;
  {
    Worker worker;
    REQUIRE(worker.post([&done, owned] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = *owned;
    }));
    owned.reset();
  }  // the destructor: after the task, which has released what it captured
  CHECK(done == 7);
  CHECK(watch.expired());
}

TEST_CASE("a worker never handed anything starts no thread and ends at once", "[import][worker]") {
  Worker worker;
  worker.wait();
  CHECK_FALSE(worker.started());
}
