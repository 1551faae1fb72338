#pragma once

#include <cstdint>
#include <optional>
#include <random>

namespace opara {

// Random pauses of a few microseconds before a worker's nodes and split pieces, when tests give a
// seed (CpuExecutorOptions::jitter_seed), so that they see many thread interleavings; nothing
// without one. One per worker and run, used by that thread alone: no locking.
class ThreadJitter {
 public:
  // The seed is mixed with the calling thread's id, so that workers pause differently.
  explicit ThreadJitter(std::uint64_t seed);

  // Yields or sleeps up to 50 us at random; returns at once without a seed.
  void pause();

 private:
  // Seeded only with a seed: a run of the model makes one, and seeding costs a microsecond.
  std::optional<std::mt19937_64> random_;
};

}  // namespace opara
