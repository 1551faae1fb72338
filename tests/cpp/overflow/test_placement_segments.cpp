// Segments cut from placements: on random graphs with random placements (views following their
// producers, uncapturable nodes forced to the host), split_segments gives segments that
// validate_segments accepts, and every value crossing a segment boundary leaves its segment once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "opara/placement.h"
#include "overflow/placements.h"
#include "overflow/segments.h"
#include "placement_fixtures.h"

namespace opara {
namespace {

using ::testing::IsEmpty;

TEST(PlacementSegments, RandomPlacementsCutIntoValidSegments) {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Graph graph = testing::random_flagged_dag(5 + seed % 30, 0.25, seed, 0.15, 0.1);
    std::mt19937_64 random(seed);
    std::bernoulli_distribution coin(0.3);
    std::vector<bool> cpu(graph.size());
    for (std::size_t k = 0; k < cpu.size(); ++k) cpu[k] = coin(random);
    const std::vector<Placement> placement = placement_with_cpu_nodes(graph, cpu);
    for (const Node& node : graph.nodes()) {
      if (node.has(kNotCapturable)) {
        EXPECT_EQ(placement[node.id], Placement::kHost);
      }
    }
    const std::vector<bool> host = host_mask(placement);
    const std::vector<Segment> segments = split_segments(graph, host);
    ASSERT_THAT(validate_segments(graph, segments), IsEmpty()) << "seed " << seed;
    std::map<ValueId, int> sent;
    for (std::size_t s = 0; s < segments.size(); ++s) {
      for (NodeId id : segments[s].nodes) {
        EXPECT_EQ(host[id], segments[s].kind == SegmentKind::kHost) << "seed " << seed;
      }
      for (ValueId value : segments[s].output_values) ++sent[value];
    }
    for (std::size_t s = 0; s < segments.size(); ++s) {
      for (ValueId value : segments[s].input_values) {
        if (graph.value(value).producer == kNoNode) continue;
        EXPECT_EQ(sent[value], 1) << "seed " << seed << ": value " << value << " enters segment " << s;
      }
    }
  }
}

TEST(PlacementSegments, GpuPlacementIsOneSegmentWithoutHostNodes) {
  const Graph graph = testing::random_flagged_dag(20, 0.2, 3, 0.2, 0);
  const std::vector<Segment> segments = split_segments(graph, host_mask(gpu_placement(graph)));
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].kind, SegmentKind::kGraph);
}

}  // namespace
}  // namespace opara
