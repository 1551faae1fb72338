#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace opara::bench {

// A progress bar for long work (timed iterations, capture, profiling) on stderr, drawn only when
// stderr is a terminal, so that logs and pipes get none. Redraws at most ten times a second.
class Progress {
 public:
  Progress(std::string label, std::size_t total);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(std::size_t steps = 1);

  // Whether bars are drawn in this process (stderr is a terminal).
  static bool enabled();

 private:
  void draw();

  std::string label_;
  std::size_t total_;
  std::size_t done_ = 0;
  bool active_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace opara::bench
