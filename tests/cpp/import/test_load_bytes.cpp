// A torch.export archive held in memory (what a torch.compile graph hands over) reads like the
// same archive as a file, and bad bytes get the same kind of error, naming what stands for the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

std::string bytes_of(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

std::string error_of(std::string bytes, const std::string& name) {
  try {
    load_exported_program(std::move(bytes), name);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(LoadBytes, AnArchiveInMemoryGivesTheGraphTheFileGives) {
  OPARA_REQUIRE_MODEL("branchy");
  const std::string path = testing::model_path("branchy", "pt2");
  const Graph from_file = load(path);
  const Graph from_bytes = load_exported_program(bytes_of(path), "branchy in memory");
  EXPECT_EQ(from_bytes.source_path, "branchy in memory");
  ASSERT_EQ(from_bytes.size(), from_file.size());
  for (const Node& node : from_file.nodes()) EXPECT_EQ(from_bytes.node(node.id).kind, node.kind);
  EXPECT_EQ(from_bytes.edges().size(), from_file.edges().size());
  const testing::FormatReference reference = testing::format_reference("branchy", "pt2");
  EXPECT_TRUE(
      bitwise_equal(flatten_tensors(EagerExecutor(from_bytes, c10::kCPU).run(reference.inputs)), reference.expected));
}

TEST(LoadBytes, BadBytesNameWhatStandsForTheFile) {
  EXPECT_THAT(error_of("", "graph 0"), HasSubstr("graph 0: the archive is empty"));
  EXPECT_THAT(error_of("not a zip at all", "graph 1"), HasSubstr("graph 1: not a PyTorch model archive"));
  const std::string archive = bytes_of(testing::fixture_path("asserts.pt2"));
  EXPECT_THAT(error_of(archive.substr(0, archive.size() / 2), "graph 2"), HasSubstr("graph 2"));
  // A TorchScript archive holds no exported program.
  EXPECT_THAT(error_of(bytes_of(testing::fixture_path("item.pt")), "graph 3"),
              HasSubstr("graph 3: a zip archive without models/*.json"));
}

}  // namespace
}  // namespace opara
