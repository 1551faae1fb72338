#include "runtime/cpu/run_failure.h"

#include <utility>

namespace opara {

void RunFailure::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::move(error);
  }
  aborted_.store(true, std::memory_order_release);
}

void RunFailure::reset() {
  aborted_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
}

}  // namespace opara
