// Compiles a model with opara, checks its outputs against eager execution and times both.
//
//   opara_example MODEL [--device auto|cpu|cuda] [--input-shape SHAPES] [--iters N]
//
// MODEL is a TorchScript (.pt) or torch.export (.pt2) file; the inputs are random float tensors of
// the shapes --input-shape gives ("1x3x224x224,1x32"). The reference is what a LibTorch user has:
// the TorchScript module's own forward, or for a .pt2 (which LibTorch cannot run by itself) opara's
// sequential run on the CPU. It uses opara's public API alone. Exit code 0: outputs match; 1: an
// error or a mismatch; 2: bad arguments.

#include <opara/opara.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Arguments {
  std::string model;
  std::string device = "auto";
  std::string input_shape;
  int iters = 20;
};

constexpr const char* kUsage = "usage: opara_example MODEL --input-shape SHAPES [--device auto|cpu|cuda] [--iters N]\n";

// Bad arguments: nullopt, after saying why.
std::optional<Arguments> parse_arguments(int argc, char** argv) {
  Arguments arguments;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    const bool has_value = i + 1 < argc;
    if (word == "--device" && has_value) {
      arguments.device = argv[++i];
    } else if (word == "--input-shape" && has_value) {
      arguments.input_shape = argv[++i];
    } else if (word == "--iters" && has_value) {
      arguments.iters = std::atoi(argv[++i]);
    } else if (word.rfind("--", 0) != 0 && arguments.model.empty()) {
      arguments.model = word;
    } else {
      std::cerr << "opara_example: unexpected argument " << word << "\n" << kUsage;
      return std::nullopt;
    }
  }
  if (arguments.model.empty() || arguments.input_shape.empty() || arguments.iters < 1 ||
      (arguments.device != "auto" && arguments.device != "cpu" && arguments.device != "cuda")) {
    std::cerr << kUsage;
    return std::nullopt;
  }
  return arguments;
}

c10::Device choose_device(const std::string& wanted) {
  const bool gpu = torch::cuda::is_available();
  if (wanted == "cuda" && !gpu) throw opara::Error("--device cuda: no CUDA GPU is visible to LibTorch");
  return (wanted == "cuda" || (wanted == "auto" && gpu)) ? c10::Device(c10::kCUDA) : c10::Device(c10::kCPU);
}

// "1x3x224x224,1x32" -> {{1, 3, 224, 224}, {1, 32}}; throws naming the piece it cannot read.
std::vector<std::vector<std::int64_t>> parse_shapes(const std::string& text) {
  std::vector<std::vector<std::int64_t>> shapes;
  std::istringstream inputs(text);
  for (std::string input; std::getline(inputs, input, ',');) {
    std::vector<std::int64_t>& shape = shapes.emplace_back();
    std::istringstream sizes(input);
    for (std::string size; std::getline(sizes, size, 'x');) {
      if (size.empty() || size.find_first_not_of("0123456789") != std::string::npos) {
        throw opara::Error("--input-shape " + text + ": '" + input + "' is not sizes joined by 'x' (1x3x224x224)");
      }
      shape.push_back(std::stoll(size));
    }
  }
  return shapes;
}

// The tensors of a forward's result: a tensor, or a tuple or list of them.
std::vector<at::Tensor> tensors_of(const c10::IValue& value) {
  if (value.isTensor()) return {value.toTensor()};
  std::vector<at::Tensor> tensors;
  const auto elements = value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec();
  for (const c10::IValue& element : elements) tensors.push_back(element.toTensor());
  return tensors;
}

// Median milliseconds of `iters` calls after two warm-up calls. On CUDA each call is followed by
// a synchronisation, so the time covers the GPU work and not only its launch.
double median_ms(const std::function<void()>& call, int iters, bool cuda) {
  const auto finish = [cuda] {
    if (cuda) torch::cuda::synchronize();
  };
  for (int i = 0; i < 2; ++i) call();
  finish();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    finish();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + iters / 2, times.end());
  return times[iters / 2];
}

