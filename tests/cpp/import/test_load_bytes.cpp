// A model archive held in memory (what a torch.compile graph or opara.compile(module) hands over)
// reads like the same archive as a file, and bad bytes, a damaged program among them, get the same
// kind of error, naming what stands for the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <caffe2/serialize/inline_container.h>
#include <torch/version.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <fmt/format.h>
#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"

namespace opara {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

TEST(LoadBytes, EitherFormatInMemoryGivesTheGraphItsFileGives) {
  for (const std::string file : {"item.pt", "asserts.pt2"}) {
    const std::string path = testing::fixture_path(file);
    const Graph from_file = load(path);
    const Graph from_bytes = load_archive(bytes_of(path), "MyModule");
    EXPECT_EQ(from_bytes.source_path, "MyModule");
    ASSERT_EQ(from_bytes.size(), from_file.size()) << file;
    for (const Node& node : from_file.nodes()) EXPECT_EQ(from_bytes.node(node.id).kind, node.kind) << file;
  }
  try {
    load_archive("not a zip at all", "MyModule");
    FAIL() << "loaded bytes that are no archive";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("MyModule: not a PyTorch model archive"));
  }
}

// The archive at `path` with its program (models/<name>.json) replaced by `program`.
std::string with_program(const std::string& path, const std::string& record, const std::string& program) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
    out.append(static_cast<const char*>(data), size);
    return size;
  });
  for (const std::string& name : reader.getAllRecords()) {
    if (name == record) {
      writer.writeRecord(name, program.data(), program.size());
    } else {
      auto [data, size] = reader.getRecord(name);
      writer.writeRecord(name, data.get(), size);
    }
  }
  writer.writeEndOfFile();
  return out;
}

// The JSON record of the archive at `path` whose name starts with `prefix` ("models/" for the
// program, "data/weights/" for the weights config), and its name.
std::pair<std::string, nlohmann::json> json_record(const std::string& path, const std::string& prefix) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  for (const std::string& name : reader.getAllRecords()) {
    if (name.rfind(prefix, 0) == 0 && name.size() > 5 && name.substr(name.size() - 5) == ".json") {
      auto [data, size] = reader.getRecord(name);
      return {name, nlohmann::json::parse(std::string(static_cast<const char*>(data.get()), size))};
    }
  }
  ADD_FAILURE() << path << " holds no " << prefix << "*.json";
  return {};
}

// The program's objects and the keys in them, in order (for renaming a key).
void collect_keys(const nlohmann::json& value, const nlohmann::json::json_pointer& at,
                  std::vector<std::pair<nlohmann::json::json_pointer, std::string>>& keys) {
  if (value.is_object()) {
    for (const auto& item : value.items()) {
      keys.emplace_back(at, item.key());
      collect_keys(item.value(), at / item.key(), keys);
    }
  } else if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) collect_keys(value[i], at / i, keys);
  }
}

// Loads the archive with `damaged` as its program: an opara::Error naming `name` is right, and so
// is a graph (some changes are harmless); anything else is a failure.
bool refused_naming_the_file(const std::string& path, const std::string& record, const nlohmann::json& damaged,
                             const std::string& name, const std::string& change) {
  try {
    load_archive(with_program(path, record, damaged.dump()), name);
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr(name + ": ")) << change;
    return true;
  } catch (const std::exception& error) {
    ADD_FAILURE() << change << " threw \"" << error.what() << "\", naming no file";
  }
  return false;
}

// Every field of the program given a value of another kind (a number for a string, an object for
// a number, ...), and every key renamed (a union then matches none of its kinds, and LibTorch's
// schema types leave it empty), one change at a time: whatever those types throw (std::get,
// nlohmann), the error is opara's and names the file.
TEST(LoadBytes, AProgramWithAFieldOfTheWrongKindNamesTheFile) {
  const std::string path = testing::fixture_path("asserts.pt2");
  const auto [record, program] = json_record(path, "models/");
  ASSERT_FALSE(record.empty());
  const nlohmann::json flat = program.flatten();  // named: items() refers to it
  std::vector<nlohmann::json::json_pointer> fields;
  for (const auto& field : flat.items()) fields.emplace_back(field.key());
  std::vector<std::pair<nlohmann::json::json_pointer, std::string>> keys;
  collect_keys(program, nlohmann::json::json_pointer(), keys);
  ASSERT_GT(fields.size(), 50u);
  ASSERT_GT(keys.size(), 50u);
  int refused = 0;
  for (std::size_t k = 0; k < fields.size(); ++k) {
    nlohmann::json damaged = program;
    nlohmann::json& field = damaged[fields[k]];
    if (field.is_string()) {
      field = 7;
    } else if (field.is_number() || field.is_boolean()) {
      field = nlohmann::json::object({{"as_what", "?"}});
    } else {
      field = "?";
    }
    refused += refused_naming_the_file(path, record, damaged, fmt::format("value {}", k),
                                       "changing the kind of " + fields[k].to_string());
  }
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const auto& [object, key] = keys[k];
    nlohmann::json damaged = program;
    nlohmann::json& renamed = damaged[object];
    renamed["not_" + key] = renamed[key];
    renamed.erase(key);
    refused += refused_naming_the_file(path, record, damaged, fmt::format("key {}", k),
                                       "renaming " + (object / key).to_string());
  }
  EXPECT_GT(refused, 0);
}

// asserts.pt2 (relu, add(relu, 1.0), max, lt, _assert_async, mul) with argument `argument` of
// node `node` replaced by `arg`: the message load_exported_program() throws.
std::string error_with_argument(int node, int argument, const nlohmann::json& arg) {
  const std::string path = testing::fixture_path("asserts.pt2");
  auto [record, program] = json_record(path, "models/");
  program["graph_module"]["graph"]["nodes"][node]["inputs"][argument]["arg"] = arg;
  return error_of(with_program(path, record, program.dump()), "asserts.pt2");
}

