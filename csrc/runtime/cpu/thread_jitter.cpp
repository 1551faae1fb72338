#include "runtime/cpu/thread_jitter.h"

#include <chrono>
#include <functional>
#include <thread>

namespace opara {

ThreadJitter::ThreadJitter(std::uint64_t seed) {
  if (seed != 0) random_.emplace(seed ^ std::hash<std::thread::id>{}(std::this_thread::get_id()));
}

void ThreadJitter::pause() {
  if (!random_) return;
  const auto pause = std::uniform_int_distribution<int>(-10, 50)(*random_);
  if (pause <= 0) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(pause));
  }
}

}  // namespace opara
