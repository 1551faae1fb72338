#include "progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace opara::bench {
namespace {

constexpr int kBarWidth = 30;
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);

}  // namespace

bool Progress::enabled() {
  static const bool terminal = isatty(fileno(stderr)) != 0;
  return terminal;
}

Progress::Progress(std::string label, std::size_t total)
    : label_(std::move(label)), total_(std::max<std::size_t>(total, 1)), active_(enabled()) {
  if (active_) draw();
}

Progress::~Progress() {
  if (!active_) return;
  fmt::print(stderr, "\r\033[K");  // erase the bar: what follows is printed where it was
  std::fflush(stderr);
}

void Progress::advance(std::size_t steps) {
  done_ = std::min(total_, done_ + steps);
  if (!active_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done_ == total_ || now - last_draw_ >= kRedrawEvery) draw();
}

void Progress::draw() {
  last_draw_ = std::chrono::steady_clock::now();
  const int filled = static_cast<int>(kBarWidth * done_ / total_);
  fmt::print(stderr, "\r\033[K{} [{:=<{}}{:<{}}] {}/{}", label_, "", filled, "", kBarWidth - filled, done_, total_);
  std::fflush(stderr);
}

}  // namespace opara::bench
