#include "runtime/cpu/thread_jitter.h"

#include <chrono>
#include <functional>
#include <thread>

namespace opara {

ThreadJitter::ThreadJitter(std::uint64_t seed)
    : seed_(seed), random_(seed ^ std::hash<std::thread::id>{}(std::this_thread::get_id())) {}

void ThreadJitter::pause() {
  if (seed_ == 0) return;
  const auto pause = std::uniform_int_distribution<int>(-10, 50)(random_);
  if (pause <= 0) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(pause));
  }
}

}  // namespace opara
