#include "schedule/caching_allocator_model.h"

#include <algorithm>
#include <iterator>

#include "support/internal_assert.h"

namespace opara {

std::size_t CachingAllocatorModel::rounded(std::size_t bytes) {
  if (bytes < kAllocatorMinBlock) return kAllocatorMinBlock;
  return kAllocatorMinBlock * ((bytes + kAllocatorMinBlock - 1) / kAllocatorMinBlock);
}

std::size_t CachingAllocatorModel::segment_size(std::size_t rounded_bytes) {
  if (rounded_bytes <= kAllocatorSmallSize) return kAllocatorSmallSegment;
  if (rounded_bytes < kAllocatorMinLargeAlloc) return kAllocatorLargeSegment;
  return kAllocatorRoundLarge * ((rounded_bytes + kAllocatorRoundLarge - 1) / kAllocatorRoundLarge);
}

CachingAllocatorModel::BlockRef CachingAllocatorModel::allocate(int stream, std::size_t bytes) {
  const std::size_t size = rounded(bytes);
  const bool small = size <= kAllocatorSmallSize;
  std::set<FreeKey>& free = free_set(small);
  // The smallest free block of this stream that fits, the lowest address among equals.
  auto found = free.lower_bound({stream, size, 0, 0});
  std::size_t segment = 0;
  std::size_t offset = 0;
  if (found != free.end() && std::get<0>(*found) == stream) {
    segment = std::get<2>(*found);
    offset = std::get<3>(*found);
    free.erase(found);
  } else {
    segment = segments_.size();
    Segment& made = segments_.emplace_back();
    made.stream = stream;
    made.small = small;
    made.blocks[0] = Block{segment_size(size), true};
    reserved_ += made.blocks[0].size;
  }
  Segment& home = segments_[segment];
  Block& block = home.blocks.at(offset);
  const std::size_t remaining = block.size - size;
  const bool split = small ? remaining >= kAllocatorMinBlock : remaining > kAllocatorSmallSize;
  if (split) {
    block.size = size;
    home.blocks[offset + size] = Block{remaining, true};
    free.insert({stream, remaining, segment, offset + size});
  }
  Block& taken = home.blocks.at(offset);
  taken.free = false;
  allocated_ += taken.size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return {segment, offset};
}

void CachingAllocatorModel::free(BlockRef ref) {
  OPARA_ASSERT(ref.segment < segments_.size(), "freeing a block of segment {} of {}", ref.segment, segments_.size());
  Block& block = segments_[ref.segment].blocks.at(ref.offset);
  OPARA_ASSERT(!block.free, "freeing the block at {} of segment {} twice", ref.offset, ref.segment);
  allocated_ -= block.size;
  make_free(ref.segment, ref.offset);
}

void CachingAllocatorModel::make_free(std::size_t segment, std::size_t offset) {
  Segment& home = segments_[segment];
  std::set<FreeKey>& free = free_set(home.small);
  auto block = home.blocks.find(offset);
  block->second.free = true;
  // Merge with the free block after it, then with the one before it.
  auto next = std::next(block);
  if (next != home.blocks.end() && next->second.free) {
    free.erase({home.stream, next->second.size, segment, next->first});
    block->second.size += next->second.size;
    home.blocks.erase(next);
  }
  if (block != home.blocks.begin()) {
    auto previous = std::prev(block);
    if (previous->second.free) {
      free.erase({home.stream, previous->second.size, segment, previous->first});
      previous->second.size += block->second.size;
      home.blocks.erase(block);
      block = previous;
    }
  }
  free.insert({home.stream, block->second.size, segment, block->first});
}

}  // namespace opara
