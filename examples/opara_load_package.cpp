// Loads a package opara.package made in Python and runs it without Python: checks its outputs
// against the module's (a file torch.save wrote in Python) and times it.
//
//   opara_load_package PACKAGE [--expect OUTPUTS.pt] [--iters N]
//
// The inputs are the example inputs the package holds. OUTPUTS.pt: the module's outputs on those
// inputs, a list of tensors saved with torch.save. Exit code 0: it ran (and matched); 1: an error or
// a mismatch; 2: bad arguments. It uses opara's public API alone.

#include <opara/package.h>
#include <torch/serialize.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Arguments {
  std::string package;
  std::string expect;
  int iters = 20;
};

constexpr const char* kUsage = "usage: opara_load_package PACKAGE [--expect OUTPUTS.pt] [--iters N]\n";

std::optional<Arguments> parse_arguments(int argc, char** argv) {
  Arguments arguments;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    const bool has_value = i + 1 < argc;
    if (word == "--expect" && has_value) {
      arguments.expect = argv[++i];
    } else if (word == "--iters" && has_value) {
      arguments.iters = std::atoi(argv[++i]);
    } else if (word.rfind("--", 0) != 0 && arguments.package.empty()) {
      arguments.package = word;
    } else {
      std::cerr << "opara_load_package: unexpected argument " << word << "\n" << kUsage;
      return std::nullopt;
    }
  }
  if (arguments.package.empty() || arguments.iters < 1) {
    std::cerr << kUsage;
    return std::nullopt;
  }
  return arguments;
}

// The tensors torch.save wrote in Python (a list of tensors).
std::vector<at::Tensor> saved_tensors(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error(path + ": no such file");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const c10::IValue saved = torch::pickle_load(bytes);  // kept: the list below is a view of it
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& value : saved.toListRef()) tensors.push_back(value.toTensor());
  return tensors;
}

double median_ms(const opara::CompiledModel& model, const std::vector<at::Tensor>& inputs, int iters) {
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    (void)model.run(inputs);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Arguments> arguments = parse_arguments(argc, argv);
  if (!arguments) return 2;
  try {
    const opara::PackageInfo info = opara::read_package_info(arguments->package);
    const auto start = std::chrono::steady_clock::now();
    const opara::CompiledModel model = opara::load_package(arguments->package);
    const std::vector<at::Tensor> inputs = opara::package_example_inputs(arguments->package);
    const std::vector<at::Tensor> outputs = model.run(inputs);
    const double first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << std::fixed << std::setprecision(3) << info.name << ": " << info.regions << " AOTInductor region(s) on "
              << info.device << ", loaded and run once in " << first_s << " s\n";
    if (!arguments->expect.empty()) {
      const std::vector<at::Tensor> expected = saved_tensors(arguments->expect);
      if (expected.size() != outputs.size()) {
        std::cerr << "error: " << outputs.size() << " outputs, the module gave " << expected.size() << "\n";
        return 1;
      }
      for (std::size_t i = 0; i < outputs.size(); ++i) {
        if (!at::allclose(outputs[i].cpu(), expected[i], 1e-4, 1e-5)) {
          std::cerr << "error: output " << i << " differs from the module's by "
                    << (outputs[i].cpu() - expected[i]).abs().max().item<double>() << "\n";
          return 1;
        }
      }
      std::cout << "outputs match the module's\n";
    }
    std::cout << "steady: " << median_ms(model, inputs, arguments->iters) << " ms per run (median of "
              << arguments->iters << ")\n";
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
