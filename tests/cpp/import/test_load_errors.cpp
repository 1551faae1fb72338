// Every bad input gets an opara::Error that names the file, the node where there is one, and
// what to do.
#include <caffe2/serialize/inline_container.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"

namespace opara {
namespace {

std::string fixture(const std::string& name) {
  return testing::fixture_path(name);
}

// The message load() throws for `path`; fails the test when nothing is thrown.
std::string load_error(const std::string& path) {
  try {
    load(path);
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "load(" << path << ") did not throw";
  return {};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

MATCHER_P(Contains, text, "") {
  return arg.find(text) != std::string::npos;
}

TEST(LoadErrors, MissingFile) {
  const std::string message = load_error("/nonexistent/model.pt");
  EXPECT_THAT(message, Contains("/nonexistent/model.pt"));
  EXPECT_THAT(message, Contains("no such file"));
}

TEST(LoadErrors, Directory) {
  const std::string folder = std::filesystem::temp_directory_path().string();
  EXPECT_THAT(load_error(folder), Contains("is a directory"));
}

TEST(LoadErrors, EmptyFile) {
  const std::string path = testing::scratch_path("empty.pt");
  write_bytes(path, "");
  EXPECT_THAT(load_error(path), Contains("empty"));
}

TEST(LoadErrors, RandomBytes) {
  const std::string path = testing::scratch_path("random.pt");
  std::mt19937 random(1);
  std::string bytes(4096, '\0');
  for (char& byte : bytes) byte = static_cast<char>(random());
  write_bytes(path, bytes);
  const std::string message = load_error(path);
  EXPECT_THAT(message, Contains(path));
  EXPECT_THAT(message, Contains("not a PyTorch model archive"));
}

TEST(LoadErrors, TruncatedArchivesOfBothFormats) {
  for (const char* extension : {"pt", "pt2"}) {
    const std::string source = fixture(std::string("custom_op.") + extension);
    std::ifstream in(source, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 100u) << source;
    const std::string path = testing::scratch_path(std::string("truncated.") + extension);
    write_bytes(path, bytes.substr(0, bytes.size() / 2));
    const std::string message = load_error(path);
    EXPECT_THAT(message, Contains(path));
    EXPECT_THAT(message, Contains("damaged or truncated"));
  }
}

TEST(LoadErrors, ZipThatIsNoModel) {
  const std::string path = testing::scratch_path("notes.zip");
  {
    caffe2::serialize::PyTorchStreamWriter writer(path);
    const std::string text = "hello";
    writer.writeRecord("notes.txt", text.data(), text.size());
    writer.writeEndOfFile();
  }
  EXPECT_THAT(load_error(path), Contains("holds no TorchScript code and no exported program"));
}

TEST(LoadErrors, TorchSaveFileIsNotAModel) {
  OPARA_REQUIRE_MODEL("inplace");
  EXPECT_THAT(load_error(testing::model_path("inplace", "ref.pt")), Contains("a torch.save file"));
}

TEST(LoadErrors, IfThatSurvivesFreezingNamesTheNodeAndItsSource) {
  const std::string message = load_error(fixture("control_flow.pt"));
  EXPECT_THAT(message, Contains("control_flow.pt"));
  EXPECT_THAT(message, Contains("prim::If at code/__torch__.py:"));
  EXPECT_THAT(message, Contains("torch.jit.trace"));
}

TEST(LoadErrors, LoopThatSurvivesFreezing) {
  EXPECT_THAT(load_error(fixture("loop.pt")), Contains("prim::Loop"));
}

TEST(LoadErrors, UnregisteredOperatorInEitherFormat) {
  const std::string script_message = load_error(fixture("custom_op.pt"));
  EXPECT_THAT(script_message, Contains("opara_test::scale"));
  EXPECT_THAT(script_message, Contains("does not register"));
  const std::string message = load_error(fixture("custom_op.pt2"));
  EXPECT_THAT(message, Contains("node 1 (torch.ops.opara_test.scale.default)"));
  EXPECT_THAT(message, Contains("not registered"));
}

TEST(LoadErrors, HigherOrderControlFlowInAnExportedProgram) {
  const std::string message = load_error(fixture("cond.pt2"));
  EXPECT_THAT(message, Contains("torch.ops.higher_order.cond"));
  EXPECT_THAT(message, Contains("make_fixtures.py:"));  // the model's own source line
}

// A dynamic-shape export loads: its symbolic batch is recorded with its range, for compile() to
// check the inputs against (test_symbolic_sizes.cpp compiles it).
TEST(LoadErrors, ADynamicShapeExportLoadsWithItsSymbolicSizes) {
  const Graph graph = load(fixture("dynamic_batch.pt2"));
  ASSERT_EQ(graph.symbolic_input_sizes.size(), 1u);
  const std::vector<InputSize>& x = graph.symbolic_input_sizes[0];
  ASSERT_EQ(x.size(), 2u);
  EXPECT_FALSE(x[0].symbol.empty());
  EXPECT_EQ(x[0].min, 2);
  EXPECT_EQ(x[0].max, 64);
  EXPECT_TRUE(x[1].symbol.empty());
  EXPECT_EQ(x[1].fixed, 4);
}

TEST(LoadErrors, HostSyncIsNoImportErrorButIsFlagged) {
  const Graph graph = load(fixture("item.pt"));
  bool flagged = false;
  for (const Node& node : graph.nodes()) {
    if (node.kind == "aten::item") flagged = node.has(kNotCapturable);
  }
  EXPECT_TRUE(flagged);
}

}  // namespace
}  // namespace opara
