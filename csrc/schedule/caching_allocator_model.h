#pragma once

// LibTorch's CUDA caching allocator as a private graph pool sees it during one capture, without a
// GPU: which segments a sequence of allocations and frees on streams makes it reserve. It follows
// c10/cuda/CUDACachingAllocator.cpp (torch 2.x, default configuration: no expandable segments, no
// max_split_size, no power-of-two rounding):
// - sizes round up to 512 bytes; up to 1 MiB is "small" and packed into 2 MiB segments, larger
//   requests take a 20 MiB segment below 10 MiB and their size rounded up to 2 MiB above;
// - a request takes the smallest free block of its pool on its own stream (a freed block is
//   reused only by the stream that allocated it), split when what remains is at least 512 bytes
//   (small) or over 1 MiB (large);
// - a freed block merges with free neighbours in its segment.
// What the real allocator does past that (releasing cached blocks when cudaMalloc fails, the
// configuration's options) does not happen in a pool that fits the device.

#include <cstddef>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace opara {

// From c10/core/AllocatorConfig.h and CUDACachingAllocator.cpp.
inline constexpr std::size_t kAllocatorMinBlock = 512;
inline constexpr std::size_t kAllocatorSmallSize = 1 << 20;       // largest small request
inline constexpr std::size_t kAllocatorSmallSegment = 2 << 20;    // small requests' segment
inline constexpr std::size_t kAllocatorMinLargeAlloc = 10 << 20;  // from here: a segment of its own
inline constexpr std::size_t kAllocatorLargeSegment = 20 << 20;   // 1-10 MiB requests' segment
inline constexpr std::size_t kAllocatorRoundLarge = 2 << 20;      // larger segments round to this

class CachingAllocatorModel {
 public:
  // Where an allocation lives, to free it.
  struct BlockRef {
    std::size_t segment = 0;
    std::size_t offset = 0;
  };

  // A block of at least `bytes` for `stream`.
  BlockRef allocate(int stream, std::size_t bytes);
  // The block back to its stream's free blocks, merged with its free neighbours.
  void free(BlockRef block);

  // Bytes of every segment reserved so far (the pool's size: nothing is given back in a capture).
  [[nodiscard]] std::size_t reserved_bytes() const { return reserved_; }
  [[nodiscard]] std::size_t segment_count() const { return segments_.size(); }
  // Bytes of blocks in use now, and the most at any time.
  [[nodiscard]] std::size_t allocated_bytes() const { return allocated_; }
  [[nodiscard]] std::size_t peak_allocated_bytes() const { return peak_allocated_; }

  [[nodiscard]] static std::size_t rounded(std::size_t bytes);
  [[nodiscard]] static std::size_t segment_size(std::size_t rounded_bytes);

 private:
  struct Block {
    std::size_t size = 0;
    bool free = false;
  };
  struct Segment {
    int stream = 0;
    bool small = false;
    std::map<std::size_t, Block> blocks;  // by offset, covering the segment
  };
  // A free block in a pool's free set: the allocator's order (stream, size, address).
  using FreeKey = std::tuple<int, std::size_t, std::size_t, std::size_t>;  // stream, size, segment, offset

  std::set<FreeKey>& free_set(bool small) { return small ? free_small_ : free_large_; }
  void make_free(std::size_t segment, std::size_t offset);

  std::vector<Segment> segments_;
  std::set<FreeKey> free_small_;
  std::set<FreeKey> free_large_;
  std::size_t reserved_ = 0;
  std::size_t allocated_ = 0;
  std::size_t peak_allocated_ = 0;
};

}  // namespace opara
