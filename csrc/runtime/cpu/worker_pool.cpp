#include "runtime/cpu/worker_pool.h"

#include <utility>

namespace opara {

WorkerPool::WorkerPool(int count, std::function<void(int)> setup, std::function<void()> work)
    : setup_(std::move(setup)), work_(std::move(work)) {
  try {
    for (int worker = 0; worker < count; ++worker) threads_.emplace_back([this, worker] { worker_main(worker); });
  } catch (...) {
    stop();  // the destructor does not run when the constructor throws
    throw;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [this] { return started_ == static_cast<int>(threads_.size()); });
}

WorkerPool::~WorkerPool() {
  stop();
}

void WorkerPool::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  round_started_.notify_all();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

void WorkerPool::run_round() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = static_cast<int>(threads_.size());
    ++round_;
  }
  round_started_.notify_all();
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [this] { return busy_ == 0; });
}

void WorkerPool::worker_main(int worker) {
  setup_(worker);
  std::uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  ++started_;
  finished_.notify_all();
  for (;;) {
    round_started_.wait(lock, [&] { return stopping_ || round_ != seen; });
    if (stopping_) return;
    seen = round_;
    lock.unlock();
    work_();
    lock.lock();
    if (--busy_ == 0) finished_.notify_all();
  }
}

}  // namespace opara
