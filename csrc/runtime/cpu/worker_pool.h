#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace opara {

// A fixed set of host threads that each call `work` once per round: CpuParallelExecutor's workers.
// Each thread runs `setup` once first, on itself (pinning, intra-op threads: settings kept for the
// thread's life).
//
// Locking: a mutex of its own guards the round counter and the counts of busy and started
// workers. run_round() and the destructor are called by one thread at a time (the executor's
// calling thread). Everything written before run_round() is visible to every work() of that
// round, and everything work() wrote is visible once run_round() returns; every setup() happens
// before the constructor returns.
class WorkerPool {
 public:
  // Starts `count` threads and returns once each has run `setup(worker)`. Throws when a thread
  // cannot start (those started are stopped first).
  WorkerPool(int count, std::function<void(int)> setup, std::function<void()> work);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Every worker calls work() once; returns when all have returned.
  void run_round();

 private:
  void worker_main(int worker);
  void stop() noexcept;

  std::function<void(int)> setup_;
  std::function<void()> work_;
  std::mutex mutex_;
  std::condition_variable round_started_;  // workers: a round started, or stopping
  std::condition_variable finished_;       // caller: `busy_` reached 0, or a worker started
  std::uint64_t round_ = 0;                // bumped once per round
  int busy_ = 0;                           // workers still inside the current round
  int started_ = 0;                        // workers that have run setup
  bool stopping_ = false;                  // set once, by the destructor
  std::vector<std::thread> threads_;
};

}  // namespace opara
