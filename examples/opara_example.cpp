// Compiles a model with opara, checks its outputs against eager execution and times both.
//
//   opara_example MODEL [--device auto|cpu|cuda] [--input-shape SHAPES] [--iters N]
//
// MODEL is a TorchScript (.pt) or torch.export (.pt2) file. The inputs are random tensors of the
// shapes in the sidecar MODEL.json that opara's exporter writes, or of --input-shape
// ("x:1x3x224x224,mask:1x32:int64"). Exit code 0: outputs match; 1: an error or a mismatch;
// 2: bad arguments.

#include <opara/opara.h>
#include <torch/cuda.h>

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

constexpr const char* kUsage =
    "usage: opara_example MODEL [--device auto|cpu|cuda] [--input-shape SHAPES] [--iters N]\n";

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
  if (arguments.model.empty() || arguments.iters < 1 ||
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

std::vector<opara::InputSpec> input_specs(const Arguments& arguments, std::uint64_t& seed) {
  if (!arguments.input_shape.empty()) return opara::parse_input_shapes(arguments.input_shape);
  const std::string sidecar = opara::sidecar_path(arguments.model);
  if (!std::filesystem::exists(sidecar)) {
    throw opara::Error(arguments.model + ": no sidecar " + sidecar +
                       " describes the inputs; give them with --input-shape, e.g. --input-shape x:1x3x224x224");
  }
  opara::ModelSpec spec = opara::read_model_spec(sidecar);
  seed = spec.seed;
  return spec.inputs;
}

std::string describe(const opara::InputSpec& spec) {
  std::ostringstream text;
  text << spec.name << ": " << spec.dtype << "[";
  for (std::size_t i = 0; i < spec.shape.size(); ++i) text << (i ? ", " : "") << spec.shape[i];
  text << "]";
  return text.str();
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
  std::uint64_t seed = 0;
  const std::vector<opara::InputSpec> specs = input_specs(arguments, seed);
  std::vector<at::Tensor> inputs = opara::make_inputs(specs, seed);
  for (at::Tensor& input : inputs) input = input.to(device);
  const std::vector<c10::IValue> input_values(inputs.begin(), inputs.end());

  std::cout << "model     " << arguments.model << " (" << graph.size() << " nodes)\n";
  for (const opara::InputSpec& spec : specs) std::cout << "input     " << describe(spec) << "\n";
  std::cout << "device    " << device << "\n";

  // Eager: opara's reference executor, node by node on one stream; on the CPU its outputs equal
  // the model's own forward bit for bit.
  opara::EagerExecutor eager(graph, device);
  const std::vector<at::Tensor> expected = opara::flatten_tensors(eager.run(input_values));

  opara::Options options;
  options.device = device;
  const opara::CompiledModel compiled = opara::compile(graph, inputs, options);
  const opara::CompiledStats stats = compiled.stats();
  std::cout << std::fixed << std::setprecision(3);
  std::cout << "compiled  " << stats.streams << " streams, " << stats.events << " events, " << stats.segments
            << " segment(s) in " << stats.compile_ms << " ms\n";

  const std::vector<at::Tensor> actual = compiled.run(inputs);
  const double tolerance = cuda ? 1e-3 : 1e-5;
  const double difference = opara::max_abs_difference(actual, expected);  // throws on a shape mismatch
  const bool match = outputs_close(actual, expected, tolerance);
  std::cout << std::defaultfloat << std::setprecision(3);
  std::cout << (match ? "outputs match eager" : "outputs DIFFER from eager") << " (" << actual.size()
            << " tensor(s), max |diff| " << difference << ", tolerance " << tolerance
            << (opara::bitwise_equal(actual, expected) ? ", bitwise equal" : "") << ")\n";
  if (!match) return EXIT_FAILURE;

  const double eager_ms = median_ms([&] { eager.run(input_values); }, arguments.iters, cuda);
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
