#pragma once

#include <atomic>
#include <exception>
#include <mutex>

namespace opara {

// The first error of a run, and the flag that stops every worker taking nodes once one failed.
//
// Locking: fail() and aborted() from any thread (the error under a mutex of its own; the flag is
// stored with release, loaded with acquire). reset(), failed() and rethrow() by the calling thread
// of run() alone, before the workers wake or after they have all left.
class RunFailure {
 public:
  // Keeps `error` unless an earlier one was kept, and aborts the run.
  void fail(std::exception_ptr error);
  [[nodiscard]] bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // For a spinning worker, which takes the scheduler's mutex before it acts on what it read.
  [[nodiscard]] bool aborted_relaxed() const { return aborted_.load(std::memory_order_relaxed); }

  void reset();
  [[nodiscard]] bool failed() const { return error_ != nullptr; }
  [[noreturn]] void rethrow() const { std::rethrow_exception(error_); }

 private:
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;  // guards error_ while workers run
  std::exception_ptr error_;
};

}  // namespace opara