// Exact on the CPU up to the order of floating-point reductions (the compiled model's workers may
// use fewer intra-op threads than eager); on the GPU kernels may differ between streams.
bool outputs_close(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected, double tolerance) {
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!actual[i].cpu().allclose(expected[i].cpu(), tolerance, tolerance)) return false;
  }
  return true;
}

int run(const Arguments& arguments) {
  const c10::Device device = choose_device(arguments.device);
  const bool cuda = device.is_cuda();

  // Reading the model first: a bad path fails here, naming the file.
  const opara::Graph graph = opara::load(arguments.model);
  const bool torchscript = opara::detect_format(arguments.model) == opara::ModelFormat::kTorchScript;
  torch::manual_seed(0);
  std::vector<at::Tensor> inputs;
  for (const auto& shape : parse_shapes(arguments.input_shape)) inputs.push_back(torch::randn(shape).to(device));

  std::cout << "model     " << arguments.model << " (" << graph.size() << " nodes)\n";
  std::cout << "inputs    " << arguments.input_shape << "\n";
  std::cout << "device    " << device << "\n";

  // The reference: the TorchScript module's forward on the same device, or opara on one stream
  // of the CPU for a .pt2.
  std::function<std::vector<at::Tensor>()> reference;
  torch::jit::Module module;
  if (torchscript) {
    module = torch::jit::load(arguments.model, device);
    module.eval();
    const std::vector<c10::IValue> values(inputs.begin(), inputs.end());
    reference = [&module, values] {
      const torch::NoGradGuard no_grad;
      return tensors_of(module.forward(values));
    };
  } else {
    opara::Options sequential;
    sequential.device = c10::Device(c10::kCPU);
    sequential.plan.streams = opara::StreamPolicy::kSingle;
    sequential.cpu.tuning_ms = 0;
    std::vector<at::Tensor> cpu_inputs;
    for (const at::Tensor& input : inputs) cpu_inputs.push_back(input.cpu());
    reference = [compiled = opara::compile(graph, cpu_inputs, sequential), cpu_inputs] {
      return compiled.run(cpu_inputs);
    };
  }
  const std::vector<at::Tensor> expected = reference();

  opara::Options options;
  options.device = device;
  const opara::CompiledModel compiled = opara::compile(graph, inputs, options);
  const opara::CompiledStats stats = compiled.stats();
  std::cout << std::fixed << std::setprecision(3);
  std::cout << "compiled  " << stats.streams << " streams, " << stats.events << " events, " << stats.segments
            << " segment(s) in " << stats.compile_ms << " ms\n";

  const std::vector<at::Tensor> actual = compiled.run(inputs);
  const double tolerance = cuda ? 1e-3 : 1e-5;
  if (actual.size() != expected.size()) throw opara::Error("the compiled model returns a different number of outputs");
  double difference = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    difference = std::max(difference, (actual[i].cpu() - expected[i].cpu()).abs().max().item<double>());
  }
  const bool match = outputs_close(actual, expected, tolerance);
  std::cout << std::defaultfloat << std::setprecision(3);
  std::cout << (match ? "outputs match eager" : "outputs DIFFER from eager") << " (" << actual.size()
            << " tensor(s), max |diff| " << difference << ", tolerance " << tolerance
            << (difference == 0 ? ", equal" : "") << ")\n";
  if (!match) return EXIT_FAILURE;

  const double eager_ms = median_ms([&] { reference(); }, arguments.iters, cuda && torchscript);
  const double compiled_ms = median_ms([&] { compiled.run(inputs); }, arguments.iters, cuda);
  std::cout << std::fixed << std::setprecision(3);
  std::cout << "eager     " << eager_ms << " ms (median of " << arguments.iters << ")\n";
  std::cout << "opara     " << compiled_ms << " ms (median of " << arguments.iters << ")\n";
  std::cout << std::setprecision(2) << "speedup   " << eager_ms / compiled_ms << "x\n";
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Arguments> arguments = parse_arguments(argc, argv);
  if (!arguments) return 2;
  try {
    return run(*arguments);
  } catch (const opara::Error& error) {
    std::cerr << "error: " << error.what() << "\n";
  } catch (const c10::Error& error) {
    std::cerr << "error: " << error.what_without_backtrace() << "\n";
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << "\n";
  }
  return EXIT_FAILURE;
}