// Each argument opara cannot pass has its own message: the file, the node, the argument, what is
// wrong and what to do.
TEST(LoadBytes, ATensorNoEarlierNodeDefinesIsADamagedProgram) {
  const std::string message = error_with_argument(1, 0, {{"as_tensor", {{"name", "nowhere"}}}});
  EXPECT_THAT(message, HasSubstr("asserts.pt2: node 1 (torch.ops.aten.add.Tensor) at "));
  EXPECT_THAT(message, HasSubstr("argument self reads the tensor nowhere, which no placeholder or earlier node "
                                 "defines; the program is damaged. Write the file again with torch.export.save"));
  EXPECT_THAT(message, Not(HasSubstr("static shapes")));
}

TEST(LoadBytes, AFloatNoEarlierNodeComputesIsADamagedProgram) {
  const std::string message = error_with_argument(1, 1, {{"as_sym_float", {{"as_name", "item_2"}}}});
  EXPECT_THAT(message, HasSubstr("asserts.pt2: node 1 (torch.ops.aten.add.Tensor) at "));
  EXPECT_THAT(message, HasSubstr("argument other reads the float item_2, which no placeholder or earlier node "
                                 "defines; the program is damaged"));
}

TEST(LoadBytes, ASizeOrConditionNoEarlierNodeComputesIsADamagedProgram) {
  const std::string size = error_with_argument(1, 1, {{"as_sym_int", {{"as_name", "sym_size_int_9"}}}});
  EXPECT_THAT(size, HasSubstr("argument other reads the size sym_size_int_9, which no placeholder or earlier node "
                              "defines; the program is damaged"));
  const std::string condition = error_with_argument(1, 1, {{"as_sym_bool", {{"as_name", "eq"}}}});
  EXPECT_THAT(condition, HasSubstr("argument other reads the condition eq, which no placeholder or earlier node "
                                   "defines; the program is damaged"));
}

TEST(LoadBytes, AListOfConditionsOnSizesIsRefusedSayingWhatOparaRuns) {
  const std::string message =
      error_with_argument(1, 1, {{"as_sym_bools", nlohmann::json::array({nlohmann::json{{"as_name", "eq"}}})}});
  EXPECT_THAT(message, HasSubstr("argument other is a list of conditions on symbolic sizes, which opara does not "
                                 "pass. opara runs dynamic-shape programs whose symbolic sizes are their inputs' "
                                 "sizes"));
  EXPECT_THAT(message, HasSubstr("torch.compile(model, backend=\"opara\")"));
}

TEST(LoadBytes, AnUnknownDtypeCodeAsksForTheMatchingTorch) {
  const std::string message = error_with_argument(1, 1, {{"as_scalar_type", 99}});
  EXPECT_THAT(message, HasSubstr("asserts.pt2: node 1 (torch.ops.aten.add.Tensor) at "));
  EXPECT_THAT(message, HasSubstr("argument other is a dtype of code 99, which this LibTorch does not know. Export "
                                 "the model again with torch " TORCH_VERSION));
}

TEST(LoadBytes, AnArgumentOfAKindNoOperatorTakesIsNamed) {
  const nlohmann::json object = {{"as_custom_obj", {{"name", "obj"}, {"class_fqn", "__torch__.Counter"}}}};
  const std::string message = error_with_argument(1, 1, object);
  EXPECT_THAT(message, HasSubstr("asserts.pt2: node 1 (torch.ops.aten.add.Tensor) at "));
  EXPECT_THAT(message, HasSubstr("argument other is a custom class object (torch.classes), which opara cannot pass "
                                 "to an operator. Export the model without it"));
}

// counter.pt2's weights config with the 3x3 weight's metadata changed by `change`.
std::string error_with_weight_meta(const std::function<void(nlohmann::json&)>& change) {
  const std::string path = testing::fixture_path("counter.pt2");
  auto [record, config] = json_record(path, "data/weights/");
  change(config["config"]["weight"]["tensor_meta"]);
  return error_of(with_program(path, record, config.dump()), "counter.pt2");
}

TEST(LoadBytes, AWeightOfSymbolicSizeIsRefusedSayingWhatOparaRuns) {
  const std::string message = error_with_weight_meta([](nlohmann::json& meta) {
    meta["sizes"][0] = {{"as_expr", {{"expr_str", "s0"}}}};
  });
  EXPECT_THAT(message, HasSubstr("counter.pt2: the weight weight has the symbolic size s0 in its metadata: opara "
                                 "runs dynamic-shape programs whose symbolic sizes are their inputs' sizes"));
  EXPECT_THAT(message, Not(HasSubstr("damaged")));
}

TEST(LoadBytes, AWeightOfUnknownDtypeAsksForTheMatchingTorch) {
  const std::string message = error_with_weight_meta([](nlohmann::json& meta) { meta["dtype"] = 99; });
  EXPECT_THAT(message, HasSubstr("counter.pt2: the weight weight has a dtype of code 99, which this LibTorch does "
                                 "not know. Export the model again with torch " TORCH_VERSION));
}

TEST(LoadBytes, AWeightLargerThanItsStorageIsADamagedArchive) {
  const std::string message = error_with_weight_meta([](nlohmann::json& meta) {
    meta["sizes"][0] = {{"as_int", 300}};
  });
  EXPECT_THAT(message, HasSubstr("counter.pt2: the weight weight does not fit its metadata"));
  EXPECT_THAT(message, HasSubstr("the archive is damaged"));
}

}  // namespace
}  // namespace opara
