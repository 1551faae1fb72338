#pragma once

// What the extension keeps per key Python hands out (opara/_regions.py numbers each region it
// registers): a map that several worker threads read while Python adds and removes entries.

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace opara::ext {

template <typename Value>
class KeyedRegistry {
 public:
  void add(std::int64_t key, std::shared_ptr<Value> value) {
    const std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = std::move(value);
  }
  void remove(std::int64_t key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    values_.erase(key);
  }
  // Null when nothing is registered under `key`.
  [[nodiscard]] std::shared_ptr<Value> find(std::int64_t key) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = values_.find(key);
    return found == values_.end() ? nullptr : found->second;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::int64_t, std::shared_ptr<Value>> values_;
};

}  // namespace opara::ext
